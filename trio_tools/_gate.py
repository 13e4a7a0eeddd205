"""The gate: the pre-execute chain, the guards and the approver, under the caller's signal.

It runs only when the call has a pre-execute hook, a guard, or a tool that may require
approval; it either lets the call through to the around-execute chain or decides its
result (a denial, or an abort before dispatch), which still goes on to post-execute.
Guards alone (no hook, no approval) wait for nothing: :func:`guard` runs them without the
gate's cancel scope or a coroutine.  The gate's scope itself is entered only once a step
waits (``_lazy_scope``).
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from typing import Any

import trio

from . import _lazy_scope as lazy_scope
from ._chains import ALLOW, ApprovalEnd, Chain, allowed
from ._decisions import Allow, ApprovalRequest, Ask, Deny
from ._execution import ToolExecution, _Run
from ._failures import exception_result, stray_or_raise
from ._outcomes import FinalResult, denied
from ._results import PRE_EXECUTE_FAILED, ToolResult, aborted
from ._stages import Approver, Guard, Stages
from ._util import cancelled_here, safe_repr

_new = object.__new__


@trio.lowlevel.enable_ki_protection  # see `decide`
async def gate(run: _Run) -> ToolResult | None:
    """Pre-execute, guards and approval under the caller's signal.

    Returns ``None`` to proceed, or the denial / before-dispatch abort that goes on to
    post-execute.  A raising stage is final (``PRE_EXECUTE_FAILED``).

    The steps (:func:`decide`) run as under ``with signal.open_scope():``, with the scope
    entered only if they suspend (see ``_lazy_scope``): most gates never do (a hook that
    allows), and the scope would cost them more than the hook.  The signal's listener for
    the scope is attached for the whole gate.
    """
    signal = run.caller_signal
    before = lazy_scope.status() if lazy_scope.LAZY else None
    steps = decide(run)
    signal._listeners[run] = _unbound  # the scope's, once there is one (see finish_under)
    try:
        try:
            trap = steps.send(None) if lazy_scope.LAZY else lazy_scope.NOT_STARTED
        except StopIteration as done:  # finished without suspending: no scope needed
            outcome: Any = done.value
        except BaseException:
            if signal._reason is None:
                raise
            # A stage fired the caller's signal, then raised before any checkpoint: what
            # the scope, cancelled by then, does with the exception (it absorbs its own
            # Cancelled, also out of a group).
            outcome = lazy_scope.INTERRUPTED
            with signal.open_scope():  # entered cancelled: it only filters
                raise
        else:
            outcome = await lazy_scope.finish_under(signal, run, steps, trap, before)
        finally:
            signal._listeners.pop(run, None)  # gone already if the signal fired
    except Exception as exc:  # also a group left once the scope took its Cancelled
        raise FinalResult(exception_result(exc, PRE_EXECUTE_FAILED)) from None
    except trio.Cancelled as exc:
        stray = stray_or_raise(exc)
        raise FinalResult(exception_result(stray, PRE_EXECUTE_FAILED)) from None
    if outcome is lazy_scope.INTERRUPTED or (outcome is None and signal._reason is not None):
        # Interrupted, or allowed only after the caller had cancelled: never dispatched.
        return aborted(body_invoked=False)
    decided: ToolResult | None = outcome  # what `decide` returns: a result, or None to proceed
    return decided


def _unbound(reason: object) -> None:
    """The gate's listener while it has no scope to cancel (that is entered cancelled)."""


@trio.lowlevel.disable_ki_protection
async def decide(run: _Run) -> ToolResult | None:
    """The gate's steps: the pre-execute chain, then the guards or the approval.

    Once they suspend, the registry places the gate's scope and hands the steps back to
    Trio (``_lazy_scope``): until then the steps' own scopes are open but off the stack,
    where a ``KeyboardInterrupt`` raised by Trio's SIGINT handler would never reach them.
    So that code (here, in ``gate`` and in ``_lazy_scope``) is protected from it (Trio
    delivers it at the next checkpoint instead), and the steps themselves are not: the
    hooks, guards and approver can be interrupted as anywhere else.
    """
    stages: Stages = run.stages
    hooks = stages.pre
    # The call's view: what `run.execution()` does, without the call (the gate is the
    # first stage to need it, on every gated call).
    execution = run._execution
    if execution is None:
        execution = run._execution = _new(ToolExecution)
        execution._run = run
    definition: Any = run.definition  # resolved: the gate follows resolution
    end = allowed if definition.requires_approval is False else ApprovalEnd(run)
    if hooks:
        chain = Chain()  # no constructor of its own (see Chain)
        chain.hooks = hooks
        chain.args = (execution,)
        chain.end = end
        chain.open = True
        chain._called = False
        try:
            decision: object = await hooks[0](execution, chain)
        finally:
            chain.open = False
    elif end is allowed:
        decision = ALLOW  # what `await allowed()` gives
    else:
        decision = await end()
    if decision is ALLOW and not stages.guards:
        return None  # allowed: the usual gate, decided without a call
    if isinstance(decision, Ask):
        return await approve(run, execution, decision, stages.approver)
    return allowed_or_denied(execution, decision, stages.guards)


def guard(run: _Run) -> ToolResult | None:
    """The gate of a call with guards and nothing that can wait: no pre-execute hook, and a
    tool that never requires approval.  What :func:`gate` decides for it, without its
    cancel scope: guards are synchronous, so no checkpoint could deliver the caller's
    cancellation while they run, and the check afterwards sees it all the same.
    """
    try:
        outcome = allowed_or_denied(run.execution(), ALLOW, run.stages.guards)
    except Exception as exc:
        raise FinalResult(exception_result(exc, PRE_EXECUTE_FAILED)) from None
    except trio.Cancelled as exc:
        # One raised by hand (a synchronous guard reaches no checkpoint): the gate's scope,
        # cancelled if a guard fired the caller's signal, would have absorbed it unless an
        # enclosing scope is cancelled too.
        if run.caller_signal._reason is not None and not cancelled_here():
            return aborted(body_invoked=False)
        raise FinalResult(exception_result(stray_or_raise(exc), PRE_EXECUTE_FAILED)) from None
    if outcome is None and run.caller_signal._reason is not None:
        return aborted(body_invoked=False)  # allowed only after the caller had cancelled
    return outcome


def allowed_or_denied(
    execution: ToolExecution, decision: object, guards: tuple[Guard, ...]
) -> ToolResult | None:
    """What a pre-execute decision other than ``Ask`` leads to: ``Allow`` runs the guards
    (``None``: proceed), ``Deny`` is the denial.

    Raises:
        TypeError: not a decision, or a guard returned something other than a reason.
    """
    if isinstance(decision, Allow):
        for guard in guards:
            reason = guard(execution)
            if reason is not None:
                if not isinstance(reason, str):
                    raise TypeError(
                        f"guard {safe_repr(guard)} returned {safe_repr(reason)}, not a str or None"
                    )
                return denied(reason)
        return None
    if isinstance(decision, Deny):
        return denied(decision.reason, decision.halt)
    raise TypeError(
        f"pre-execute chain returned {safe_repr(decision)}; expected Allow(), Deny() or Ask()"
    )


async def approve(
    run: _Run, execution: ToolExecution, decision: Ask, approver: Approver | None
) -> ToolResult | None:
    """The approver's answer to an ``Ask``: ``None`` when granted, else the denial (or the
    abort, when the approval was cancelled because the caller was)."""
    name = run.name
    if approver is None:
        return denied(f'tool "{name}" requires approval, but no approver is configured')
    answer: object = await approver(ApprovalRequest(execution, decision.reason))
    if type(answer) is str:  # a str subclass or another type may compare as it likes
        if answer == "granted":
            return None
        if answer == "rejected":
            return denied(f'the user rejected tool "{name}"')
        if answer == "cancelled":
            if run.caller_signal.cancelled:
                return aborted(body_invoked=False)
            return denied(f'approval for tool "{name}" was cancelled')
    raise TypeError(
        f"approver returned {safe_repr(answer)}; expected 'granted', 'rejected' or 'cancelled'"
    )
