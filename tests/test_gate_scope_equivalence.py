"""The gate's late-entered scope against the scope entered first, over generated gates.

``test_gate_scope.py`` checks named cases; here Hypothesis writes the pre-execute hooks and
the approver: small programs that wait, fire the caller's signal, raise, open cancel
scopes (plain, ``move_on_after``, ``fail_after``, shielded) and nurseries with children,
start tasks with ``nursery.start()`` (into a nursery of their own, or one that outlives the
call), raise ``trio.Cancelled`` (or a group holding one) by hand, catch or swallow
``Cancelled``, and end by calling on, denying or asking.  The caller's
signal and an enclosing scope are cancelled at generated times.  Each gate runs twice,
with the scope entered where a step first waits (the registry's way) and with it entered
before the first step, under the same virtual clock and scheduling seed; everything either
run shows must be the same: what each step saw, the published result, what ``execute``
raised and the listeners left on the signal.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import attrs
import trio
import trio.testing
from helpers_registry import TOOL, PreNext
from hypothesis import given
from hypothesis import strategies as st

import trio_tools._lazy_scope as lazy_scope
from trio_tools import (
    ApprovalRequest,
    Ask,
    CancelSource,
    Deny,
    PreDecision,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    define_tool,
)

# A program is a tuple of steps; a step is a tuple whose first item names it.
Step = tuple[Any, ...]
Program = tuple[Step, ...]

# Integer waits; external cancellations at half-seconds: no two things ever fall due at
# the same instant, so the two runs cannot differ by the order of a tie.
WAITS = (0, 1, 3)
EXTERNAL = (None, 0.5, 1.5, 3.5, 6.5)
SCOPES = ("plain", "move_on_after", "fail_after", "shield")


Extra = Callable[[st.SearchStrategy[Program]], list[st.SearchStrategy[Step]]]


def programs(depth: int = 2, extra: Extra | None = None) -> st.SearchStrategy[Program]:
    """Generated programs nesting up to ``depth`` deep; ``extra`` gives more kinds of
    nested step, made from the strategy of the programs inside them."""
    wait = st.tuples(st.just("wait"), st.sampled_from(WAITS))
    # Waits weigh most: a failure ends a gate, so raising often would leave little to see.
    leaves: list[st.SearchStrategy[Step]] = [
        wait,
        wait,
        wait,
        st.just(("fire",)),
        st.sampled_from((("raise",), ("raise_cancelled",), ("raise_group",))),
    ]
    if depth == 0:
        return st.lists(st.one_of(leaves), max_size=3).map(tuple)
    inner = programs(depth - 1, extra)
    nested: list[st.SearchStrategy[Step]] = [
        *(extra(inner) if extra is not None else []),
        st.tuples(st.just("scope"), st.sampled_from(SCOPES), st.sampled_from((1, 2)), inner),
        st.tuples(st.just("nursery"), st.lists(inner, max_size=2).map(tuple), inner),
        # `nursery.start()`: into a nursery of the stage's own, or into one that outlives the
        # call (the started task then leaves the gate's scope, as Trio moves it).
        st.tuples(st.just("start"), st.sampled_from(("own", "outside")), inner, inner, inner),
        st.tuples(st.just("catch"), inner),
        st.tuples(st.just("swallow"), inner),
    ]
    return st.lists(st.one_of(*leaves, *nested), max_size=3).map(tuple)


@attrs.frozen
class Gate:
    hooks: tuple[tuple[Program, str], ...]  # each hook's program and how it ends
    approver: tuple[Program, str] | None
    signal_at: float | None
    ambient_at: float | None
    seed: int


gates = st.builds(
    Gate,
    hooks=st.lists(
        st.tuples(programs(), st.sampled_from(("next", "deny", "ask"))), min_size=1, max_size=2
    ).map(tuple),
    approver=st.none()
    | st.tuples(programs(1), st.sampled_from(("granted", "rejected", "cancelled"))),
    signal_at=st.sampled_from(EXTERNAL),
    ambient_at=st.sampled_from(EXTERNAL),
    seed=st.integers(0, 2**16),
)


class Interpreter:
    def __init__(self, source: CancelSource, log: list[str]) -> None:
        self.source = source
        self.log = log
        self.outside: trio.Nursery  # a nursery that outlives the call, set once it is open

    async def started(
        self,
        before: Program,
        after: Program,
        where: str,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        await self.run(before, f"{where}.before")
        task_status.started()
        await self.run(after, f"{where}.after")

    async def run(self, program: Program, where: str) -> None:
        for index, step in enumerate(program):
            await self.step(step, f"{where}.{index}")

    async def step(self, step: Step, where: str) -> None:
        kind = step[0]
        self.log.append(f"{where} {kind}")
        if kind == "wait":
            await trio.sleep(step[1])
        elif kind == "fire":
            self.source.cancel("from a stage")
        elif kind == "raise":
            raise ValueError(where)
        elif kind == "raise_cancelled":  # by hand, as a stage that re-raises a kept one
            raise trio.Cancelled._create()  # pyright: ignore[reportPrivateUsage]
        elif kind == "raise_group":
            raise BaseExceptionGroup(
                where,
                [trio.Cancelled._create(), ValueError(where)],  # pyright: ignore[reportPrivateUsage]
            )
        elif kind == "scope":
            _, flavour, timeout, body = step
            scope = {
                "plain": lambda: trio.CancelScope(),
                "move_on_after": lambda: trio.move_on_after(timeout),
                "fail_after": lambda: trio.fail_after(timeout),
                "shield": lambda: trio.CancelScope(shield=True),
            }[flavour]()
            with scope as entered:
                await self.run(body, where)
            self.log.append(f"{where} left, caught={entered.cancelled_caught}")
        elif kind == "nursery":
            _, children, body = step
            async with trio.open_nursery() as nursery:
                for number, child in enumerate(children):
                    nursery.start_soon(self.run, child, f"{where}.child{number}")
                await self.run(body, where)
        elif kind == "start":
            _, into, before, after, body = step
            if into == "outside":
                await self.outside.start(self.started, before, after, f"{where}.started")
                await self.run(body, where)
            else:
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.started, before, after, f"{where}.started")
                    await self.run(body, where)
        elif kind == "catch":
            try:
                await self.run(step[1], where)
            except BaseException as exc:
                self.log.append(f"{where} saw {type(exc).__name__}")
                raise
        elif kind == "swallow":
            try:
                await self.run(step[1], where)
            except trio.Cancelled:
                self.log.append(f"{where} swallowed Cancelled")


def ends(how: str, call_next: PreNext) -> Callable[[], Any]:
    async def end() -> PreDecision:
        if how == "deny":
            return Deny("no")
        if how == "ask":
            return Ask("check")
        return await call_next()

    return end


def observe_call(
    registry: ToolRegistry,
    interpreter: Interpreter,
    name: str,
    *,
    signal_at: float | None,
    ambient_at: float | None,
    seed: int,
    switch: tuple[Any, str, bool],
) -> tuple[list[ToolResult], list[str]]:
    """Run one call of ``name`` in ``trio.run`` under a virtual clock and the scheduling
    ``seed``, with the interpreter's signal fired at ``signal_at`` and an enclosing scope
    cancelled at ``ambient_at``, and ``switch`` (module, flag, value) set meanwhile: the
    results published, and what ``execute`` and the run raised.  A nursery that outlives
    the call runs on for ten seconds after it."""
    source = interpreter.source
    published: list[ToolResult] = []
    registry.add_observer(lambda execution, result: published.append(result))
    raised: list[str] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            interpreter.outside = nursery
            if signal_at is not None:

                async def cancel_signal(at: float) -> None:
                    await trio.sleep(at)
                    source.cancel("caller")

                nursery.start_soon(cancel_signal, signal_at)
            with trio.CancelScope() as outer:
                if ambient_at is not None:
                    outer.deadline = trio.current_time() + ambient_at
                try:
                    await registry.execute(
                        ToolExecutionInput(
                            call_id="c", name=name, arguments={}, signal=source.signal
                        )
                    )
                except BaseException as exc:
                    raised.append(type(exc).__name__)
                    raise
            # What the call started outside it goes on (and hears a later signal, or not).
            await trio.sleep(10)
            interpreter.log.append("after the call")
            nursery.cancel_scope.cancel()

    trio._core._run._r.seed(seed)  # type: ignore[attr-defined]  # pyright: ignore[reportPrivateUsage]
    random.seed(seed)
    module, flag, value = switch
    saved = getattr(module, flag)
    setattr(module, flag, value)
    try:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    except BaseException as exc:  # the run's own outcome is part of what it shows
        raised.append(f"run: {type(exc).__name__}: {exc}")
    finally:
        setattr(module, flag, saved)
    return published, raised


def run_gate(gate: Gate, lazy: bool) -> tuple[list[str], list[ToolResult], list[str], int]:
    """Everything one run of ``gate`` shows."""
    log: list[str] = []
    source = CancelSource()
    interpreter = Interpreter(source, log)
    registry = ToolRegistry()

    async def body(args: object, ctx: ToolRunContext) -> str:
        log.append("body")
        return "done"

    registry.register(define_tool(body, name=TOOL))
    for number, (program, how) in enumerate(gate.hooks):

        async def hook(
            execution: ToolExecution,
            call_next: PreNext,
            program: Program = program,
            how: str = how,
            where: str = f"hook{number}",
        ) -> PreDecision:
            await interpreter.run(program, where)
            return await ends(how, call_next)()

        registry.add_pre_execute(hook)
    if gate.approver is not None:
        approver_program, answer = gate.approver

        async def approver(request: ApprovalRequest) -> Any:
            await interpreter.run(approver_program, "approver")
            return answer

        registry.set_approver(approver)
    published, raised = observe_call(
        registry,
        interpreter,
        TOOL,
        signal_at=gate.signal_at,
        ambient_at=gate.ambient_at,
        seed=gate.seed,
        switch=(lazy_scope, "LAZY", lazy),
    )
    return log, published, raised, source.signal.statistics().listeners


@given(gates)
def test_a_late_scope_and_an_early_one_are_alike(gate: Gate) -> None:
    assert run_gate(gate, lazy=True) == run_gate(gate, lazy=False)


def test_the_generated_gates_reach_the_paths_that_differ() -> None:
    """The programs above do wait inside scopes of their own (the placement's path) and get
    interrupted there: the comparison is not between two runs that never took it."""
    gate = Gate(
        hooks=(((("scope", "fail_after", 2, (("wait", 1), ("wait", 3))),), "next"),),
        approver=None,
        signal_at=1.5,
        ambient_at=None,
        seed=0,
    )
    log, published, raised, listeners = run_gate(gate, lazy=True)
    assert ["hook0.0 scope", "hook0.0.0 wait", "hook0.0.1 wait", "after the call"] == log
    assert ["ABORTED_BEFORE_DISPATCH"] == [result.code for result in published]
    assert [] == raised
    assert 0 == listeners
    assert run_gate(gate, lazy=False) == (log, published, raised, listeners)
