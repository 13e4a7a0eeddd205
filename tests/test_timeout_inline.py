"""The timeout policy applied inline: when it is a call's only around-execute wrapper, the
registry runs no chain for it (dispatch narrows the signal itself).  Each edge case here is
checked against the same call with the policy under a pass-through wrapper (the general
chain, where the policy's ``__call__`` runs): both must give the same result.
"""

# The timer-heap checks inspect the private timer service on purpose:
# pyright: reportPrivateUsage=false

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing
from helpers_registry import a_stray_cancelled, aborted_before_dispatch

from trio_tools import (
    Allow,
    CancelSource,
    ErrorInfo,
    PreDecision,
    TextBlock,
    ToolCall,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    define_tool,
    run_tool_calls,
    timeout_policy,
)
from trio_tools._timers import timer_service

Body = Callable[[object, ToolRunContext], Awaitable[object]]
CallNext = Callable[[], Awaitable[ToolResult]]

SHAPES = ["policy alone", "explicit policy alone", "under a wrapper"]


def _timed_out(after: str) -> ToolResult:
    message = f"tool call timed out after {after}"
    return ToolResult(
        content=(TextBlock(f"Error: {message}"),),
        is_error=True,
        error=ErrorInfo(name="ToolTimeoutError", code="TOOL_TIMEOUT", message=message),
    )


async def _pass_through(exec: ToolDispatchExecution, call_next: CallNext) -> ToolResult:
    return await call_next()


def _registry(body: Body, timeout: Any, shape: str) -> ToolRegistry:
    """The registry's own policy alone, or the same policy under a wrapper of the user's."""
    registry = ToolRegistry()
    registry.register(define_tool(body, name="tool", timeout=timeout))
    if shape == "under a wrapper":
        registry.add_around_execute(_pass_through)
    if shape != "policy alone":
        registry.add_around_execute(timeout_policy())
    return registry


def _call(source: CancelSource) -> ToolExecutionInput:
    return ToolExecutionInput(call_id="call-1", name="tool", arguments={}, signal=source.signal)


async def _executed(registry: ToolRegistry, source: CancelSource) -> ToolResult:
    """``registry.execute(...)``, which must return: a stray ``Cancelled`` escaping it
    would be absorbed by the test's own nursery, and the test would pass unchecked."""
    try:
        return await registry.execute(_call(source))
    except trio.Cancelled as exc:
        raise AssertionError("execute raised trio.Cancelled; nobody cancelled it") from exc


def _nothing_left(source: CancelSource) -> None:
    assert source.signal.statistics().listeners == 0
    try:
        service = timer_service.get()
    except LookupError:  # no deadline was ever armed in this run
        return
    assert service.statistics()[0] == 0


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_deadline_already_passed_when_the_policy_is_reached_is_tool_timeout(
    autojump_clock: trio.testing.MockClock, shape: str
) -> None:
    """A timeout too small to move the clock: the deadline has passed on arrival, so the
    body never runs and the call is the policy's ``TOOL_TIMEOUT``."""
    source = CancelSource()
    ran: list[bool] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        ran.append(True)
        return "done"

    autojump_clock.jump(1e9)  # 1e9 + 1e-9 == 1e9 in floating point
    result = await _executed(_registry(body, 1e-9, shape), source)

    assert result == _timed_out("1e-09s")
    assert ran == []
    _nothing_left(source)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seconds", [5.0, None], ids=["timed", "untimed"])
async def test_a_caller_cancelled_during_the_gate_is_aborted_before_dispatch(
    autojump_clock: trio.testing.MockClock, shape: str, seconds: float | None
) -> None:
    """The caller fired before the policy narrowed: its reason stands, nothing is armed."""
    source = CancelSource()
    ran: list[bool] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        ran.append(True)
        return "done"

    async def cancel_then_allow(
        exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        source.cancel("stop")
        return Allow()

    registry = _registry(body, seconds, shape)
    registry.add_pre_execute(cancel_then_allow)
    result = await _executed(registry, source)

    assert result == aborted_before_dispatch()
    assert ran == []
    _nothing_left(source)


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_callable_timeout_raising_a_stray_cancelled_is_wrapper_failed(
    autojump_clock: trio.testing.MockClock, shape: str
) -> None:
    source = CancelSource()
    stray = await a_stray_cancelled()

    def timeout(args: object) -> float:
        raise stray

    async def body(args: object, ctx: ToolRunContext) -> str:
        return "done"

    result = await _executed(_registry(body, timeout, shape), source)

    assert result.error is not None
    assert (result.error.code, result.error.name) == ("WRAPPER_FAILED", "Cancelled")
    _nothing_left(source)


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_stray_cancelled_from_a_timed_body_is_a_tool_failure(
    autojump_clock: trio.testing.MockClock, shape: str
) -> None:
    source = CancelSource()
    stray = await a_stray_cancelled()

    async def body(args: object, ctx: ToolRunContext) -> str:
        await trio.sleep(1)
        raise stray

    result = await _executed(_registry(body, 5.0, shape), source)

    assert result.error is not None
    assert (result.error.code, result.error.name) == ("TOOL_FAILED", "Cancelled")
    _nothing_left(source)


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_body_failing_after_its_deadline_is_tool_timeout(
    autojump_clock: trio.testing.MockClock, shape: str
) -> None:
    source = CancelSource()

    async def body(args: object, ctx: ToolRunContext) -> str:
        try:
            await trio.sleep(100)
        finally:
            raise RuntimeError("cleanup broke")

    result = await _executed(_registry(body, 5.0, shape), source)

    assert result == _timed_out("5s")
    assert trio.current_time() == 5
    _nothing_left(source)


@pytest.mark.parametrize("shape", SHAPES)
async def test_ambient_cancellation_of_a_timed_call_propagates_after_publishing(
    autojump_clock: trio.testing.MockClock, shape: str
) -> None:
    """An enclosing scope's cancellation is not the policy's: ``execute`` raises it (the
    scope catches it) once the call has its ``ABORTED`` result, and nothing stays armed."""
    source = CancelSource()
    published: list[ToolResult] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        await trio.sleep(100)
        return "done"

    registry = _registry(body, 5.0, shape)
    registry.add_observer(lambda execution, result: published.append(result))
    with trio.move_on_after(2) as scope:
        await registry.execute(_call(source))

    assert scope.cancelled_caught
    assert trio.current_time() == 2
    assert [result.error.code if result.error else None for result in published] == ["ABORTED"]
    _nothing_left(source)


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_deadline_passing_while_the_dispatch_marker_is_written_is_tool_timeout(
    autojump_clock: trio.testing.MockClock, shape: str
) -> None:
    """The batch writes its dispatch marker after the policy narrowed: a deadline that
    passes meanwhile stops the body from starting, and the call is ``TOOL_TIMEOUT``."""
    source = CancelSource()
    ran: list[bool] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        ran.append(True)
        return "done"

    class SlowMarker:
        async def record_call(self, call: ToolCall) -> None:
            await trio.lowlevel.checkpoint()

        async def record_dispatch(self, call: ToolCall) -> None:
            await trio.sleep(10)

        async def record_result(self, call: ToolCall, result: ToolResult) -> None:
            await trio.lowlevel.checkpoint()

    outcome = await run_tool_calls(
        _registry(body, 5.0, shape),
        [ToolCall("call-1", "tool", {})],
        signal=source.signal,
        journal=SlowMarker(),
    )

    assert outcome.results == (_timed_out("5s"),)
    assert ran == []
    _nothing_left(source)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_pipeline_runs_no_chain_for_the_policy_alone(shape: str) -> None:
    """Which calls take the inline path: those whose around-execute steps are the timeout
    policy alone, timed or not (an explicit policy also applies to untimed tools)."""

    async def body(args: object, ctx: ToolRunContext) -> str:
        return "done"

    stages = _registry(body, 5.0, shape)._stages
    alone = stages.policy_alone
    if shape == "under a wrapper":
        assert alone is None
    else:
        assert alone is stages.around_timed
        assert (stages.around is alone) == (shape == "explicit policy alone")


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_listener_raising_a_stray_cancelled_at_the_deadline_is_wrapper_failed(
    autojump_clock: trio.testing.MockClock, shape: str
) -> None:
    """The deadline fires the body's signal from the timer task; a listener that raises a
    ``trio.Cancelled`` nobody owns there has it re-raised by the policy as the call ends:
    the policy's failure, ``WRAPPER_FAILED``, like anything else a wrapper raises."""
    source = CancelSource()
    stray = await a_stray_cancelled()

    def listener(reason: object) -> None:
        raise stray

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.signal.add_listener(listener)
        await trio.sleep(100)
        return "done"

    result = await _executed(_registry(body, 5.0, shape), source)

    assert result.error is not None
    assert (result.error.code, result.error.name) == ("WRAPPER_FAILED", "Cancelled")
    assert trio.current_time() == 5
    _nothing_left(source)
