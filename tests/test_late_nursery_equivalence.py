"""The call's late-opened nursery against one opened before the body, over generated bodies.

``test_late_nursery.py`` checks named cases; here Hypothesis writes the tool bodies: the
programs of ``test_gate_scope_equivalence`` (waits, firing the caller's signal, raising,
scopes of four kinds, nurseries with children, ``nursery.start()``, hand-raised
``trio.Cancelled``, catching and swallowing), plus ``ctx.start_soon`` of a program from
whichever task runs the step: the body's, a child of one of its nurseries, or a task it
started into a nursery that outlives the call.  The caller's signal and an enclosing scope
are cancelled at generated times.  Each body runs twice, with the call's nursery opened
on the first ``ctx.start_soon`` (the registry's way) and before the body starts, under
the same virtual clock and scheduling seed; everything either run shows must be the same.
"""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st
from test_gate_scope_equivalence import (
    EXTERNAL,
    Interpreter,
    Program,
    Step,
    observe_call,
    programs,
)

import trio_tools._dispatch as dispatch_module
from trio_tools import (
    CancelSource,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    define_tool,
)


def spawns(inner: st.SearchStrategy[Program]) -> list[st.SearchStrategy[Step]]:
    """``("spawn", program)``: ``ctx.start_soon`` of a program (weighed twice)."""
    spawn = st.tuples(st.just("spawn"), inner)
    return [spawn, spawn]


@attrs.frozen
class Body:
    program: Program
    signal_at: float | None
    ambient_at: float | None
    seed: int


bodies = st.builds(
    Body,
    program=programs(extra=spawns),
    signal_at=st.sampled_from(EXTERNAL),
    ambient_at=st.sampled_from(EXTERNAL),
    seed=st.integers(0, 2**16),
)


class BodyInterpreter(Interpreter):
    """The gate tests' interpreter, plus ``("spawn", program)``: ``ctx.start_soon``."""

    ctx: ToolRunContext
    spawned = 0

    async def step(self, step: Step, where: str) -> None:
        if step[0] != "spawn":
            return await super().step(step, where)
        self.log.append(f"{where} spawn")
        label = f"{where}.spawned{self.spawned}"
        self.spawned += 1
        try:
            self.ctx.start_soon(self.run, step[1], label)
        except RuntimeError as exc:  # the call has settled
            self.log.append(f"{where} refused: {exc}")


def run_body(body: Body, late: bool) -> tuple[list[str], list[ToolResult], list[str], int]:
    """Everything one run of ``body`` shows."""
    log: list[str] = []
    source = CancelSource()
    interpreter = BodyInterpreter(source, log)
    registry = ToolRegistry()

    async def tool(args: object, ctx: ToolRunContext) -> str:
        interpreter.ctx = ctx
        await interpreter.run(body.program, "body")
        return "done"

    registry.register(define_tool(tool, name="tool"))
    published, raised = observe_call(
        registry,
        interpreter,
        "tool",
        signal_at=body.signal_at,
        ambient_at=body.ambient_at,
        seed=body.seed,
        switch=(dispatch_module, "LATE", late),
    )
    return log, published, raised, source.signal.statistics().listeners


@given(bodies)
def test_a_late_nursery_and_an_early_one_are_alike(body: Body) -> None:
    assert run_body(body, late=True) == run_body(body, late=False)


def test_the_generated_bodies_reach_the_paths_that_differ() -> None:
    """Work started from inside a scope of the body's, which a failing child then cancels:
    the comparison is not between two runs that never took the late path."""
    body = Body(
        program=(
            (
                "scope",
                "shield",
                2,
                (("spawn", (("wait", 1), ("raise",))), ("wait", 3)),
            ),
        ),
        signal_at=None,
        ambient_at=None,
        seed=0,
    )
    log, published, raised, listeners = run_body(body, late=True)
    assert log == [
        "body.0 scope",
        "body.0.0 spawn",
        "body.0.1 wait",
        "body.0.0.spawned0.0 wait",
        "body.0.0.spawned0.1 raise",
        "body.0 left, caught=False",
        "after the call",
    ]
    assert [result.code for result in published] == ["TOOL_FAILED"]
    assert (raised, listeners) == ([], 0)
    assert run_body(body, late=False) == (log, published, raised, listeners)
