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
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import trio
import trio.testing
from helpers_registry import add_passthrough_stages

from trio_tools import (
    TOOL_ABORTED,
    TOOL_FAILED,
    TOOL_TIMEOUT,
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
