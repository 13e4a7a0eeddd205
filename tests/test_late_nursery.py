"""The call's nursery, opened on the body's first ``ctx.start_soon``, behaves as one opened
before the body started.

The registry runs a body under a cancel scope bound to the call's signal and opens the
call's nursery only when the body first starts work in it, placed right inside that scope
(outside the body's own scopes and nurseries) and owned by the body's task, whichever task
or thread asks.  Every test here runs both that way and with the nursery opened before the
body starts (what a Trio without the internals the placement needs gets), and expects the
same outcome from both.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

import trio_tools._dispatch as dispatch_module
import trio_tools._late_nursery as late_nursery
from trio_tools import (
    TOOL_ABORTED,
    TOOL_FAILED,
    CancelSource,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    define_tool,
)

Body = Callable[[object, ToolRunContext], Awaitable[object]]


@pytest.fixture(params=[True, False], ids=["nursery opened late", "nursery first"])
def late(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    monkeypatch.setattr(dispatch_module, "LATE", request.param)
    return bool(request.param)


def registry_of(body: Any, name: str = "tool") -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(define_tool(body, name=name))
    return registry


async def call(
    registry: ToolRegistry, source: CancelSource | None = None, name: str = "tool"
) -> ToolResult:
    signal = (source or CancelSource()).signal
    return await registry.execute(
        ToolExecutionInput(call_id="c", name=name, arguments={}, signal=signal)
    )


def waits_until_cancelled(log: list[str]) -> Callable[[], Awaitable[None]]:
    """Work that waits until it is cancelled, and says so in ``log``."""

    async def work() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            log.append("work cancelled")
            raise

    return work


async def test_work_started_inside_the_bodys_own_nursery_closes_in_order(
    late: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """The call's nursery goes before the body's own among the task's nurseries: the body's
    closes first, as it was opened last (Trio checks the order)."""
    log: list[str] = []

    async def work(label: str, wait: float) -> None:
        await trio.sleep(wait)
        log.append(label)

    async def body(args: object, ctx: ToolRunContext) -> str:
        before = list(trio.lowlevel.current_task().child_nurseries)
        async with trio.open_nursery() as own:
            own.start_soon(work, "own", 1)
            ctx.start_soon(work, "call's", 2)
            nurseries = trio.lowlevel.current_task().child_nurseries
            assert nurseries[-1] is own
            # Opened late, the call's nursery went in below the body's own.
            assert nurseries[: len(before)] == before
            assert len(nurseries) == len(before) + (2 if late else 1)
        log.append("own closed")
        return "done"

    result = await call(registry_of(body))
    assert not result.is_error
    assert log == ["own", "own closed", "call's"]


async def test_work_outlives_the_bodys_own_scopes(
    late: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """Started inside a scope of the body's that then expires, the work is the call's: the
    body's scope does not cancel it, and the call waits for it."""
    log: list[str] = []

    async def work() -> None:
        await trio.sleep(5)
        log.append("work done")

    async def body(args: object, ctx: ToolRunContext) -> str:
        with trio.move_on_after(1) as own:
            ctx.start_soon(work)
            await trio.sleep(10)
        log.append(f"own scope caught: {own.cancelled_caught}")
        return "done"

    result = await call(registry_of(body))
    assert not result.is_error
    assert log == ["own scope caught: True", "work done"]
    assert trio.current_time() == 5


async def test_a_failing_child_cancels_the_body_inside_its_own_scopes(
    late: bool, autojump_clock: trio.testing.MockClock
) -> None:
    log: list[str] = []

    async def work() -> None:
        await trio.sleep(1)
        raise ValueError("child broke")

    async def body(args: object, ctx: ToolRunContext) -> str:
        with trio.fail_after(100):
            ctx.start_soon(work)
            try:
                await trio.sleep(10)
            except trio.Cancelled:
                log.append("body cancelled")
                raise
        return "unreachable"

    result = await call(registry_of(body))
    assert result.code == TOOL_FAILED
    assert result.error is not None
    assert "child broke" in result.error.message
    assert log == ["body cancelled"]
    assert trio.current_time() == 1


async def test_work_started_by_a_task_of_the_body_belongs_to_the_call(
    late: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """The first ``ctx.start_soon`` may come from a task the body started: the nursery is
    still the body task's, the call waits for the work and the signal reaches it."""
    log: list[str] = []
    source = CancelSource()

    work = waits_until_cancelled(log)

    async def helper(ctx: ToolRunContext) -> None:
        ctx.start_soon(work)

    async def body(args: object, ctx: ToolRunContext) -> str:
        async with trio.open_nursery() as own:
            own.start_soon(helper, ctx)
        await trio.sleep(100)
        return "unreachable"

    async def fire() -> None:
        await trio.sleep(3)
        source.cancel("stop")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fire)
        result = await call(registry_of(body), source)
    assert result.code == TOOL_ABORTED
    assert log == ["work cancelled"]
    assert trio.current_time() == 3


async def test_a_task_of_the_body_starts_work_while_the_body_waits_in_a_scope(
    late: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """The body task is suspended inside scopes of its own when another task opens the
    call's nursery: those scopes move inside it and a failing child still reaches them."""
    log: list[str] = []

    async def work() -> None:
        await trio.sleep(2)
        raise KeyError("child")

    async def helper(ctx: ToolRunContext) -> None:
        await trio.sleep(1)
        ctx.start_soon(work)

    async def body(args: object, ctx: ToolRunContext) -> str:
        async with trio.open_nursery() as own:
            own.start_soon(helper, ctx)
            with trio.CancelScope():
                try:
                    await trio.sleep(100)
                except trio.Cancelled:
                    log.append("body cancelled")
                    raise
        return "unreachable"

    result = await call(registry_of(body))
    assert result.code == TOOL_FAILED
    assert log == ["body cancelled"]
    assert trio.current_time() == 3


async def test_work_started_from_a_worker_thread(late: bool) -> None:
    log: list[str] = []

    async def work(label: str) -> None:
        await trio.lowlevel.checkpoint()
        log.append(label)

    async def async_body(args: object, ctx: ToolRunContext) -> str:
        await trio.to_thread.run_sync(ctx.start_soon, work, "from the body's thread")
        return "done"

    def sync_body(args: object, ctx: ToolRunContext) -> str:
        ctx.start_soon(work, "from the sync body")
        return "done"

    registry = registry_of(async_body)
    registry.register(define_tool(sync_body, name="sync"))
    assert not (await call(registry)).is_error
    assert not (await call(registry, name="sync")).is_error
    assert log == ["from the body's thread", "from the sync body"]


async def test_starting_work_after_the_call_settled_is_refused(late: bool) -> None:
    """As from a closed nursery, with Trio's own message, whether or not the body ever
    started work."""
    kept: list[ToolRunContext] = []

    async def work() -> None:
        pass

    async def idle(args: object, ctx: ToolRunContext) -> str:
        kept.append(ctx)
        return "done"

    async def busy(args: object, ctx: ToolRunContext) -> str:
        kept.append(ctx)
        ctx.start_soon(work)
        return "done"

    registry = registry_of(idle)
    registry.register(define_tool(busy, name="busy"))
    await call(registry)
    await call(registry, name="busy")
    messages = []
    for ctx in kept:
        with pytest.raises(RuntimeError) as caught:
            ctx.start_soon(work)
        messages.append(str(caught.value))
    assert messages == ["Nursery is closed to new arrivals"] * 2


async def test_work_still_running_takes_more_work(
    late: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """After the body returned, its work may start more work (the nursery is still open)."""
    log: list[str] = []

    async def second() -> None:
        await trio.sleep(1)
        log.append("second")

    async def first(ctx: ToolRunContext) -> None:
        await trio.sleep(1)
        ctx.start_soon(second)
        log.append("first")

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.start_soon(first, ctx)
        return "done"

    assert not (await call(registry_of(body))).is_error
    assert log == ["first", "second"]
    assert trio.current_time() == 2


async def test_ambient_cancellation_reaches_started_work(
    late: bool, autojump_clock: trio.testing.MockClock
) -> None:
    log: list[str] = []
    published: list[ToolResult] = []

    work = waits_until_cancelled(log)

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.start_soon(work)
        await trio.sleep(100)
        return "unreachable"

    registry = registry_of(body)
    registry.add_observer(lambda execution, result: published.append(result))
    with trio.move_on_after(2) as outer:
        await call(registry)
    assert outer.cancelled_caught
    assert log == ["work cancelled"]
    assert [result.code for result in published] == [TOOL_ABORTED]


async def test_a_body_that_never_waits_still_lets_others_run(late: bool) -> None:
    """The nursery's exit is a schedule point: so is the call, with no nursery opened.
    (Trio runs the tasks ready at a schedule point in a random order: over twenty calls,
    the other task runs at some point, and never if no call yielded.)"""
    ran: list[int] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        return "done"

    async def other() -> None:
        while True:
            ran.append(1)
            await trio.lowlevel.checkpoint()

    registry = registry_of(body)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        for _ in range(20):
            await call(registry)
        assert ran
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("raised", ["exception", "group"])
async def test_what_the_body_raises_comes_out_as_from_its_nursery(late: bool, raised: str) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        if raised == "group":
            raise ExceptionGroup("several", [ValueError("one"), KeyError("two")])
        raise ValueError("broken")

    result = await call(registry_of(body))
    assert result.code == TOOL_FAILED
    assert result.error is not None
    expected = {"exception": "broken", "group": "one"}[raised]
    assert expected in result.error.message


async def test_the_call_nursery_is_opened_only_for_work(late: bool) -> None:
    """No nursery at all for a body that starts nothing (the registry's way)."""
    seen: list[int] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        seen.append(len(trio.lowlevel.current_task().child_nurseries))
        return "done"

    async def outer() -> None:
        await call(registry_of(body))

    before = len(trio.lowlevel.current_task().child_nurseries)
    await outer()
    assert seen == [before if late else before + 1]


def interrupted_in_main_task(body: Body) -> list[str | None]:
    """Execute one call of ``body`` in ``trio.run``'s main task (where Trio delivers
    ``KeyboardInterrupt``), expecting it to end in ``KeyboardInterrupt``; return the codes
    published."""
    registry = registry_of(body)
    published: list[str | None] = []
    registry.add_observer(lambda execution, result: published.append(result.code))

    async def main() -> None:
        await call(registry)

    with pytest.raises(KeyboardInterrupt):
        trio.run(main)
    return published


def test_ctrl_c_while_the_nursery_is_opened_late_is_delivered_at_the_next_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SIGINT that Trio turns into ``KeyboardInterrupt`` arriving while the registry
    opens the call's nursery must not leave it half placed: it is delivered at the body's
    next checkpoint, the work is cancelled, the call publishes ``ABORTED`` and the
    ``KeyboardInterrupt`` leaves ``trio.run``."""
    monkeypatch.setattr(dispatch_module, "LATE", True)
    real = late_nursery._encloses
    raised: list[str] = []

    def interrupting(*args: Any) -> bool:
        if not raised:
            raised.append("SIGINT")
            signal.raise_signal(signal.SIGINT)
        return real(*args)

    monkeypatch.setattr(late_nursery, "_encloses", interrupting)
    seen: list[str] = []

    work = waits_until_cancelled(seen)

    async def body(args: object, ctx: ToolRunContext) -> str:
        async with trio.open_nursery():  # the task has a nursery: its place is looked up
            ctx.start_soon(work)
            seen.append("work started")
            try:
                await trio.sleep(1)
            except KeyboardInterrupt:
                seen.append("interrupted at the wait")
                raise
        return "unreachable"

    assert interrupted_in_main_task(body) == [TOOL_ABORTED]
    assert raised == ["SIGINT"]
    assert seen == ["work started", "interrupted at the wait", "work cancelled"]


def test_ctrl_c_in_a_body_with_work_cancels_the_work(late: bool) -> None:
    seen: list[str] = []

    work = waits_until_cancelled(seen)

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.start_soon(work)
        await trio.lowlevel.checkpoint()
        signal.raise_signal(signal.SIGINT)
        seen.append("not reached")
        return "unreachable"

    assert interrupted_in_main_task(body) == [TOOL_ABORTED]
    assert seen == ["work cancelled"]
