"""A finished call leaves no reference cycles: reference counting frees all of it at once.

With the cyclic garbage collector disabled, thousands of completed calls (a success, a
failing body, a call cancelled through its signal, a call past its tool's timeout; with
and without every kind of stage) must leave nothing for ``gc.collect()`` to free.  Cycles
would make every parked and finished call cost collector time (a mass cancellation of
10,000 calls used to spend about half of its time in the collector).  The tests count
objects, not time.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import msgspec
import pytest
import trio
import trio.testing
from helpers_registry import add_passthrough_stages

from trio_tools import (
    FINALIZE_FAILED,
    INVALID_ARGS,
    NOT_JSON,
    TOOL_ABORTED,
    TOOL_FAILED,
    TOOL_TIMEOUT,
    UNKNOWN_TOOL,
    CancelSource,
    ToolCall,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    run_tool_calls,
)

CALLS = 10_000


def build(*, staged: bool) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    async def ok(args: object, ctx: ToolRunContext) -> dict[str, int]:
        """Returns JSON data."""
        return {"value": 1}

    @registry.tool
    async def boom(args: object, ctx: ToolRunContext) -> str:
        """Fails."""
        raise ValueError("boom")

    @registry.tool
    async def park(args: object, ctx: ToolRunContext) -> str:
        """Waits until cancelled."""
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    @registry.tool(timeout=1.0)
    async def slow(args: object, ctx: ToolRunContext) -> str:
        """Outlives its timeout."""
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    if staged:

        async def observe(exec: ToolExecution, result: ToolResult) -> None:
            await trio.lowlevel.checkpoint()

        class Instrument:
            def call_started(self, exec: ToolExecution) -> None:
                pass

            def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
                pass

        add_passthrough_stages(registry)
        registry.add_guard(lambda exec: None)
        registry.add_observer(observe)
        registry.add_observer(lambda exec, result: None)
        registry.add_instrument(Instrument())
    return registry


@contextmanager
def collector_off() -> Iterator[Callable[[], collections.Counter[str]]]:
    """Disable the collector; the callable collects and counts what only it could free.

    Only objects made inside the block count: an object an earlier test left alive (a
    library's cache may drop its last reference at any moment) is not the calls' garbage.
    """
    gc.collect()
    gc.disable()
    before = {id(obj) for obj in gc.get_objects()}

    def garbage() -> collections.Counter[str]:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            found = collections.Counter(
                type(obj).__qualname__ for obj in gc.garbage if id(obj) not in before
            )
        finally:
            gc.garbage.clear()
            gc.set_debug(0)
        return found

    try:
        yield garbage
    finally:
        gc.enable()


async def call(registry: ToolRegistry, name: str, source: CancelSource) -> ToolResult:
    return await registry.execute(
        ToolExecutionInput(call_id="call", name=name, arguments={}, signal=source.signal)
    )


async def cancelled_call(registry: ToolRegistry) -> ToolResult:
    source = CancelSource()
    results: list[ToolResult] = []

    async def run() -> None:
        results.append(await call(registry, "park", source))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        source.cancel("enough")
    return results[0]


async def interrupted_then_ambient(registry: ToolRegistry, name: str) -> list[str | None]:
    """A call of ``name`` interrupted by its signal once it waits, then one cancelled by an
    enclosing scope once it waits: the first one's code, then ``"ambient"`` if the scope
    caught the second one's cancellation."""
    codes: list[str | None] = []
    source = CancelSource()
    async with trio.open_nursery() as nursery:

        async def interrupted() -> None:
            codes.append((await call(registry, name, source)).code)

        nursery.start_soon(interrupted)
        await trio.testing.wait_all_tasks_blocked()
        source.cancel("enough")
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, registry, name, CancelSource())
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
    codes.append("ambient" if scope.cancelled_caught else "not cancelled")
    return codes


async def one_of_each(registry: ToolRegistry, source: CancelSource) -> list[str | None]:
    return [
        (await call(registry, "ok", source)).code,
        (await call(registry, "boom", source)).code,
        (await cancelled_call(registry)).code,
        (await call(registry, "slow", source)).code,
    ]


@pytest.mark.parametrize("staged", [False, True], ids=["no stages", "every stage"])
async def test_completed_calls_leave_no_cycles(
    staged: bool, autojump_clock: trio.testing.MockClock
) -> None:
    registry = build(staged=staged)
    source = CancelSource()
    expected = [None, TOOL_FAILED, TOOL_ABORTED, TOOL_TIMEOUT]
    assert await one_of_each(registry, source) == expected  # warm up every path first
    codes: collections.Counter[str | None] = collections.Counter()
    with collector_off() as garbage:
        for _ in range(CALLS // 4):
            codes.update(await one_of_each(registry, source))
        found = garbage()
    assert codes == {code: CALLS // 4 for code in expected}
    assert found == {}, f"{CALLS} calls left reference cycles: {found.most_common(10)}"


async def test_batches_leave_no_cycles(autojump_clock: trio.testing.MockClock) -> None:
    registry = build(staged=True)
    source = CancelSource()
    names = ["ok", "boom", "slow", "missing"]
    calls = [
        ToolCall(call_id=f"call-{i}", name=name, arguments="{}") for i, name in enumerate(names)
    ]
    await run_tool_calls(registry, calls, signal=source.signal)
    with collector_off() as garbage:
        for _ in range(250):
            outcome = await run_tool_calls(registry, calls, signal=source.signal)
            assert [result.is_error for result in outcome.results] == [False, True, True, True]
        found = garbage()
    assert found == {}, f"batches left reference cycles: {found.most_common(10)}"


@pytest.mark.parametrize(
    ("staged", "observed", "name"),
    [
        (False, False, "park"),
        (False, True, "park"),
        (False, True, "slow"),
        (True, False, "park"),
        (True, False, "slow"),
    ],
    ids=[
        "no stages",
        "observers only",
        "observers only, timed tool",
        "every stage",
        "every stage, timed tool",
    ],
)
async def test_ambient_cancellation_leaves_no_cycles(
    staged: bool, observed: bool, name: str
) -> None:
    """A call cancelled by an enclosing scope raises ``trio.Cancelled``; its exception's
    traceback must not hold the frames that caught it in a cycle either (the body's
    ``Cancelled`` is held past its nursery's exit and re-raised), whether the result is
    published to no observer, to synchronous and asynchronous ones, or through every stage,
    and whether the timeout policy runs around the body."""
    registry = build(staged=staged)
    if observed:

        async def observe(exec: ToolExecution, result: ToolResult) -> None:
            await trio.lowlevel.checkpoint()

        registry.add_observer(lambda exec, result: None)
        registry.add_observer(observe)
    source = CancelSource()

    async def cancelled_from_outside() -> None:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, registry, name, source)
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
        assert scope.cancelled_caught

    await cancelled_from_outside()
    with collector_off() as garbage:
        for _ in range(500):
            await cancelled_from_outside()
        found = garbage()
    assert found == {}, f"ambient cancellation left reference cycles: {found.most_common(10)}"


@attrs.frozen
class Point:
    x: int
    y: int = 0


@dataclasses.dataclass
class Batch:
    items: list[int]


class Nested(msgspec.Struct):
    name: str
    counts: dict[str, int] = {}


def not_negative(instance: object, attribute: object, value: int) -> None:
    if value < 0:
        raise ValueError("must not be negative")


@attrs.frozen
class Positive:
    value: int = attrs.field(validator=not_negative)


def build_failing() -> ToolRegistry:
    """Tools whose calls fail before, in or after their body, each in its own way."""
    registry = ToolRegistry()

    async def takes(args: object, ctx: ToolRunContext) -> str:
        """Takes its argument class."""
        return "ok"

    for name, args in {
        "point": Point,
        "batch": Batch,
        "nested": Nested,
        "positive": Positive,
    }.items():
        registry.tool(takes, name=name, args=args)

    @registry.tool
    async def signature(path: str, limit: int = 1, *, ctx: ToolRunContext) -> str:
        """Takes keyword arguments."""
        return "ok"

    @registry.tool
    def sync_ok(args: object, ctx: ToolRunContext) -> str:
        """Returns from a worker thread."""
        return "ok"

    @registry.tool
    def sync_boom(args: object, ctx: ToolRunContext) -> str:
        """Fails in a worker thread."""
        raise ValueError("boom")

    def broken_finalize(exec: ToolExecution, result: ToolResult) -> None:
        raise ValueError("finalize broke")

    @registry.tool(finalize_content=broken_finalize)
    async def finalized(args: object, ctx: ToolRunContext) -> str:
        """Its result's finalize_content fails."""
        return "ok"

    return registry


FAILING_CALLS: list[tuple[str, object, str | None]] = [
    ("point", {"x": "one"}, INVALID_ARGS),
    ("point", {}, INVALID_ARGS),
    ("batch", {"items": [1, "two"]}, INVALID_ARGS),
    ("nested", {"name": "n", "counts": {"a": "b"}}, INVALID_ARGS),
    ("positive", {"value": -1}, INVALID_ARGS),
    ("signature", {"limit": 2}, INVALID_ARGS),
    ("missing", {}, UNKNOWN_TOOL),
    ("point", [{1, 2}], NOT_JSON),
    ("sync_ok", {}, None),
    ("sync_boom", {}, TOOL_FAILED),
    ("finalized", {}, FINALIZE_FAILED),
]


@pytest.mark.parametrize(
    ("name", "arguments", "code"), FAILING_CALLS, ids=[f"{n}-{c}" for n, _, c in FAILING_CALLS]
)
async def test_failing_calls_leave_no_cycles(
    name: str, arguments: object, code: str | None
) -> None:
    """Invalid arguments (every kind of argument class, a validator that raises, a
    signature), an unknown tool, arguments that are not JSON, a sync body in its worker
    thread (returning or raising) and a failing ``finalize_content``: each failure is
    turned into its result without an exception left in a cycle with the frames that
    caught it."""
    registry = build_failing()
    source = CancelSource()

    async def one() -> str | None:
        result = await registry.execute(
            ToolExecutionInput(call_id="call", name=name, arguments=arguments, signal=source.signal)
        )
        return result.code

    assert await one() == code  # warm up first
    with collector_off() as garbage:
        codes = [await one() for _ in range(200)]
        found = garbage()
    assert codes == [code] * 200
    assert found == {}, f"{name} calls left reference cycles: {found.most_common(10)}"


@pytest.mark.parametrize("ambient", [False, True], ids=["signal", "enclosing scope"])
async def test_cancelled_sync_bodies_leave_no_cycles(ambient: bool) -> None:
    """A sync body that stops at ``ctx.check_cancelled()``: the ``Cancelled`` it raises in
    its worker thread comes back to the call without a cycle, whoever cancelled."""
    registry = ToolRegistry()
    started = threading.Event()

    @registry.tool
    def waits(args: object, ctx: ToolRunContext) -> str:
        """Polls for cancellation."""
        started.set()
        while True:
            ctx.check_cancelled()
            time.sleep(0.001)

    async def cancelled() -> None:
        started.clear()
        source = CancelSource()
        results: list[ToolResult] = []

        async def run() -> None:
            results.append(
                await registry.execute(
                    ToolExecutionInput(
                        call_id="c", name="waits", arguments={}, signal=source.signal
                    )
                )
            )

        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run)
                await trio.to_thread.run_sync(started.wait, 10.0)
                if ambient:
                    scope.cancel()
                else:
                    source.cancel("enough")
        assert [r.code for r in results] == ([] if ambient else [TOOL_ABORTED])

    await cancelled()
    with collector_off() as garbage:
        for _ in range(20):
            await cancelled()
        found = garbage()
    assert found == {}, f"cancelled sync bodies left reference cycles: {found.most_common(10)}"


async def test_batches_of_failing_calls_leave_no_cycles() -> None:
    """A batch's calls that fail on their JSON text (invalid, not an object), their
    arguments, an unknown name or in their body."""
    registry = build_failing()
    source = CancelSource()
    calls = [
        ToolCall(call_id="a", name="point", arguments='{"x": "one"}'),
        ToolCall(call_id="b", name="point", arguments="{not json"),
        ToolCall(call_id="c", name="point", arguments="[1]"),
        ToolCall(call_id="d", name="missing", arguments="{}"),
        ToolCall(call_id="e", name="sync_boom", arguments="{}"),
        ToolCall(call_id="f", name="finalized", arguments="{}"),
    ]
    await run_tool_calls(registry, calls, signal=source.signal)
    with collector_off() as garbage:
        for _ in range(100):
            outcome = await run_tool_calls(registry, calls, signal=source.signal)
            assert all(result.is_error for result in outcome.results)
        found = garbage()
    assert found == {}, f"batches of failing calls left reference cycles: {found.most_common(10)}"


@pytest.mark.parametrize("own_scope", [False, True], ids=["bare wait", "wait in own scope"])
async def test_gates_that_wait_leave_no_cycles(own_scope: bool) -> None:
    """A pre-execute hook that waits gets the gate's scope entered where it waits (placed
    outside the hook's own scopes): allowed after its wait, interrupted by the caller's
    signal, or cancelled by an enclosing scope, the call leaves nothing for the collector."""
    registry = build(staged=False)
    gate_open = trio.Event()

    async def hook(exec: ToolExecution, call_next: Callable[[], Any]) -> Any:
        if own_scope:
            with trio.fail_after(3600):
                await gate_open.wait()
        else:
            await gate_open.wait()
        return await call_next()

    registry.add_pre_execute(hook)

    async def one_round() -> list[str | None]:
        codes = await interrupted_then_ambient(registry, "ok")
        gate_open.set()
        codes.append((await call(registry, "ok", CancelSource())).code)
        return codes

    expected = ["ABORTED_BEFORE_DISPATCH", "ambient", None]
    assert await one_round() == expected  # warm up every path first
    with collector_off() as garbage:
        for _ in range(300):
            gate_open = trio.Event()
            assert await one_round() == expected
        found = garbage()
    assert found == {}, f"waiting gates left reference cycles: {found.most_common(10)}"


async def test_calls_that_start_work_leave_no_cycles() -> None:
    """Bodies that start work with ``ctx.start_soon`` get the call's nursery opened there
    (from the body's task or from a task of its own): finished, failed through a child,
    interrupted by the caller's signal, or cancelled by an enclosing scope, the call leaves
    nothing for the collector."""
    registry = ToolRegistry()

    async def child(fail: bool) -> None:
        await trio.lowlevel.checkpoint()
        if fail:
            raise ValueError("child")

    @registry.tool
    async def starts(args: object, ctx: ToolRunContext) -> str:
        """Starts a child from its own task, inside a scope of its own."""
        with trio.CancelScope():
            ctx.start_soon(child, False)
            await trio.lowlevel.checkpoint()
        return "done"

    @registry.tool
    async def fails(args: object, ctx: ToolRunContext) -> str:
        """A child of a task of its own starts a failing child."""

        async def helper() -> None:
            ctx.start_soon(child, True)

        async with trio.open_nursery() as own:
            own.start_soon(helper)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    @registry.tool
    async def parks(args: object, ctx: ToolRunContext) -> str:
        """Starts a child, then waits until cancelled."""
        ctx.start_soon(trio.sleep_forever)
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def one_round() -> list[str | None]:
        return [
            (await call(registry, "starts", CancelSource())).code,
            (await call(registry, "fails", CancelSource())).code,
            *await interrupted_then_ambient(registry, "parks"),
        ]

    expected = [None, TOOL_FAILED, TOOL_ABORTED, "ambient"]
    assert await one_round() == expected  # warm up every path first
    with collector_off() as garbage:
        for _ in range(300):
            assert await one_round() == expected
        found = garbage()
    assert found == {}, f"calls that start work left reference cycles: {found.most_common(10)}"
