"""Dispatch: the end of the around-execute chain, where the body runs to quiescence.

The body runs under a cancel scope bound to the fused signal (the caller's and any
wrapper's), in the call's own nursery (opened on its first ``ctx.start_soon``: see
``_late_nursery``); the timeout policy alone is applied here rather than as a chain.  The
outcome is the body's result, ``ABORTED`` once the signal fired, or the failure of the body
or of the work it started.

As in ``_pipeline``, no exception caught here stays in a frame that its traceback holds.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

from typing import Any

import trio
from trio.lowlevel import current_task

from ._body import in_worker_thread
from ._derived import _Link
from ._execution import ToolRunContext, _Run
from ._failures import exception_result, stray_or_raise
from ._late_nursery import LATE, close_late, open_now, raise_through
from ._outcomes import body_result, failure_outcome
from ._results import TOOL_FAILED, ToolResult, aborted, replace_result, text_result
from ._timeout import _Narrowing, narrow, policy_failure, timed_failure, timeout_outcome
from ._util import cancel_called, cancelled_here, has_children

_new = object.__new__


async def dispatch(run: _Run, args: Any, timed: bool = False) -> ToolResult:
    """The end of the around-execute chain: run the body to quiescence.

    Fuses the caller's signal (captured at entry) with the wrapper's current
    ``exec.signal`` (no fusion when that is the caller's signal or a signal derived from
    it, such as the timeout policy's: it already fires whenever the caller's does), runs
    the body inside the fused signal's scope, in the call's nursery (opened on the body's
    first ``ctx.start_soon``), removes the fusion's listeners and restores ``exec.signal``
    to the wrapper's value.

    ``timed``: the timeout policy is the only wrapper (``run_call`` runs no chain for it),
    applied here as its ``__call__`` would around ``call_next()``: the body runs under the
    narrowed signal, detached once the nursery is done, and the result is the policy's
    (``TOOL_TIMEOUT`` if its own deadline fired first).  What the policy would raise stays
    final: ``WRAPPER_FAILED`` (a callable timeout that fails, a stray ``Cancelled``), and
    what a listener raised when the deadline fired the signal, re-raised here.
    """
    wrapper_signal = run.dispatch_signal
    # The timeout policy's narrowing, or a fusion: detached below.  (One local for both:
    # every local is a slot in each parked call's frame.)
    link: _Link | None = None
    if timed:
        try:
            link = narrow(run)  # `exec.signal` until the `finally` below restores it
        except (Exception, trio.Cancelled) as exc:
            raise policy_failure(exc) from None
    # No fusion for a derived signal attached to the caller's (the caller's in its
    # `_parents`, like the timeout policy's): it already fires whenever the caller's does,
    # with the same reason (or, on a tie with its own deadline, the deadline's, which a
    # fusion would hand on too).
    if (
        link is None
        and wrapper_signal is not run.caller_signal
        and run.caller_signal not in wrapper_signal._parents
    ):
        link = _Link((run.caller_signal, wrapper_signal))
    fused = wrapper_signal if link is None else link.signal
    failure: BaseException | None = None
    ambient: trio.Cancelled | None = None
    value: Any = None  # the definition, then the body's value
    scope: trio.CancelScope | None = None
    try:
        if fused._reason is not None:  # `.cancelled`, without the property call
            return timeout_outcome(link, aborted(body_invoked=False))
        # Write-ahead: the scheduler's dispatch marker is durable before the body runs.
        if (
            run.hooks is not None
            and run.hooks.marks_dispatch
            and (not await run.hooks.dispatching() or fused._reason is not None)
        ):
            return timeout_outcome(link, aborted(body_invoked=False))
        run.body_invoked = True
        # The body's scope, bound to the fused signal: the body and everything it started
        # stop at their next checkpoint.  Its nursery is opened on the first
        # `ctx.start_soon` (see _late_nursery), right inside this scope.
        with trio.CancelScope() as scope:
            # `fused._bind(scope)` and the context (`ToolRunContext._create`), inline:
            # every call pays for each function call on this path.
            fused._listeners[scope] = scope
            ctx = _new(ToolRunContext)
            ctx._run = run
            ctx._signal = fused
            ctx._scope = scope
            ctx._task = current_task()
            ctx._nursery = None if LATE else open_now()
            try:
                try:
                    # The definition (resolved: dispatch runs no other call), in `value`
                    # until the body's value replaces it: no local of its own, a slot
                    # fewer in each parked call's frame.
                    value = run.definition
                    if value._sync:
                        value = await in_worker_thread(run, args, ctx)
                    else:
                        value = await value._call(args, ctx)
                except trio.Cancelled as exc:
                    # Ours when the scope (the signal) or the nursery's own (a failing
                    # child) was cancelled: the nursery's exit below is the rest.  An
                    # enclosing scope's cancellation is level-triggered: it comes back at
                    # the checkpoint on the aborted path below.  A Cancelled nobody's
                    # scope owns is the body's failure.
                    # (Neither scope has a deadline.)
                    if not cancel_called(scope) and (
                        ctx._nursery is None or not cancel_called(ctx._nursery._scope)
                    ):
                        if (
                            ctx._nursery is not None and has_children(ctx._nursery._nursery)
                        ) or not cancelled_here():
                            raise stray_or_raise(exc) from exc
                        # Ambient cancellation, nothing left in the nursery: the same
                        # object is re-raised once the nursery has exited (its exit is a
                        # shielded schedule point), which spares the nursery cancelling
                        # itself and wrapping it in a group that the failure path would
                        # unwrap.
                        ambient = exc
            except BaseException as exc:
                # Out of the nursery's `async with`: through its exit, one opened now if
                # the body never started any work (the exit makes the same group of it).
                ctx._scope = ctx._task = None  # closed to new arrivals
                await raise_through(open_now() if ctx._nursery is None else ctx._nursery, exc)
            else:
                ctx._scope = ctx._task = None  # closed to new arrivals
                if ctx._nursery is None:
                    # The exit of a nursery that never had work: a shielded schedule point.
                    await trio.lowlevel.cancel_shielded_checkpoint()
                else:
                    await close_late(ctx._nursery)
    except BaseException as exc:
        failure = exc
    finally:
        # Only now: work the body started may outlive it inside the nursery, and must
        # still hear the signal until the nursery is done.
        if scope is not None:  # the scope is its own key (see `_bind`)
            fused._listeners.pop(scope, None)
        run.settled = True
        if link is not None:
            link.detach()
        run.dispatch_signal = wrapper_signal
    if timed and link is not None and link._fatal is not None:
        # Its deadline fired the signal from the timer task and a listener raised: that
        # wins over any outcome (the policy's `close()`), raised in the task that owns it.
        ambient = failure = None  # not kept by this frame, which the traceback holds
        try:
            link.close()
        except trio.Cancelled as exc:  # one nobody owns is the policy's failure
            raise policy_failure(exc) from None
    if ambient is not None:
        if failure is None:  # else the nursery's exit failed: that failure wins
            if timed and not cancelled_here():  # no longer ambient: the policy's failure
                raise policy_failure((ambient, ambient := None)[0]) from None
            # Raised from a temporary pair while the local is cleared: the traceback holds
            # this frame, which must not keep the exception (a reference cycle), and a try
            # block to drop it would cost a handler entry on the way out.
            raise (ambient, ambient := None)[0] from None
        ambient = None  # no reference cycle through the failure's traceback either
    if failure is not None:
        if timed:
            return timed_failure((failure, failure := None)[0], link, run.body_contexts)
        try:
            return failure_outcome(failure, run.body_contexts)
        finally:
            # The failure's traceback holds this frame: keeping the failure in it would be
            # a reference cycle that only the cyclic garbage collector frees.
            del failure
    # The scope is cancelled only by the fused signal, so this also covers a body that
    # was interrupted by it (and one that returned after it fired).
    if fused._reason is not None:
        await trio.lowlevel.checkpoint_if_cancelled()
        # `timeout_outcome()`, inline: every call the signal interrupts comes this way.
        # (Not invoked after all: a sync body cancelled while waiting for its thread.)
        result = aborted(body_invoked=run.body_invoked, additional_contexts=run.body_contexts)
        return result if type(link) is not _Narrowing else link.result(result)
    try:
        result = text_result(value) if type(value) is str else body_result(value)
    except Exception as exc:
        result = exception_result(exc, TOOL_FAILED)
    if run.body_contexts:
        result = replace_result(result, additional_contexts=run.body_contexts)
    return result
