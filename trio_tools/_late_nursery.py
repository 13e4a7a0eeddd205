"""The call's own nursery, opened only when the body first starts work in it.

A body runs inside a cancel scope bound to the call's signal and, conceptually, in a
nursery of its own, which ``ctx.start_soon`` starts work in and which the call awaits to
quiescence.  Most bodies never start anything, and a Trio nursery costs more than the
rest of a call (a scope of its own, its bookkeeping, and an exception group around
whatever the body raises).  So the nursery is opened on the first ``ctx.start_soon``
(:func:`open_late`), placed where it would have been had it been opened first:

- its cancel scope goes right inside the call's scope, outside any scope or nursery the
  body has opened since (which now hear its cancellation: a failing child cancels the
  body, as always);
- it takes its place among the body task's nurseries in the order they were opened;
- it belongs to the body's task, whichever task or thread asks for it.

At the end of the body, the nursery is closed as its ``async with`` would have closed it:
:func:`close_late` when the body returned, :func:`raise_through` with what it raised.  A
call that never opened one still gets the nursery's exit behaviour: a shielded schedule
point when the body returned, and what it raised passed through a nursery opened there and
then (:func:`open_now`), so that it comes out exactly as from the nursery.

Opening late rearranges Trio's cancel-status tree through internals (stable since Trio
0.12: see :func:`_can_open_late`).  Should a Trio lack them, :data:`LATE` is false and the
call opens its nursery with ``trio.open_nursery()`` as soon as the body's scope is entered
(:func:`open_now`): the same tree, by the public route.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

from typing import Any

import trio

CLOSED = "Nursery is closed to new arrivals"  # Trio's own message, for a late nursery too


@trio.lowlevel.enable_ki_protection
def open_late(ctx: Any) -> Any:
    """Open the nursery of the body of ``ctx`` (a ``ToolRunContext``) inside the body's
    scope, as if it had been opened right after the scope was entered; store its manager
    (a ``trio.open_nursery()``, entered) as ``ctx._nursery`` and return it.

    The body's task (``ctx._task``) need not be the current task (a task the body started
    may be the first to call ``ctx.start_soon``), but it must be inside the body's scope
    (``ctx._scope``), which it is until the body settles.
    """
    from trio._core._run import CancelStatus, Nursery

    task: Any = ctx._task
    before: Any = ctx._scope._cancel_status
    current: Any = task._cancel_status
    # The outermost of the scopes the body has open (None: none), which goes inside.
    outermost = None
    if current is not before:
        outermost = current
        while outermost.parent is not before:
            outermost = outermost.parent
            if outermost is None:
                raise RuntimeError(f"{task!r} is not inside the call's cancel scope")
    manager: Any = trio.open_nursery()  # carries the run's strict_exception_groups
    inner = trio.CancelScope()
    inner._has_been_entered = True  # entered here, by hand: never by a `with`
    status: Any = CancelStatus(scope=inner, parent=before)
    inner._cancel_status = status
    if outermost is None:  # the task moves in
        task._activate_cancel_status(status)
    else:  # the body's scopes, and everything inside them, move under the nursery's
        outermost.parent = status  # recalculated: the same cancellation as before
    # Trio builds a nursery for the task's current status, which must be its scope's: the
    # task's innermost status stands aside while it is built.
    innermost = task._cancel_status
    task._cancel_status = status
    try:
        nursery = Nursery._create(task, inner, manager.strict_exception_groups)
    finally:
        task._cancel_status = innermost
    # Among the task's nurseries, before those the body opened (which close first).
    nurseries: list[Any] = task._child_nurseries
    nurseries.pop()
    index = len(nurseries)
    while index and _encloses(status, nurseries[index - 1].cancel_scope._cancel_status):
        index -= 1
    nurseries.insert(index, nursery)
    manager._scope = inner
    manager._nursery = nursery
    ctx._nursery = manager  # here, where Trio's KeyboardInterrupt cannot come in between
    return manager


def _encloses(outer: Any, status: Any) -> bool:
    while status is not None:
        if status is outer:
            return True
        status = status.parent
    return False


@trio.lowlevel.enable_ki_protection
def open_now() -> Any:
    """Open a nursery in the current task, right here (``async with``'s entry, which
    never suspends); return its manager."""
    manager: Any = trio.open_nursery()
    entry = manager.__aenter__()
    try:
        entry.send(None)
    except StopIteration:
        return manager
    entry.close()  # pragma: no cover  (Trio's entry never suspends)
    raise RuntimeError("trio.open_nursery() suspended on entry")  # pragma: no cover


async def close_late(manager: Any) -> None:
    """Close a nursery from :func:`open_late` or :func:`open_now` as its ``async with``
    does when the body returned: wait for its work, and raise what the nursery raises."""
    await manager.__aexit__(None, None, None)


async def raise_through(manager: Any, failure: BaseException) -> None:
    """Close a nursery from :func:`open_late` or :func:`open_now` as its ``async with``
    does when the body raised ``failure``: cancel and wait for its work, and raise what the
    nursery raises (``failure`` itself when it has nothing to add).  Returns when the
    nursery swallows ``failure``, as ``async with`` would go on."""
    try:
        if not await manager.__aexit__(type(failure), failure, failure.__traceback__):
            raise failure
    finally:
        del failure  # this frame is in the traceback: no reference cycle through it


def _can_open_late() -> bool:
    """Whether this Trio has the internals :func:`open_late` uses."""
    try:
        from trio._core._run import CancelStatus, Nursery, NurseryManager

        fields = {field.name for field in getattr(trio.CancelScope, "__attrs_attrs__", ())}
        task_fields = {field.name for field in getattr(trio.lowlevel.Task, "__attrs_attrs__", ())}
        status_fields = {field.name for field in getattr(CancelStatus, "__attrs_attrs__", ())}
        parent = CancelStatus.__dict__["parent"]
        return (
            {"_cancel_status", "_has_been_entered"} <= fields
            and {"_cancel_status", "_child_nurseries"} <= task_fields
            and {"_scope", "_parent"} <= status_fields
            and isinstance(parent, property)
            and parent.fset is not None
            and callable(getattr(trio.lowlevel.Task, "_activate_cancel_status", None))
            and callable(getattr(Nursery, "_create", None))
            and callable(getattr(Nursery, "_nested_child_finished", None))
            and "strict_exception_groups"
            in {field.name for field in getattr(NurseryManager, "__attrs_attrs__", ())}
        )
    except Exception:
        return False


LATE = _can_open_late()
