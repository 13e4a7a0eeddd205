"""The gate: the pre-execute chain, the guards and the approver, under the caller's signal.

It runs only when the call has a pre-execute hook, a guard, or a tool that may require
approval; it either lets the call through to the around-execute chain or decides its
result (a denial, or an abort before dispatch), which still goes on to post-execute.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import trio

from ._chains import ApprovalEnd, Chain, allowed
from ._decisions import Allow, ApprovalRequest, Ask, Deny
from ._execution import ToolExecution, _Run
from ._failures import exception_result, stray_or_raise
from ._outcomes import FinalResult, denied
from ._results import PRE_EXECUTE_FAILED, ToolResult, aborted
from ._signal import _scope_reason
from ._stages import Approver, Guard, PreExecuteHook, Stages
from ._util import safe_repr


async def gate(run: _Run) -> ToolResult | None:
    """Pre-execute, guards and approval under the caller's signal.

    Returns ``None`` to proceed, or the denial / before-dispatch abort that goes on to
    post-execute.  A raising stage is final (``PRE_EXECUTE_FAILED``).
    """
    stages: Stages = run.stages
    hooks, guards, approver = stages.pre, stages.guards, stages.approver
    decided = False
    outcome: ToolResult | None = None
    signal = run.caller_signal
    key: object = None
    try:
        # What `with signal.open_scope():` does, without its context-manager object: the
        # scope is cancelled when the signal fires (already on entry if it has fired), and
        # the listener goes before the scope exits.
        with trio.CancelScope() as scope:
            reason = signal._reason
            if reason is not None:
                scope.cancel(reason=_scope_reason(reason))
            else:
                key = signal._bind(scope)
            try:
                outcome = await decide(run, run.execution(), hooks, guards, approver)
                decided = True
            finally:
                signal._listeners.pop(key, None)
    except Exception as exc:  # also a group left once the scope took its Cancelled
        raise FinalResult(exception_result(exc, PRE_EXECUTE_FAILED)) from None
    except trio.Cancelled as exc:
        stray = stray_or_raise(exc)
        raise FinalResult(exception_result(stray, PRE_EXECUTE_FAILED)) from None
    if not decided or (outcome is None and run.caller_signal.cancelled):
        # Interrupted, or allowed only after the caller had cancelled: never dispatched.
        return aborted(body_invoked=False)
    return outcome


async def decide(
    run: _Run,
    execution: ToolExecution,
    hooks: tuple[PreExecuteHook, ...],
    guards: tuple[Guard, ...],
    approver: Approver | None,
) -> ToolResult | None:
    definition = run.definition
    assert definition is not None
    end = allowed if definition.requires_approval is False else ApprovalEnd(run)
    if hooks:
        chain = Chain()
        try:
            decision: object = await chain.first(hooks, (execution,), end)
        finally:
            chain.open = False
    else:
        decision = await end()
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
    if not isinstance(decision, Ask):
        raise TypeError(
            f"pre-execute chain returned {safe_repr(decision)}; expected Allow(), Deny() or Ask()"
        )
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
