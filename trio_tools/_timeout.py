"""The timeout policy: per-tool deadlines that narrow the caller's lifetime."""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from ._execution import ToolDispatchExecution
from ._registry import AroundWrapper
from ._results import TOOL_TIMEOUT, ToolResult, error_result
from ._signal import CancelSignal, _Link

__all__ = ["timeout_policy"]


def timeout_policy() -> AroundWrapper:
    """An around-execute wrapper that makes each tool's ``timeout`` effective.

    For a call whose ``exec.definition.timeout`` is set, it narrows ``exec.signal`` with
    ``open_signal(exec.signal, timeout=t, code=TOOL_TIMEOUT)`` for the span of
    ``call_next()``.  The registry fuses that with the caller's signal, so the body is
    interrupted at its next checkpoint through its own cancel scope, and is awaited to
    quiescence like any cancelled body (threads started with ``trio.to_thread.run_sync``
    and processes run with ``trio.run_process`` included).  The timer starts when the
    policy is reached, so it also covers later wrappers.

    If **this policy's own** deadline fired first, the result becomes ``TOOL_TIMEOUT``
    (``Error: tool call timed out after {t:g}s``), whatever came back: a success, an
    ``ABORTED``, or an error the tool raised in reaction to the cancellation.  Contexts and
    a halt on the result are kept.  If the caller (or an outer wrapper) cancelled first,
    the result is left as it is, so ``ABORTED`` stands, even when that reason's code
    happens to be ``TOOL_TIMEOUT``.  A ``TimeoutError`` or ``trio.TooSlowError`` the tool
    raised by itself is an ordinary tool failure.  Tools without a timeout pass through
    with the caller's signal untouched: their body's ``ctx.signal`` is the caller's own.

    Install it with ``registry.add_around_execute(timeout_policy())``; register it last
    (innermost) for the deadline to cover only the body.
    """

    async def timeout_wrapper(
        exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
    ) -> ToolResult:
        definition = exec.definition
        timeout = None if definition is None else definition.timeout
        if timeout is None:
            return await call_next()
        outer = exec.signal
        # What `async with open_signal(outer, timeout=timeout, code=TOOL_TIMEOUT)` does,
        # without the context manager's argument checks (the definition validated the
        # timeout): this runs on every timed call.
        link = _Link((outer,), trio.current_time() + timeout, TOOL_TIMEOUT, timeout)
        narrowed = link.signal
        exec.signal = narrowed
        try:
            result = await call_next()
        finally:
            exec.signal = outer
            link.close()
        if not _deadline_fired_first(narrowed, outer):
            return result
        return error_result(
            "ToolTimeoutError",
            TOOL_TIMEOUT,
            f"tool call timed out after {timeout:g}s",
            additional_contexts=result.additional_contexts,
            halt=result.halt,
        )

    return timeout_wrapper


def _deadline_fired_first(narrowed: CancelSignal, outer: CancelSignal) -> bool:
    """Whether ``narrowed`` fired because of its own deadline rather than ``outer``.

    A derived signal that fired because a parent did carries that parent's reason object;
    any other reason is the one ``open_signal`` made for its deadline.  Identity, not the
    code or even equality, is what tells them apart: the caller may cancel with a reason
    equal to the deadline's.
    """
    reason = narrowed.reason
    return reason is not None and reason is not outer.reason
