"""Caller-owned cancellation signals, bound onto Trio cancel scopes.

A :class:`CancelSource` owns a lifetime; its read-only :class:`CancelSignal` is what every
tool call carries.  Firing a source is synchronous: its listeners run immediately, which is
what lets :meth:`CancelSignal.open_scope` cancel a :class:`trio.CancelScope` at the very
moment the owner decides, so cooperative Trio code stops at its next checkpoint.

Derived signals (``open_signal``, the registry's fusion, the timeout policy) live in
``_derived``; what this module knows of them is :class:`_Follower`, the listener a derived
signal puts on each parent, which :func:`_propagate` walks into.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import cast, final

import attrs
import trio

from ._util import NoPublicConstructor, logger

__all__ = [
    "CancelReason",
    "CancelSignal",
    "CancelSource",
    "SignalStatistics",
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

    __slots__ = ("__weakref__", "_listeners", "_parents", "_reason")

    _reason: CancelReason | None
    # Listeners under ``next(_keys)`` keys, scopes bound by ``_bind`` under themselves, and
    # the gate's scope (a no-op until it is entered) under its call's state (``_gate``).
    _listeners: dict[object, Listener | trio.CancelScope]
    # A derived signal's parents while it listens to them (``_derived``); else empty.
    _parents: tuple[CancelSignal, ...]

    def __init__(self) -> None:
        self._reason = None
        self._listeners = {}
        self._parents = ()

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

    def _bind(self, scope: trio.CancelScope) -> trio.CancelScope:
        """Cancel ``scope`` when the signal fires; return the key that unbinds it.

        Behind ``open_scope()``, and used by the registry to bind the body's per-call
        nursery scope directly.  The signal must not have fired.  The scope is its own key
        and its own listener (one scope is bound at most once per signal): binding, on
        every tool call, creates no object.
        """
        self._listeners[scope] = scope
        return scope

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
            if isinstance(fn, trio.CancelScope) and type(key) is not int:
                # A scope bound by `_bind` (every call's body scope), the usual listener,
                # or the gate's (under its call): cancelled directly, with the reason text
                # built once for all the scopes of this signal.  (`add_listener`'s keys are
                # ints: what it got is called, whatever it is.)
                if text is None or text_for is not reason:
                    text, text_for = _scope_reason(reason), reason
                try:
                    fn.cancel(reason=text)
                except Exception:
                    logger.exception("cancel listener %r raised", fn)
                except BaseException as exc:
                    if fatal is None:
                        fatal = exc
                continue
            if isinstance(fn, _Follower):
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
                # Only `_bind` stores a scope (under itself): `fn` is what add_listener got.
                _call_listener(cast(Listener, fn), reason)
            except BaseException as exc:
                if fatal is None:
                    fatal = exc
        else:
            stack.pop()
    return fatal


class _Follower:
    """A derived signal's listener on one of its parents (see ``_derived._Link``).

    :func:`_propagate` recognises it and walks into :attr:`signal` instead of calling it,
    so a chain of derivations of any depth is reached without recursion.
    """

    __slots__ = ("signal",)

    signal: CancelSignal

    def _parent_fired(self, reason: CancelReason) -> CancelReason:
        """Detach on a parent's firing; return the reason the derived signal fires with."""
        raise NotImplementedError

    def __call__(self, reason: CancelReason) -> None:
        # Only _propagate calls followers, and it does not call them: this keeps a follower
        # a valid listener for anything else that might.
        self.signal._fire(self._parent_fired(reason))


def _noop() -> None:
    pass


@final
class _ScopeBinding(AbstractContextManager[trio.CancelScope]):
    """``CancelSignal.open_scope()``: a cancel scope cancelled by a signal."""

    __slots__ = ("_key", "_scope", "_signal")

    def __init__(self, signal: CancelSignal) -> None:
        self._signal = signal
        self._scope = trio.CancelScope()
        self._key: object = None

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
