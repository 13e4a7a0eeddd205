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

from ._signal import CancelReason, CancelSignal, _Follower, _keys
from ._timers import TimerService, run_timers

__all__ = ["open_signal"]


class _Link(_Follower):
    """A derived signal that fires on the first of its parents or a deadline.

    Shared by :func:`open_signal`, the timeout policy (its ``_Narrowing`` subclass) and the
    registry's fusion of the caller's signal with a wrapper's replacement.  While attached,
    the derived signal's ``_parents`` are the parents it listens to (dispatch reads them to
    skip a fusion that would add nothing).  :meth:`detach` removes every listener it put
    on a parent and disarms its timer; it does not fire the derived signal.
    """

    __slots__ = ("_code", "_deadline", "_disposers", "_fatal", "_timeout", "_timer", "_timers")

    def __init__(
        self,
        parents: tuple[CancelSignal, ...],
        timeout: float | None = None,
        deadline: float | None = None,
        code: str = "DEADLINE_EXCEEDED",
    ) -> None:
        """Follow ``parents`` and, if given, ``timeout`` seconds from now or the absolute
        ``deadline``, whichever comes first (on a tie, the timeout's message)."""
        # What ``CancelSignal._create()`` does, without the metaclass call: every timed
        # call makes one.
        signal = object.__new__(CancelSignal)
        signal._reason = None
        signal._listeners = {}
        signal._parents = ()
        self.signal = signal
        self._code = code
        self._deadline = math.inf
        self._timeout: float | None = None  # the timeout the deadline's reason reports
        # Each parent with the key of this link's listener on it.
        self._disposers: list[tuple[CancelSignal, int]] = []
        # The armed deadline: its key in ``_timers`` (the run's timer service), or -1.
        self._timer = -1
        self._timers: TimerService | None = None
        # What a listener raised (KeyboardInterrupt...) when the deadline fired the signal
        # from the timer task: re-raised by close(), in the task that owns the signal.
        self._fatal: BaseException | None = None
        # Parents that already fired win over a deadline: they fired before this signal
        # existed, while the deadline is only checked from now on.
        for parent in parents:
            reason = parent._reason
            if reason is not None:
                signal._fire(reason)
                return
        if timeout is not None or (deadline is not None and deadline != math.inf):
            timers = run_timers()
            now = timers.clock.current_time()
            when = math.inf if deadline is None else deadline
            if timeout is not None and now + timeout <= when:
                when = now + timeout
                self._timeout = timeout
            self._deadline = when
            if when <= now:
                signal._fire(self._deadline_reason())
                return
            self._timers = timers
            self._timer = timers.arm(when, self)
        # The link itself is the listener: _propagate recognises it and walks into the
        # derived signal instead of recursing.
        disposers = self._disposers
        for parent in parents:
            key = next(_keys)
            parent._listeners[key] = self
            disposers.append((parent, key))
        signal._parents = parents

    def _deadline_reason(self) -> CancelReason:
        # Made only when the deadline fires: most deadlines never do.
        timeout = self._timeout
        if timeout is None:
            return CancelReason(self._code, "deadline exceeded")
        return CancelReason(self._code, f"deadline exceeded after {timeout:g}s")

    def _parent_fired(self, reason: CancelReason) -> CancelReason:
        """Detach on a parent's firing; the reason the derived signal fires with."""
        # Deterministic tie-break: a parent firing at or after the deadline (same virtual
        # instant, whichever task Trio happened to run first) reports the deadline, which had
        # already passed.
        timers = self._timers
        if (
            self._timer >= 0
            and timers is not None
            and timers.clock.current_time() >= self._deadline
        ):
            reason = self._deadline_reason()
        self.detach()
        return reason

    def expired(self) -> None:
        """The deadline passed: fire (called by the timer service, in its task)."""
        self._timer = -1
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
        self.signal._parents = ()
        disposers = self._disposers
        for parent, key in disposers:
            parent._listeners.pop(key, None)
        disposers.clear()
        timer = self._timer
        if timer >= 0:
            self._timer = -1
            assert self._timers is not None  # set with the timer
            self._timers.armed.pop(timer, None)  # disarm


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
        # The timeout is measured from entry, not from the call to open_signal().
        self._link = _Link(self._parents, self._timeout, self._deadline, self._code)
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
