"""The timeout policy: per-tool deadlines that narrow the caller's lifetime."""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ._derived import _Link
from ._execution import ToolDispatchExecution, _Run
from ._failures import wrapper_failure
from ._outcomes import FinalResult, failure_outcome
from ._results import TOOL_TIMEOUT, AdditionalContext, ToolResult, error_result
from ._signal import CancelSignal
from ._timers import run_timers, timer_service
from ._util import check_timeout_value

if TYPE_CHECKING:
    from ._stages import AroundWrapper

__all__ = ["TimeoutPolicy", "is_timeout_policy", "timeout_policy"]

_new = object.__new__


class TimeoutPolicy:
    """The around-execute wrapper :func:`timeout_policy` returns.

    A class (not a closure) so that a registry can tell that a timeout policy was added
    explicitly, and then not apply its own.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "<trio_tools.timeout_policy()>"

    async def __call__(
        self, exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
    ) -> ToolResult:
        narrowing = narrow(exec._run)
        if narrowing is None:
            return await call_next()
        try:
            result = await call_next()
        finally:
            narrowing.release(exec._run)
        return narrowing.result(result)


def narrow(run: _Run) -> _Narrowing | None:
    """Narrow the call's current signal to the tool's timeout, if it has one.

    What ``exec.signal = open_signal(exec.signal, timeout=t, code=TOOL_TIMEOUT)`` does,
    without the context manager and its argument checks (the definition validated the
    timeout): this runs on every timed call.  ``None`` when no deadline applies.

    Raises:
        ValueError: a callable ``timeout`` raised or gave an invalid value.
    """
    definition: Any = run.definition  # resolved: only those reach the around-execute stage
    timeout: Any = definition.timeout
    if type(timeout) is not float:  # a float, the usual case, needs neither check
        if timeout is not None and callable(timeout):
            timeout = _evaluate(run, timeout)
        if timeout is None:
            return None
    # The state ``_Link((outer,), timeout, code=TOOL_TIMEOUT)`` would set, step by step in
    # this one frame: no constructor call, and no list of disposers (see _Narrowing).
    outer = run.dispatch_signal
    narrowing = _new(_Narrowing)
    signal = narrowing.signal = _new(CancelSignal)
    signal._reason = None
    signal._listeners = {}
    narrowing._fatal = None
    narrowing._outer = outer
    narrowing._timeout = timeout
    # Each branch below sets the other slots once.
    reason = outer._reason
    if reason is not None:  # the outer signal fired before: it wins, nothing is armed
        signal._parents = ()
        narrowing._deadline = math.inf
        narrowing._timer, narrowing._timers = -1, None
        signal._fire(reason)
    else:
        try:  # what run_timers() does, without its frame
            timers = timer_service.get()
        except LookupError:
            timers = run_timers()
        now = timers.clock.current_time()
        when = narrowing._deadline = now + timeout
        if when <= now:
            signal._parents = ()
            narrowing._timer, narrowing._timers = -1, None
            signal._fire(narrowing._deadline_reason())
        else:
            narrowing._timers = timers
            narrowing._timer = timers.arm(when, narrowing)
            # Its own key on the outer signal: it listens there once.
            outer._listeners[narrowing] = narrowing
            signal._parents = (outer,)
    run.dispatch_signal = signal  # what ``exec.signal = narrowed`` does
    return narrowing


class _Narrowing(_Link):
    """The timeout policy's derived signal for one call: set as ``exec.signal`` until
    :meth:`release`, then :meth:`result` tells whether its own deadline fired first.

    It follows one parent, ``_outer``, under its own key there, so :meth:`detach` is one
    ``pop`` (``_Link``'s list of disposers is left unset).
    """

    __slots__ = ("_outer",)

    _outer: CancelSignal  # the signal it narrows, restored by release()
    _code = TOOL_TIMEOUT  # the deadline's reason code (read-only: no slot of its own set)

    def detach(self) -> None:
        self.signal._parents = ()
        self._outer._listeners.pop(self, None)
        timer = self._timer
        if timer >= 0:
            self._timer = -1
            assert self._timers is not None  # set with the timer
            self._timers.armed.pop(timer, None)  # disarm

    def release(self, run: _Run) -> None:
        """Restore the call's signal, then detach (see :meth:`_Link.close`)."""
        run.dispatch_signal = self._outer
        self.close()

    def result(self, result: ToolResult) -> ToolResult:
        """``result``, or ``TOOL_TIMEOUT`` if this deadline fired first (keeping contexts
        and halt)."""
        # Fired because the outer signal did, the narrowed signal carries that reason
        # object; any other reason is the one made for its deadline.  Identity, not the
        # code or even equality, tells them apart: the caller may cancel with a reason
        # equal to the deadline's.
        reason = self.signal._reason
        if reason is None or reason is self._outer._reason:
            return result
        return error_result(
            "ToolTimeoutError",
            TOOL_TIMEOUT,
            f"tool call timed out after {self._timeout:g}s",
            additional_contexts=result.additional_contexts,
            halt=result.halt,
        )


def timeout_outcome(link: _Link | None, result: ToolResult) -> ToolResult:
    """``link.result(result)`` when ``link`` is the timeout policy's narrowing; else
    ``result`` itself (no deadline applied, or ``link`` is some other derived signal)."""
    return link.result(result) if type(link) is _Narrowing else result


def policy_failure(exc: Exception | trio.Cancelled) -> FinalResult:
    """The final ``WRAPPER_FAILED`` for what the timeout policy, applied inline by dispatch,
    raised (see :func:`wrapper_failure`)."""
    try:
        return FinalResult(wrapper_failure(exc))
    finally:
        del exc  # a re-raised exception's traceback holds this frame: no cycle through it


def timed_failure(
    failure: BaseException, link: _Link | None, contexts: tuple[AdditionalContext, ...]
) -> ToolResult:
    """``failure_outcome()`` of a call the timeout policy runs inline, then the policy's
    result; a ``trio.Cancelled`` it raises is classified as the policy's own frame would
    (see :func:`wrapper_failure`)."""
    try:
        return timeout_outcome(link, failure_outcome(failure, contexts))
    except trio.Cancelled as exc:
        raise policy_failure(exc) from None
    finally:
        del failure  # the traceback of what this raises holds this frame


def is_timeout_policy(wrapper: object) -> bool:
    """Whether ``wrapper`` is a :func:`timeout_policy`."""
    return type(wrapper) is TimeoutPolicy


def _evaluate(run: _Run, timeout: Callable[[Any], object]) -> float | None:
    """A callable ``timeout`` applied to the call's parsed arguments, checked.

    Raises:
        ValueError: it raised, or gave something other than positive finite seconds or
            ``None`` (the call is then ``WRAPPER_FAILED``); the message names the tool.
    """
    try:
        value = timeout(run.parsed)
    except Exception as exc:
        raise ValueError(
            f"timeout of tool {run.name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    try:
        return check_timeout_value(value)
    except ValueError as exc:
        raise ValueError(f"timeout of tool {run.name!r}: {exc}") from None


def timeout_policy() -> AroundWrapper:
    """An around-execute wrapper that makes each tool's ``timeout`` effective.

    A :class:`ToolRegistry` applies it by itself (``enforce_timeouts=True``, the default) as
    the innermost around-execute step; add it explicitly with ``add_around_execute`` to
    choose its position among the wrappers (it is then applied there, once).

    For a call whose ``exec.definition.timeout`` is set, it narrows ``exec.signal`` with
    ``open_signal(exec.signal, timeout=t, code=TOOL_TIMEOUT)`` for the span of
    ``call_next()``.  A callable ``timeout`` is evaluated with the call's parsed arguments
    when the call reaches the policy; a raise or an invalid value (not positive finite
    seconds or ``None``) makes the call ``WRAPPER_FAILED`` with a message naming the tool,
    and ``None`` means no deadline for this call.  The registry fuses the narrowed signal
    with the caller's, so the body is interrupted at its next checkpoint through its own
    cancel scope, and is awaited to quiescence like any cancelled body (threads started
    with ``trio.to_thread.run_sync`` and processes run with ``trio.run_process``
    included).  The timer starts when the policy is reached, so it also covers later
    wrappers.

    If **this policy's own** deadline fired first, the result becomes ``TOOL_TIMEOUT``
    (``Error: tool call timed out after {t:g}s``), whatever came back: a success, an
    ``ABORTED``, or an error the tool raised in reaction to the cancellation.  Contexts and
    a halt on the result are kept.  If the caller (or an outer wrapper) cancelled first,
    the result is left as it is, so ``ABORTED`` stands, even when that reason's code
    happens to be ``TOOL_TIMEOUT``.  A ``TimeoutError`` or ``trio.TooSlowError`` the tool
    raised by itself is an ordinary tool failure.  Tools without a timeout pass through
    with the caller's signal untouched: their body's ``ctx.signal`` is the caller's own.
    """
    return TimeoutPolicy()
