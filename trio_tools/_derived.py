"""Derived signals: :func:`open_signal`, and the link behind it, the registry's fusion and the
timeout policy.

A derived signal follows its parents (a :class:`~trio_tools._signal._Follower` on each) and,
optionally, a deadline armed on the run's shared timer (``_timers``).
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import math
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import final

import trio

from ._signal import CancelReason, CancelSignal, _Follower, _keys
from ._timers import Timer, run_timers

__all__ = ["open_signal"]


class _Link(_Follower):
    """A derived signal that fires on the first of its parents or a deadline.

    Shared by :func:`open_signal` and the registry's fusion of the caller's signal with a
    wrapper's replacement.  :meth:`detach` removes every listener it put on a parent and stops
    its timer; it does not fire the derived signal.
    """

    __slots__ = ("_code", "_deadline", "_disposers", "_fatal", "_timeout", "_timer")

    def __init__(
        self,
        parents: tuple[CancelSignal, ...],
        deadline: float = math.inf,
        code: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """``code`` (with a finite ``deadline``) arms the deadline; ``timeout``, when given,
        is what the reason's message reports."""
        # What ``CancelSignal._create()`` does, without the metaclass call: every timed
        # call and every fusion makes one.
        signal = object.__new__(CancelSignal)
        signal._reason = None
        signal._listeners = {}
        self.signal = signal
        self._deadline = deadline
        self._code = code
        self._timeout = timeout
        self._disposers: list[tuple[CancelSignal, int]] = []
        self._timer: Timer | None = None
        # What a listener raised (KeyboardInterrupt...) when the deadline fired the signal
        # from the timer task: re-raised by close(), in the task that owns the signal.
        self._fatal: BaseException | None = None
        # Parents that already fired win over a deadline: they fired before this signal
        # existed, while the deadline is only checked from now on.
        for parent in parents:
            reason = parent._reason
            if reason is not None:
                self.signal._fire(reason)
                return
        if code is not None:
            if deadline <= trio.current_time():
                self.signal._fire(self._deadline_reason())
                return
            if deadline != math.inf:
                self._timer = run_timers().schedule(deadline, self._on_deadline)
        # The link itself is the listener: _propagate recognises it and walks into the
        # derived signal instead of recursing.
        for parent in parents:
            key = next(_keys)
            parent._listeners[key] = self
            self._disposers.append((parent, key))

    def _deadline_reason(self) -> CancelReason:
        # Made only when the deadline fires: most deadlines never do.
        assert self._code is not None
        timeout = self._timeout
        if timeout is None:
            return CancelReason(self._code, "deadline exceeded")
        return CancelReason(self._code, f"deadline exceeded after {timeout:g}s")

    def _parent_fired(self, reason: CancelReason) -> CancelReason:
        """Detach on a parent's firing; the reason the derived signal fires with."""
        # Deterministic tie-break: a parent firing at or after the deadline (same virtual
        # instant, whichever task Trio happened to run first) reports the deadline, which had
        # already passed.
        if self._timer is not None and trio.current_time() >= self._deadline:
            reason = self._deadline_reason()
        self.detach()
        return reason

    def _on_deadline(self) -> None:
        self._timer = None
        self.detach()
        try:
            self.signal._fire(self._deadline_reason())
        except BaseException as exc:
            # No task called cancel(): the timer task fired the signal, and it must not
            # crash (Trio would turn that into TrioInternalError).  Every listener heard it;
            # the owner's block re-raises it as it exits (see close()).
            self._fatal = exc

    def close(self) -> None:
        """:meth:`detach`, then re-raise what a listener raised when the deadline fired."""
        self.detach()
        fatal, self._fatal = self._fatal, None
        if fatal is not None:
            raise fatal

    def detach(self) -> None:
        for parent, key in self._disposers:
            parent._listeners.pop(key, None)
        self._disposers.clear()
        timer = self._timer
        if timer is not None:
            self._timer = None
            run_timers().cancel(timer)


@final
class _OpenSignal(AbstractAsyncContextManager[CancelSignal]):
    __slots__ = ("_code", "_deadline", "_link", "_parents", "_timeout")

    def __init__(
        self,
        parents: tuple[CancelSignal, ...],
        timeout: float | None,
        deadline: float | None,
        code: str,
    ) -> None:
        self._parents = parents
        self._timeout = timeout
        self._deadline = deadline
        self._code = code
        self._link: _Link | None = None

    async def __aenter__(self) -> CancelSignal:
        if self._link is not None:
            raise RuntimeError("open_signal() context managers are single-use")
        timeout = self._timeout
        deadline = self._deadline
        if timeout is None and deadline is None:
            self._link = _Link(self._parents)
            return self._link.signal
        # The timeout is measured from entry, not from the call to open_signal().
        when = math.inf if deadline is None else deadline
        reported: float | None = None
        if timeout is not None:
            relative = trio.current_time() + timeout
            if relative <= when:
                when, reported = relative, timeout
        self._link = _Link(self._parents, when, self._code, reported)
        return self._link.signal

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._link is not None
        self._link.close()


def open_signal(
    *parents: CancelSignal,
    timeout: float | None = None,
    deadline: float | None = None,
    code: str = "DEADLINE_EXCEEDED",
) -> AbstractAsyncContextManager[CancelSignal]:
    """Derive a signal that fires when any parent fires or a deadline passes, whichever first.

    ``async with open_signal(exec.signal, timeout=5) as narrowed:`` gives a signal whose
    :attr:`~CancelSignal.reason` is the first cause: the reason of the parent that fired, or
    ``CancelReason(code, f"deadline exceeded after {timeout:g}s")`` (``"deadline exceeded"``
    when only ``deadline`` was given; with both, the earlier instant counts, on a tie the
    ``timeout`` message).  Deadlines are on the Trio clock, so virtual clocks work.

    Propagation from a parent is synchronous.  A parent that fires at the same instant the
    deadline passes reports the deadline, whichever task Trio runs first (the deadline had
    already passed).  A parent that has already fired when the block is entered wins over an
    already-passed deadline, and the first such parent in argument order gives the reason.

    Leaving the block does **not** fire the derived signal; it detaches it: every listener
    put on a parent is removed and the timer stops.  Exceptions from the block propagate
    unwrapped.  When the deadline fires, no task called ``cancel()``: if a listener raises
    a ``BaseException`` then (``KeyboardInterrupt``, ``SystemExit``), every other listener
    still hears the cancellation, and leaving the block re-raises that exception.

    Entering and leaving are not checkpoints (like :class:`trio.CancelScope`); the manager
    is asynchronous because its timer lives in the running Trio loop.  Propagation reaches
    every derived signal however deep the chain of derivations.

    Args:
        *parents: the signals to follow; none is fine (a pure deadline).
        timeout: seconds from entry, ``>= 0``.
        deadline: an absolute time on the Trio clock.
        code: the code of the deadline's reason.

    Raises:
        ValueError: ``timeout`` is negative or NaN, or ``deadline`` is NaN.
        TypeError: a parent is not a :class:`CancelSignal`.
    """
    for parent in parents:
        if not isinstance(parent, CancelSignal):
            raise TypeError(f"open_signal() parents must be CancelSignal, got {parent!r}")
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, got {code!r}")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise TypeError(f"timeout must be a number of seconds, got {timeout!r}")
        if math.isnan(timeout) or timeout < 0:
            raise ValueError(f"timeout must be non-negative, got {timeout!r}")
    if deadline is not None:
        if isinstance(deadline, bool) or not isinstance(deadline, int | float):
            raise TypeError(f"deadline must be a number, got {deadline!r}")
        if math.isnan(deadline):
            raise ValueError("deadline must not be NaN")
    return _OpenSignal(parents, timeout, deadline, code)
