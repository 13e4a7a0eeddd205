"""Caller-owned cancellation signals, bound onto Trio cancel scopes.

A :class:`CancelSource` owns a lifetime; its read-only :class:`CancelSignal` is what every
tool call carries.  Firing a source is synchronous: its listeners run immediately, which is
what lets :meth:`CancelSignal.open_scope` cancel a :class:`trio.CancelScope` at the very
moment the owner decides, so cooperative Trio code stops at its next checkpoint.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from types import TracebackType
from typing import final

import attrs
import trio

from ._util import NoPublicConstructor, logger

__all__ = [
    "CancelReason",
    "CancelSignal",
    "CancelSource",
    "SignalStatistics",
    "open_signal",
]

Listener = Callable[["CancelReason"], object]

# One counter for every signal: listener keys only need to be unique per signal, and a
# shared counter keeps ``add_listener`` to a dict insert.
_keys = itertools.count()


@final
@attrs.frozen
class CancelReason:
    """Why a signal fired: a machine-readable ``code`` and a human ``message``."""

    code: str = attrs.field(validator=attrs.validators.instance_of(str))
    message: str = attrs.field(validator=attrs.validators.instance_of(str))


@final
@attrs.frozen(kw_only=True)
class SignalStatistics:
    """A snapshot of a :class:`CancelSignal`'s state, for debugging and leak checks."""

    cancelled: bool
    listeners: int


def _scope_reason(reason: CancelReason) -> str:
    return f"{reason.code}: {reason.message}"


def _call_listener(fn: Listener, reason: CancelReason) -> None:
    try:
        fn(reason)
    except Exception:
        # A listener belongs to someone else: its failure must not stop the others from
        # hearing about the cancellation, nor turn ``cancel()`` into a raising call.
        logger.exception("cancel listener %r raised", fn)


@final
class CancelSignal(metaclass=NoPublicConstructor):
    """The read-only view of a cancellation lifetime.

    Obtain one from :attr:`CancelSource.signal` or :func:`open_signal`; constructing it
    directly raises ``TypeError``.  A signal fires at most once and never un-fires.  It has no
    mutating method: only its owner (the source) can fire it.
    """

    __slots__ = ("__weakref__", "_listeners", "_reason")

    _reason: CancelReason | None
    _listeners: dict[int, Listener]

    def __init__(self) -> None:
        self._reason = None
        self._listeners = {}

    def __repr__(self) -> str:
        state = f"cancelled {self._reason!r}" if self._reason is not None else "active"
        return f"<trio_tools.CancelSignal {state}, {len(self._listeners)} listener(s)>"

    @property
    def cancelled(self) -> bool:
        """Whether the signal has fired."""
        return self._reason is not None

    @property
    def reason(self) -> CancelReason | None:
        """The first reason the signal fired with, or ``None`` while it has not fired."""
        return self._reason

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Call ``fn(reason)`` once, synchronously, when the signal fires.

        If the signal has already fired, ``fn`` runs immediately, before this returns.  An
        exception from ``fn`` is logged on the ``"trio_tools"`` logger and never stops the
        other listeners.

        Returns:
            A disposer that removes the listener; calling it again (or after the signal
            fired) does nothing.
        """
        reason = self._reason
        if reason is not None:
            _call_listener(fn, reason)
            return _noop
        key = next(_keys)
        self._listeners[key] = fn
        listeners = self._listeners

        def dispose() -> None:
            listeners.pop(key, None)

        return dispose

    async def wait_cancelled(self) -> None:
        """Block until the signal fires; always a checkpoint, even if it already has."""
        if self._reason is not None:
            await trio.lowlevel.checkpoint()
            return
        event = trio.Event()
        key = next(_keys)
        self._listeners[key] = lambda _reason: event.set()
        try:
            await event.wait()
        finally:
            self._listeners.pop(key, None)

    def open_scope(self) -> AbstractContextManager[trio.CancelScope]:
        """Bind the signal onto a fresh :class:`trio.CancelScope` for the ``with`` block.

        The scope is cancelled with ``reason=f"{code}: {message}"`` the moment the signal
        fires, and is already cancelled on entry if it has fired.  The listener is removed
        when the block exits, however it exits.  Like any cancel scope it catches only its own
        cancellation: check ``scope.cancelled_caught`` (or :attr:`cancelled`) afterwards.
        """
        return _ScopeBinding(self)

    def statistics(self) -> SignalStatistics:
        """Return a frozen snapshot: whether it fired and how many listeners are attached."""
        return SignalStatistics(cancelled=self._reason is not None, listeners=len(self._listeners))

    def _bind(self, scope: trio.CancelScope) -> int:
        """Cancel ``scope`` when the signal fires; return the key that unbinds it.

        Behind ``open_scope()``, and used by the registry to bind the body's per-call
        nursery scope directly.  The signal must not have fired.
        """
        key = next(_keys)
        self._listeners[key] = _ScopeCanceller(scope)
        return key

    def _fire(self, reason: CancelReason) -> bool:
        """Fire with ``reason`` unless already fired; return whether this call fired it.

        Every listener of this signal and of every signal derived from it hears the
        cancellation before this returns, at any depth of derivation; then the first
        ``BaseException`` a listener raised (``KeyboardInterrupt``...) is re-raised.
        """
        if self._reason is not None:
            return False
        self._reason = reason
        if self._listeners:
            fatal = _propagate(self, reason)
            if fatal is not None:
                raise fatal
        return True


def _propagate(root: CancelSignal, reason: CancelReason) -> BaseException | None:
    """Run the listeners of ``root`` (which just fired) and of the signals derived from it.

    Iterative, not recursive, so a chain of derived signals of any depth is reached; in the
    order a recursive walk would take (each derived signal's listeners run where its link
    sits among its parent's).  Each listener is popped just before it runs, so a listener
    that disposes a later one (not yet called) really removes it, and the dicts end up
    empty.  Returns the first ``BaseException`` a listener raised: ``KeyboardInterrupt`` &
    co. must not leave the other listeners (scopes, waiters) unaware of the cancellation.
    """
    fatal: BaseException | None = None
    text: str | None = None
    text_for: CancelReason | None = None
    listeners = root._listeners
    stack = [(listeners, reason, iter(list(listeners.items())))]
    while stack:
        listeners, reason, items = stack[-1]
        for key, fn in items:
            if listeners.pop(key, None) is None:
                continue
            if isinstance(fn, _ScopeCanceller):
                # The usual listener (every call's body scope): cancelled directly, with
                # the scope's reason text built once for all the scopes of this signal.
                if text is None or text_for is not reason:
                    text, text_for = _scope_reason(reason), reason
                try:
                    fn._scope.cancel(reason=text)
                except Exception:
                    logger.exception("cancel listener %r raised", fn)
                except BaseException as exc:
                    if fatal is None:
                        fatal = exc
                continue
            if isinstance(fn, _Link):
                derived = fn.signal
                derived_reason = fn._parent_fired(reason)
                if derived._reason is None:
                    derived._reason = derived_reason
                    children = derived._listeners
                    if children:
                        stack.append((children, derived_reason, iter(list(children.items()))))
                        break
                continue
            try:
                _call_listener(fn, reason)
            except BaseException as exc:
                if fatal is None:
                    fatal = exc
        else:
            stack.pop()
    return fatal


class _ScopeCanceller:
    """A listener that cancels a scope (a slotted object: smaller than a closure)."""

    __slots__ = ("_scope",)

    def __init__(self, scope: trio.CancelScope) -> None:
        self._scope = scope

    def __call__(self, reason: CancelReason) -> None:
        self._scope.cancel(reason=_scope_reason(reason))


def _noop() -> None:
    pass


@final
class _ScopeBinding(AbstractContextManager[trio.CancelScope]):
    """``CancelSignal.open_scope()``: a cancel scope cancelled by a signal."""

    __slots__ = ("_key", "_scope", "_signal")

    def __init__(self, signal: CancelSignal) -> None:
        self._signal = signal
        self._scope = trio.CancelScope()
        self._key = -1

    def __enter__(self) -> trio.CancelScope:
        scope = self._scope.__enter__()
        signal = self._signal
        reason = signal._reason
        if reason is not None:
            scope.cancel(reason=_scope_reason(reason))
        else:
            # Only once the scope is entered: a failed entry must not leave a listener.
            self._key = signal._bind(scope)
        return scope

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._signal._listeners.pop(self._key, None)
        return self._scope.__exit__(exc_type, exc, tb)


@final
class CancelSource:
    """The owner of a cancellation lifetime.

    ``source.signal`` is the read-only :class:`CancelSignal` to hand out; ``source.cancel()``
    fires it.  There is no default or never-cancelled source in the library: whoever owns the
    lifetime creates the source.
    """

    __slots__ = ("_signal",)

    def __init__(self) -> None:
        self._signal: CancelSignal = CancelSignal._create()

    def __repr__(self) -> str:
        return f"<trio_tools.CancelSource of {self._signal!r}>"

    @property
    def signal(self) -> CancelSignal:
        """The read-only signal this source fires (always the same object)."""
        return self._signal

    def cancel(self, reason: str | None = None, *, code: str = "CANCELLED") -> None:
        """Fire the signal: synchronous, idempotent, the first reason wins.

        Call it from any Trio task of the run; from another thread use
        ``trio.from_thread.run_sync(source.cancel)``.  Listeners run before this returns.

        Args:
            reason: the human-readable message; ``None`` gives ``"cancelled"``.
            code: the machine-readable code (default ``"CANCELLED"``).

        Raises:
            TypeError: ``reason`` is not a ``str`` or ``None``, or ``code`` is not a ``str``.
        """
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"reason must be a str or None, got {reason!r}")
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, got {code!r}")
        if self._signal._reason is not None:
            return
        self._signal._fire(CancelReason(code, "cancelled" if reason is None else reason))


# --------------------------------------------------------------------------------------
# Derived signals


class _Timer:
    __slots__ = ("active", "deadline", "fn")

    def __init__(self, deadline: float, fn: Callable[[], None]) -> None:
        self.deadline = deadline
        self.fn = fn
        self.active = True


class _TimerService:
    """Fires every ``open_signal`` deadline of one Trio run from a single system task.

    A per-call task would cost a spawn and a nursery per timed call; one heap and one cancel
    scope whose deadline tracks the earliest timer cost a push.  Cancelled timers are dropped
    lazily and the heap is compacted when they dominate it.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Timer]] = []
        self._scope: trio.CancelScope | None = None
        self._inactive = 0

    def schedule(self, deadline: float, fn: Callable[[], None]) -> _Timer:
        timer = _Timer(deadline, fn)
        heapq.heappush(self._heap, (deadline, next(_keys), timer))
        scope = self._scope
        if scope is not None and deadline < scope.deadline:
            scope.deadline = deadline
        return timer

    def cancel(self, timer: _Timer) -> None:
        if timer.active:
            timer.active = False
            self._inactive += 1
            if self._inactive > 64 and self._inactive * 2 > len(self._heap):
                # In place: run() may be iterating this very list.
                self._heap[:] = [entry for entry in self._heap if entry[2].active]
                heapq.heapify(self._heap)
                self._inactive = 0

    async def run(self) -> None:
        heap = self._heap
        while True:
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as scope:
                self._scope = scope
                await trio.sleep_forever()
            self._scope = None
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                timer = heapq.heappop(heap)[2]
                if not timer.active:
                    self._inactive -= 1
                    continue
                timer.active = False
                try:
                    timer.fn()
                except Exception:  # pragma: no cover - fn only fires a source, which logs
                    logger.exception("deadline callback %r raised", timer.fn)


_timer_service: trio.lowlevel.RunVar[_TimerService] = trio.lowlevel.RunVar("trio_tools_timers")


def _timers() -> _TimerService:
    try:
        return _timer_service.get()
    except LookupError:
        service = _TimerService()
        _timer_service.set(service)
        trio.lowlevel.spawn_system_task(service.run, name="trio_tools deadline timers")
        return service


class _Link:
    """A derived signal that fires on the first of its parents or a deadline.

    Shared by :func:`open_signal` and the registry's fusion of the caller's signal with a
    wrapper's replacement.  :meth:`detach` removes every listener it put on a parent and stops
    its timer; it does not fire the derived signal.
    """

    __slots__ = ("_code", "_deadline", "_disposers", "_fatal", "_timeout", "_timer", "signal")

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
        self.signal: CancelSignal = signal
        self._deadline = deadline
        self._code = code
        self._timeout = timeout
        self._disposers: list[tuple[CancelSignal, int]] = []
        self._timer: _Timer | None = None
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
                self._timer = _timers().schedule(deadline, self._on_deadline)
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

    def __call__(self, reason: CancelReason) -> None:
        # Only _propagate calls links, and it does not call them: this keeps a link a
        # valid listener for anything else that might.
        self.signal._fire(self._parent_fired(reason))

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
            _timers().cancel(timer)


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
