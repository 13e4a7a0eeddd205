"""The timeout policy: per-tool deadlines that narrow the caller's lifetime."""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from ._execution import ToolDispatchExecution
from ._results import TOOL_TIMEOUT, ToolResult, error_result
from ._signal import CancelReason, _Link

__all__ = ["timeout_policy"]


def timeout_policy() -> Callable[
    [ToolDispatchExecution, Callable[[], Awaitable[ToolResult]]], Awaitable[ToolResult]
]:
    """An around-execute wrapper that makes each tool's ``timeout`` effective.

    For a call whose ``exec.definition.timeout`` is set, it narrows ``exec.signal`` with
    ``open_signal(exec.signal, timeout=t, code=TOOL_TIMEOUT)`` around ``call_next()``; the
    registry fuses that with the caller's signal, so the body is interrupted at its next
    checkpoint through its own cancel scope.  If **this policy's** deadline fired first, the
    result becomes ``TOOL_TIMEOUT`` (``Error: tool call timed out after {t:g}s``) whatever
    came back; if the caller cancelled first, ``ABORTED`` stands.  A ``TimeoutError`` or
    ``trio.TooSlowError`` the tool raised by itself is an ordinary tool failure.  Tools
    without a timeout pass through with the caller's signal untouched.

    Install it with ``registry.add_around_execute(timeout_policy())``.
    """

    async def timeout_wrapper(
        exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
    ) -> ToolResult:
        definition = exec.definition
        timeout = definition.timeout if definition is not None else None
        if timeout is None:
            return await call_next()
        # Identity, not the code, tells that *this* deadline fired: any other signal may
        # carry a reason with code TOOL_TIMEOUT too.
        deadline_reason = CancelReason(TOOL_TIMEOUT, f"deadline exceeded after {timeout:g}s")
        link = _Link((exec.signal,), trio.current_time() + timeout, deadline_reason)
        try:
            exec.signal = link.signal
            result = await call_next()
        finally:
            link.detach()
        if link.signal.reason is not deadline_reason:
            return result
        return error_result(
            "ToolTimeoutError",
            TOOL_TIMEOUT,
            f"tool call timed out after {timeout:g}s",
            additional_contexts=result.additional_contexts,
            halt=result.halt,
        )

    return timeout_wrapper
