"""The timeout policy (DESIGN.md §7): per-tool deadlines that narrow the caller's lifetime.

Everything runs on virtual time except the thread and subprocess tests, which cannot use an
autojumping clock safely: they use the real clock with a 0.2 s timeout on tools that would
otherwise run for a minute, and assert only on results, never on elapsed time.
"""

# The timer-heap checks inspect the signal module's private timer service on purpose:
# pyright: reportPrivateUsage=false

from __future__ import annotations

import runpy
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_tools import (
    TOOL_TIMEOUT,
    AdditionalContext,
    CancelReason,
    CancelSignal,
    CancelSource,
    ErrorInfo,
    PostDecision,
    TextBlock,
    ToolDefinition,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    define_tool,
    open_signal,
    timeout_policy,
)
from trio_tools._timers import timer_service

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "timeouts.py"

Body = Callable[[object, ToolRunContext], Awaitable[object]]
CallNext = Callable[[], Awaitable[ToolResult]]

ABORTED = ToolResult(
    content=(TextBlock("Error: tool call aborted"),),
    is_error=True,
    error=ErrorInfo(name="AbortError", code="ABORTED", message="tool call aborted"),
)


def _timed_out(after: str, additional_contexts: tuple[AdditionalContext, ...] = ()) -> ToolResult:
    return ToolResult(
        content=(TextBlock(f"Error: tool call timed out after {after}"),),
        is_error=True,
        error=ErrorInfo(
            name="ToolTimeoutError",
            code="TOOL_TIMEOUT",
            message=f"tool call timed out after {after}",
        ),
        additional_contexts=additional_contexts,
    )


def _tool(body: Body, *, name: str = "tool", timeout: float | None = None) -> ToolDefinition[Any]:
    return define_tool(body, name=name, timeout=timeout)


def _registry(*tools: ToolDefinition[Any]) -> ToolRegistry:
    registry = ToolRegistry()
    for tool in tools:
        registry.register(tool)
    registry.add_around_execute(timeout_policy())
    return registry


def _call(signal: CancelSignal, name: str = "tool", call_id: str = "call-1") -> ToolExecutionInput:
    return ToolExecutionInput(call_id=call_id, name=name, arguments={}, signal=signal)


# --------------------------------------------------------------------------------------
# Which calls get a deadline


async def test_tool_without_timeout_runs_under_the_callers_own_signal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No timeout: the body's ``ctx.signal`` *is* the caller's, and it fires on cancel."""
    source = CancelSource()
    seen: list[CancelSignal] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        seen.append(ctx.signal)
        await trio.sleep(1000)
        return "finished"

    registry = _registry(_tool(body))

    async def cancel_late() -> None:
        await trio.sleep(500)
        source.cancel("user pressed stop")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_late)
        result = await registry.execute(_call(source.signal))

    assert result == ABORTED
    assert trio.current_time() == 500
    assert len(seen) == 1
    assert seen[0] is source.signal
    assert seen[0].reason == CancelReason("CANCELLED", "user pressed stop")


async def test_tool_without_timeout_is_never_cut_short(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = CancelSource()

    async def body(args: object, ctx: ToolRunContext) -> str:
        await trio.sleep(10_000)
        return "finished"

    result = await _registry(_tool(body)).execute(_call(source.signal))

    assert result == ToolResult(content=(TextBlock("finished"),))
    assert trio.current_time() == 10_000


async def test_every_tools_own_timeout_is_effective(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Concurrent calls of tools with different timeouts each end at their own deadline."""
    source = CancelSource()
    ended: dict[str, float] = {}

    def sleeper(name: str) -> Body:
        async def body(args: object, ctx: ToolRunContext) -> str:
            try:
                await trio.sleep(100)
            finally:
                ended[name] = trio.current_time()
            return "finished"

        return body

    registry = _registry(
        _tool(sleeper("one"), name="one", timeout=1),
        _tool(sleeper("two"), name="two", timeout=2.5),
        _tool(sleeper("none"), name="none"),
    )
    results: dict[str, ToolResult] = {}

    async def run(name: str) -> None:
        results[name] = await registry.execute(_call(source.signal, name, call_id=name))

    async with trio.open_nursery() as nursery:
        for name in ("one", "two", "none"):
            nursery.start_soon(run, name)

    assert results == {
        "one": _timed_out("1s"),
        "two": _timed_out("2.5s"),
        "none": ToolResult(content=(TextBlock("finished"),)),
    }
    assert ended == {"one": 1, "two": 2.5, "none": 100}


# --------------------------------------------------------------------------------------
# How the deadline reaches the body


async def test_deadline_interrupts_the_body_at_its_next_checkpoint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The body's own cancel scope delivers the deadline: ``sleep(100)`` ends at t=5."""
    source = CancelSource()
    interrupted: list[tuple[float, str | None, CancelReason | None]] = []
    body_signals: list[CancelSignal] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        body_signals.append(ctx.signal)
        try:
            await trio.sleep(100)
        except trio.Cancelled as exc:
            interrupted.append((trio.current_time(), exc.reason, ctx.signal.reason))
            raise
        return "finished"

    result = await _registry(_tool(body, timeout=5)).execute(_call(source.signal))

    assert result == _timed_out("5s")
    deadline_reason = CancelReason("TOOL_TIMEOUT", "deadline exceeded after 5s")
    assert interrupted == [(5, "TOOL_TIMEOUT: deadline exceeded after 5s", deadline_reason)]
    assert body_signals[0] is not source.signal
    assert not source.signal.cancelled


async def _interrupted(args: object, ctx: ToolRunContext) -> str:
    ctx.defer_context(AdditionalContext("partial output saved", source="tool"))
    await trio.sleep(100)
    return "finished"


async def _shielded_success(args: object, ctx: ToolRunContext) -> str:
    ctx.defer_context(AdditionalContext("partial output saved", source="tool"))
    # Deliberately deaf to cancellation: finishes its work past the deadline.
    with trio.CancelScope(shield=True):
        await trio.sleep(10)
    return "finished anyway"


async def _raises_in_reaction(args: object, ctx: ToolRunContext) -> str:
    ctx.defer_context(AdditionalContext("partial output saved", source="tool"))
    try:
        await trio.sleep(100)
    except trio.Cancelled:
        raise RuntimeError("interrupted while writing") from None
    return "finished"


@pytest.mark.parametrize(
    "body",
    [_interrupted, _shielded_success, _raises_in_reaction],
    ids=["interrupted", "shielded-success", "raises-in-reaction"],
)
async def test_deadline_first_gives_tool_timeout_whatever_the_body_did(
    autojump_clock: trio.testing.MockClock, body: Body
) -> None:
    source = CancelSource()

    result = await _registry(_tool(body, timeout=5)).execute(_call(source.signal))

    assert result == _timed_out(
        "5s", additional_contexts=(AdditionalContext("partial output saved", source="tool"),)
    )


@pytest.mark.parametrize(
    ("seconds", "after"),
    [(0.5, "0.5s"), (2.0, "2s"), (5, "5s"), (0.25, "0.25s"), (90.0, "90s")],
)
async def test_timeout_message_formats_seconds_with_g(
    autojump_clock: trio.testing.MockClock, seconds: float, after: str
) -> None:
    source = CancelSource()

    result = await _registry(_tool(_interrupted, timeout=seconds)).execute(_call(source.signal))

    assert result == _timed_out(
        after, additional_contexts=(AdditionalContext("partial output saved", source="tool"),)
    )
    assert trio.current_time() == seconds


# --------------------------------------------------------------------------------------
# Who fired first


async def test_caller_cancelling_before_the_deadline_leaves_aborted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = CancelSource()
    reasons: list[CancelReason | None] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        try:
            await trio.sleep(100)
        finally:
            reasons.append(ctx.signal.reason)
        return "finished"

    registry = _registry(_tool(body, timeout=5))

    async def cancel_soon() -> None:
        await trio.sleep(2)
        source.cancel("user pressed stop")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_soon)
        result = await registry.execute(_call(source.signal))

    assert result == ABORTED
    assert trio.current_time() == 2
    assert reasons == [CancelReason("CANCELLED", "user pressed stop")]


@pytest.mark.parametrize("cleanup_ends_with", ["reraise", "return"])
async def test_caller_cancelling_during_cleanup_after_the_deadline_keeps_tool_timeout(
    autojump_clock: trio.testing.MockClock, cleanup_ends_with: str
) -> None:
    """Deadline first; the caller cancels while the body's shielded cleanup still runs."""
    source = CancelSource()
    cleanup_started = trio.Event()

    async def body(args: object, ctx: ToolRunContext) -> str:
        try:
            await trio.sleep(100)
        except trio.Cancelled:
            # The cleanup must run to completion even though the call is cancelled.
            with trio.CancelScope(shield=True):
                cleanup_started.set()
                await source.signal.wait_cancelled()
            if cleanup_ends_with == "reraise":
                raise
        return "cleaned up"

    registry = _registry(_tool(body, timeout=5))

    async def cancel_during_cleanup() -> None:
        await cleanup_started.wait()
        await trio.sleep(1)
        source.cancel("user pressed stop")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_during_cleanup)
        result = await registry.execute(_call(source.signal))

    assert result == _timed_out("5s")
    assert source.signal.cancelled
    assert trio.current_time() == 6


async def test_caller_reason_equal_to_the_deadlines_is_not_the_policys_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Only *this* policy's deadline counts, not any reason with code ``TOOL_TIMEOUT``."""
    source = CancelSource()

    async def cancel_soon() -> None:
        await trio.sleep(1)
        source.cancel("deadline exceeded after 5s", code=TOOL_TIMEOUT)

    registry = _registry(_tool(_interrupted, timeout=5))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_soon)
        result = await registry.execute(_call(source.signal))

    assert result == ToolResult(
        content=ABORTED.content,
        is_error=True,
        error=ABORTED.error,
        additional_contexts=(AdditionalContext("partial output saved", source="tool"),),
    )
    assert trio.current_time() == 1


async def test_outer_wrappers_tool_timeout_deadline_is_not_the_policys_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An outer wrapper narrowing with ``code=TOOL_TIMEOUT`` fires first: ``ABORTED``."""
    source = CancelSource()

    async def outer(exec: ToolDispatchExecution, call_next: CallNext) -> ToolResult:
        async with open_signal(exec.signal, timeout=1, code=TOOL_TIMEOUT) as narrowed:
            exec.signal = narrowed
            return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        await trio.sleep(100)
        return "finished"

    registry = ToolRegistry()
    registry.register(_tool(body, timeout=5))
    registry.add_around_execute(outer)
    registry.add_around_execute(timeout_policy())

    result = await registry.execute(_call(source.signal))

    assert result == ABORTED
    assert trio.current_time() == 1


async def test_callers_own_deadline_over_many_timed_calls_is_aborted_not_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A step deadline the caller set fires first for 200 concurrent timed calls.

    Its firing detaches every call's policy timer from inside the timer service's firing
    loop, which compacts the shared heap there; the heap must stay consistent.
    """
    source = CancelSource()
    registry = _registry(_tool(_interrupted, timeout=60))
    results: list[ToolResult] = []

    async def run(signal: CancelSignal, i: int) -> None:
        results.append(await registry.execute(_call(signal, call_id=f"call-{i}")))

    async with (
        open_signal(source.signal, timeout=1) as step_signal,
        trio.open_nursery() as nursery,
    ):
        for i in range(200):
            nursery.start_soon(run, step_signal, i)

    aborted = ToolResult(
        content=ABORTED.content,
        is_error=True,
        error=ABORTED.error,
        additional_contexts=(AdditionalContext("partial output saved", source="tool"),),
    )
    assert results == [aborted] * 200
    assert trio.current_time() == 1
    await trio.sleep(100)  # past every cancelled timer's deadline
    assert timer_service.get().statistics() == (0, 0)
    assert source.signal.statistics().listeners == 0


# --------------------------------------------------------------------------------------
# The tool's own timeouts are ordinary failures


async def _own_fail_after(args: object, ctx: ToolRunContext) -> str:
    with trio.fail_after(1):
        await trio.sleep(10)
    return "finished"


async def _own_timeout_error(args: object, ctx: ToolRunContext) -> str:
    with trio.move_on_after(1):
        await trio.sleep(10)
    raise TimeoutError("upstream did not answer")


@pytest.mark.parametrize("registry_timeout", [None, 100])
@pytest.mark.parametrize(
    ("body", "error"),
    [
        (_own_fail_after, ErrorInfo("TooSlowError", "TOOL_FAILED", "TooSlowError")),
        (
            _own_timeout_error,
            ErrorInfo("TimeoutError", "TOOL_FAILED", "upstream did not answer"),
        ),
    ],
    ids=["trio-TooSlowError", "TimeoutError"],
)
async def test_tools_own_timeout_exception_is_an_ordinary_failure(
    autojump_clock: trio.testing.MockClock,
    body: Body,
    error: ErrorInfo,
    registry_timeout: float | None,
) -> None:
    source = CancelSource()

    result = await _registry(_tool(body, timeout=registry_timeout)).execute(_call(source.signal))

    assert result == ToolResult(
        content=(TextBlock(f"Error: {error.message}"),), is_error=True, error=error
    )
    assert trio.current_time() == 1


# --------------------------------------------------------------------------------------
# Nothing outlives the call


async def test_later_stages_see_the_callers_signal_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An outer wrapper after ``call_next()`` and post-execute see the caller's signal."""
    source = CancelSource()
    seen: dict[str, CancelSignal] = {}

    async def outer(exec: ToolDispatchExecution, call_next: CallNext) -> ToolResult:
        seen["outer before"] = exec.signal
        try:
            return await call_next()
        finally:
            seen["outer after"] = exec.signal

    async def post(
        exec: ToolExecution, result: ToolResult, call_next: Callable[[], Awaitable[PostDecision]]
    ) -> PostDecision:
        seen["post-execute"] = exec.signal
        return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        seen["body"] = ctx.signal
        await trio.sleep(100)
        return "finished"

    registry = ToolRegistry()
    registry.register(_tool(body, timeout=5))
    registry.add_around_execute(outer)
    registry.add_around_execute(timeout_policy())
    registry.add_post_execute(post)

    result = await registry.execute(_call(source.signal))

    assert result == _timed_out("5s")
    assert seen["outer before"] is source.signal
    assert seen["outer after"] is source.signal
    assert seen["post-execute"] is source.signal
    assert seen["body"] is not source.signal
    assert seen["body"].reason == CancelReason("TOOL_TIMEOUT", "deadline exceeded after 5s")


class _Interrupt(BaseException):
    """A non-``Exception`` error, standing in for ``KeyboardInterrupt``."""


@pytest.mark.parametrize("outer_wrapper", [False, True], ids=["policy alone", "under a wrapper"])
async def test_a_listener_interrupt_at_the_tools_deadline_surfaces_from_execute(
    outer_wrapper: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """The deadline fires the body's signal from the timer task: a listener's interrupt
    there still cancels the body, and ``execute`` raises it once the call has its result
    (published, with the caller's signal restored and nothing left listening)."""
    source = CancelSource()
    published: list[ToolResult] = []
    seen: list[CancelSignal] = []

    def interrupt(reason: CancelReason) -> None:
        raise _Interrupt

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.signal.add_listener(interrupt)
        await trio.sleep(100)
        return "finished"

    async def outer(exec: ToolDispatchExecution, call_next: CallNext) -> ToolResult:
        try:
            return await call_next()
        finally:
            seen.append(exec.signal)

    registry = ToolRegistry()
    registry.register(_tool(body, timeout=5))
    if outer_wrapper:
        registry.add_around_execute(outer)
    registry.add_observer(lambda execution, result: published.append(result))

    with pytest.raises(_Interrupt):
        await registry.execute(_call(source.signal))

    assert trio.current_time() == 5
    assert published == [ABORTED]
    assert seen == ([source.signal] if outer_wrapper else [])
    assert source.signal.statistics().listeners == 0
    assert timer_service.get().statistics()[0] == 0


async def test_many_timed_calls_leave_no_listener_on_the_callers_signal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """10,000 calls, one in ten timing out, on one long-lived signal."""
    source = CancelSource()
    dispose = source.signal.add_listener(lambda reason: None)
    before = source.signal.statistics()

    async def fast(args: object, ctx: ToolRunContext) -> str:
        await trio.lowlevel.checkpoint()
        return "done"

    async def slow(args: object, ctx: ToolRunContext) -> str:
        await trio.sleep(10)
        return "done"

    registry = _registry(_tool(fast, name="fast", timeout=5), _tool(slow, name="slow", timeout=1))
    codes: dict[str | None, int] = {}
    for i in range(10_000):
        name = "slow" if i % 10 == 0 else "fast"
        result = await registry.execute(_call(source.signal, name, call_id=f"call-{i}"))
        codes[result.code] = codes.get(result.code, 0) + 1

    assert codes == {None: 9_000, "TOOL_TIMEOUT": 1_000}
    assert source.signal.statistics() == before
    dispose()


async def test_deadline_timers_of_calls_that_finished_in_time_are_compacted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The shared timer heap drops the cancelled timers of calls that beat their deadline."""
    source = CancelSource()

    async def fast(args: object, ctx: ToolRunContext) -> str:
        await trio.lowlevel.checkpoint()
        return "done"

    registry = _registry(_tool(fast, timeout=60))
    for i in range(10_000):
        result = await registry.execute(_call(source.signal, call_id=f"call-{i}"))
        assert result == ToolResult(content=(TextBlock("done"),))

    armed, entries = timer_service.get().statistics()
    # Arming compacts the heap once 64 disarmed timers or more make up over half of it;
    # with no timer left armed, at most 64 dead entries may wait there.
    assert armed == 0
    assert entries <= 64
    assert source.signal.statistics().listeners == 0


# --------------------------------------------------------------------------------------
# Threads and processes (real clock)


async def test_thread_polling_check_cancelled_stops_at_the_deadline_and_is_awaited() -> None:
    source = CancelSource()
    thread_exited = threading.Event()
    exited_when_execute_returned: list[bool] = []

    def work() -> str:
        try:
            for _ in range(6000):  # a minute of 10 ms steps
                trio.from_thread.check_cancelled()
                time.sleep(0.01)
            return "finished"
        finally:
            thread_exited.set()

    async def body(args: object, ctx: ToolRunContext) -> str:
        # The default abandon_on_cancel=False: the registry waits for the thread.
        return await trio.to_thread.run_sync(work)

    result = await _registry(_tool(body, timeout=0.2)).execute(_call(source.signal))
    exited_when_execute_returned.append(thread_exited.is_set())

    assert result == _timed_out("0.2s")
    assert exited_when_execute_returned == [True]


async def test_subprocess_is_killed_at_the_deadline_and_waited_for() -> None:
    source = CancelSource()
    processes: list[trio.Process] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        command = [sys.executable, "-c", "import time; time.sleep(60)"]
        async with trio.open_nursery() as nursery:
            process: trio.Process = await nursery.start(trio.run_process, command)
            processes.append(process)
        return "finished"

    result = await _registry(_tool(body, timeout=0.2)).execute(_call(source.signal))
    returncodes = [process.returncode for process in processes]

    assert result == _timed_out("0.2s")
    assert len(returncodes) == 1
    assert returncodes[0] is not None
    assert returncodes[0] != 0


# --------------------------------------------------------------------------------------
# The example


async def test_timeouts_example_shows_three_kinds_of_tool_timing_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    namespace = runpy.run_path(str(EXAMPLE), run_name="timeouts_example")

    await namespace["main"]()

    out = capsys.readouterr().out
    assert out.count("TOOL_TIMEOUT") == 3
    assert "worker thread stopped: True" in out
    assert "child process exit code: None" not in out
