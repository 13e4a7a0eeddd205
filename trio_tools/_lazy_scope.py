"""A signal-bound cancel scope entered only once the code under it first suspends.

A cancellation is delivered only at a checkpoint, so a cancel scope around code that
finishes without suspending changes nothing but the time it takes: entering and leaving a
``trio.CancelScope`` costs more than a pre-execute hook that allows.  The gate therefore
runs its steps (a coroutine) up to their first suspension bare, and enters the scope
there, placed where it would have been had it been entered before the steps began:

- :func:`status` is read before the steps start;
- the steps are started with ``coro.send(None)``; if they finish, no scope was needed;
- otherwise :func:`finish_under` enters the scope, moves it (:func:`_splice`) outside any
  scopes the steps entered before suspending (a hook's ``with trio.fail_after(...)``, a
  nursery), and awaits the rest of the steps from where they suspended (:func:`_resume`).

Between the suspension and Trio parking the task, the steps' own scopes are open but their
frames are off the stack: that code (``finish_under``, ``_resume``, ``_splice``, and the
gate itself) is protected from Trio's ``KeyboardInterrupt``, which Trio then delivers at
the steps' wait; the steps themselves (``_gate.decide``) are not.

From then on the steps run exactly as under ``with signal.open_scope():`` entered first:
the same scope tree, so shields, nurseries and their children, and the scopes' own
cancellations behave as they would have.

The splice rearranges Trio's cancel-status tree through three of its internals (stable
since Trio 0.12).  Should a Trio lack them, :data:`LAZY` is false and the caller enters
the scope before starting the steps (``finish_under(..., NOT_STARTED, None)``), as the gate
always did.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

import types
from collections.abc import Coroutine, Generator
from typing import Any

import trio

from ._signal import CancelSignal, _scope_reason

INTERRUPTED: Any = object()  # what finish_under returns when its scope took the cancellation
NOT_STARTED: Any = object()  # a trap for finish_under: the coroutine has not been started


def status() -> Any:
    """The current task's cancel status: Trio's state of its innermost cancel scope."""
    return trio.lowlevel.current_task()._cancel_status


@trio.lowlevel.enable_ki_protection  # see _gate.decide
async def finish_under(
    signal: CancelSignal, key: object, coro: Coroutine[Any, Any, Any], trap: object, before: Any
) -> Any:
    """Await the rest of ``coro``, suspended at ``trap``, under a scope bound to ``signal``:
    its value, or :data:`INTERRUPTED` when the scope took the signal's cancellation.

    ``before``: :func:`status` from before ``coro`` started (``None`` with ``NOT_STARTED``).
    ``key``: under which ``signal`` has a listener for the scope, attached (to a no-op) before
    ``coro`` started, so that the listener keeps its place among the signal's; it is made to
    cancel the scope here, unless the signal has fired.  The caller removes it afterwards.
    """
    # Scopes the coroutine entered before suspending are open now: ours goes outside them.
    inside = before is not None and status() is not before
    with trio.CancelScope() as scope:
        if inside:
            _splice(scope, before)
        reason = signal._reason
        if reason is not None:
            scope.cancel(reason=_scope_reason(reason))
        else:
            signal._listeners[key] = scope
        return await _resume(coro, trap)
    return INTERRUPTED


@trio.lowlevel.enable_ki_protection  # (outermost: the code types.coroutine made)
@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], trap: object) -> Generator[object, object, Any]:
    """``await coro`` for a coroutine already suspended at ``trap`` (or ``NOT_STARTED``):
    what Trio answers at each suspension, a value or an exception to throw, goes to
    ``coro``, until it returns or raises."""
    try:
        if trap is NOT_STARTED:
            trap = coro.send(None)
        while True:
            try:
                answer = yield trap
            except BaseException as exc:
                trap = coro.throw(exc)
                continue
            # Trio answers with an outcome, which ``coro`` unwraps: the answer must not stay
            # in this frame, which the traceback of the exception it may hold would keep
            # (a reference cycle).  Sent from a temporary pair while the local is cleared.
            trap = coro.send((answer, answer := None)[0])
    except StopIteration as done:
        return done.value


@trio.lowlevel.enable_ki_protection
def _splice(scope: trio.CancelScope, before: Any) -> None:
    """Move ``scope``, just entered inside the scopes entered since ``before`` was the task's
    cancel status, to where it would be had it been entered then: between ``before`` and
    those scopes, which stay the task's innermost and now hear ``scope``'s cancellation."""
    ours: Any = scope._cancel_status
    innermost: Any = ours.parent
    outermost: Any = innermost
    while outermost.parent is not before:
        outermost = outermost.parent
    trio.lowlevel.current_task()._activate_cancel_status(innermost)
    ours.parent = before
    outermost.parent = ours


def _fields(cls: type) -> set[str]:
    """The names of an attrs class's fields."""
    return {field.name for field in getattr(cls, "__attrs_attrs__", ())}


def _can_splice() -> bool:
    """Whether this Trio has the internals :func:`_splice` and :func:`status` use."""
    try:
        from trio._core._run import CancelStatus

        parent = CancelStatus.__dict__["parent"]
        return (
            isinstance(parent, property)
            and parent.fset is not None
            and "_cancel_status" in _fields(trio.lowlevel.Task)
            and "_cancel_status" in _fields(trio.CancelScope)
            and callable(getattr(trio.lowlevel.Task, "_activate_cancel_status", None))
        )
    except Exception:
        return False


LAZY = _can_splice()
