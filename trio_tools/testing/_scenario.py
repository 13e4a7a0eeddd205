"""Scripted call scenarios: where cancellation arrives, how, and what every stage does.

A :class:`Scenario` is one draw; the values its scripted stages use (names, texts, contexts,
timeouts) are the constants below, shared by the harness that runs a scenario against the
registry and by the pure model of what the registry must return for it (``_model.py``).
"""

from __future__ import annotations

from typing import Final, Literal, final

import attrs

from .._results import (
    AdditionalContext,
    ToolResult,
)

__all__ = [
    "ApproverKind",
    "BodyKind",
    "CancelHow",
    "CancelWhere",
    "Expectation",
    "GuardKind",
    "PostKind",
    "PreKind",
    "Scenario",
    "TimeoutPolicyPlacement",
    "WrapperKind",
]

CancelWhere = Literal[
    "never",
    "before_entry",
    "pre_execute",
    "approval",
    "wrapper_before",
    "replacement",
    "body",
    "wrapper_after",
    "post_execute",
]
"""Where cancellation arrives (see :class:`Scenario`)."""
CancelHow = Literal["signal", "ambient", "timeout", "wrapper_signal"]
"""How cancellation arrives (see :class:`Scenario`)."""
PreKind = Literal["none", "allow", "deny", "ask", "raise", "cancel_then_deny"]
"""What the scripted pre-execute hook does (``"none"``: no hook is registered)."""
GuardKind = Literal["none", "pass", "deny", "raise"]
"""What the scripted guard does (``"none"``: no guard is registered)."""
ApproverKind = Literal["none", "granted", "rejected", "cancelled", "raise"]
"""What the scripted approver answers (``"none"``: no approver is set)."""
WrapperKind = Literal[
    "none",
    "pass",
    "short_circuit",
    "replace_signal",
    "replace_result",
    "raise_before",
    "raise_after",
]
"""What the scripted around-execute wrapper does (``"none"``: no wrapper is registered).

Every wrapper that returns adds ``WRAPPER_CONTEXT``; ``"replace_result"`` returns a fresh
success (dropping the body's contexts, which the registry must restore)."""
BodyKind = Literal["success", "raise", "raise_on_cancel", "shielded", "child"]
"""What the scripted tool body does."""
PostKind = Literal["none", "accept", "block", "raise"]
"""What the scripted post-execute hook does (``"none"``: no hook is registered)."""
TimeoutPolicyPlacement = Literal["none", "outer", "inner"]
"""Where :func:`trio_tools.timeout_policy` sits relative to the scripted wrapper."""

TOOL_NAME: Final = "probe"
"""The scripted tool's name; an ``"unknown"`` scenario calls ``"missing"`` instead."""
UNKNOWN_NAME: Final = "missing"
TIMEOUT: Final = 10.0
"""The scripted tool's timeout (virtual seconds), when it has one."""
WAIT: Final = 100.0
"""How long a stage waits at the cancellation point (virtual seconds); longer than TIMEOUT."""
CODED: Final = "SCRIPTED_CODE"
"""The ``code`` attribute of scripted exceptions in ``coded_errors`` scenarios."""

BODY_CONTEXT: Final = AdditionalContext("deferred by the body", source="body")
WRAPPER_CONTEXT: Final = AdditionalContext("added by the wrapper", source="wrapper")
POST_CONTEXT: Final = AdditionalContext("added by post-execute accept", source="post")
BLOCK_CONTEXT: Final = AdditionalContext("added by post-execute block", source="post")
DENY_REASON: Final = "denied by the pre-execute hook"
CANCEL_DENY_REASON: Final = "denied after cancelling the caller"
GUARD_REASON: Final = "denied by the guard"
BLOCK_FEEDBACK: Final = "blocked by the post-execute hook"
SUCCESS_TEXT: Final = "ok"
SHORT_CIRCUIT_TEXT: Final = "short-circuited by the wrapper"
REPLACED_TEXT: Final = "replaced by the wrapper"

#: The message of the exception each scripted stage raises.
FAILURE_MESSAGES: Final = {
    "pre": "pre-execute hook failed",
    "guard": "guard failed",
    "approver": "approver failed",
    "wrapper": "wrapper failed",
    "body": "tool body failed",
    "body_on_cancel": "tool body failed on cancellation",
    "post": "post-execute hook failed",
    "finalize": "finalize_content failed",
}


@final
@attrs.frozen(kw_only=True)
class Scenario:
    """One scripted tool call: where and how cancellation arrives, and what each stage does.

    Cancellation (``where`` and ``how``):

    * ``where`` is the moment the cancellation is *triggered*: ``"never"``;
      ``"before_entry"`` (before ``execute`` is called); inside the pre-execute hook
      (``"pre_execute"``), the approver (``"approval"``), the around-execute wrapper before
      it calls ``call_next`` (``"wrapper_before"``), right after the wrapper installed a
      replacement signal (``"replacement"``), inside the body (``"body"``; a ``"child"``
      body triggers from the task it started), in the wrapper after ``call_next`` returned
      (``"wrapper_after"``), or in the post-execute hook (``"post_execute"``).  A point the
      call never reaches (say ``"approval"`` when nothing asks) triggers nothing.
    * ``how``: ``"signal"`` fires the caller's source; ``"ambient"`` cancels a
      ``trio.CancelScope`` around ``execute``; ``"wrapper_signal"`` fires the source behind
      the wrapper's replacement signal (fired before the replacement is installed, that
      replacement is *already cancelled*); ``"timeout"`` triggers nothing by itself: the
      stage simply waits, and only the timeout policy's deadline can end that wait.
    * At the point, the stage triggers, then (``wait``) waits ``WAIT`` virtual seconds —
      gate and body waits under the registry's scopes, wrapper and post-execute waits inside
      ``exec.signal.open_scope()`` — or (not ``wait``) carries on without a checkpoint.
      ``external`` moves the trigger into a separate canceller task, which fires while the
      stage is blocked (in a shielded handshake, so the moment is exact even when the wait
      would not block); the outcome is the same, from a different task.

    Stages (each awaits one checkpoint on entry): ``pre``, ``guard``, ``approver``,
    ``wrapper``, ``body``, ``post`` (see the ``*Kind`` literals); ``tool_timeout`` gives the
    tool ``timeout=TIMEOUT``; ``timeout_policy`` installs :func:`trio_tools.timeout_policy`
    outside or inside the scripted wrapper; with ``"none"``, ``enforce_timeouts`` says
    whether the registry applies its own policy innermost (``ToolRegistry(
    enforce_timeouts=...)``); ``finalize_raises`` makes the tool's
    ``finalize_content`` raise; ``coded_errors`` gives every scripted exception
    ``code = CODED``.  ``arguments`` and ``tool`` select non-JSON arguments and an unknown
    tool name.  ``pre_cancelled`` means the caller's signal fired before this call (a
    long-lived signal an earlier call cancelled).
    """

    where: CancelWhere = "never"
    how: CancelHow = "signal"
    wait: bool = True
    external: bool = False
    arguments: Literal["json", "not_json"] = "json"
    tool: Literal["known", "unknown"] = "known"
    pre: PreKind = "none"
    guard: GuardKind = "none"
    approver: ApproverKind = "none"
    wrapper: WrapperKind = "none"
    body: BodyKind = "success"
    post: PostKind = "none"
    tool_timeout: bool = False
    timeout_policy: TimeoutPolicyPlacement = "none"
    enforce_timeouts: bool = True
    finalize_raises: bool = False
    coded_errors: bool = False
    pre_cancelled: bool = False

    def __attrs_post_init__(self) -> None:
        if self.external and not self.wait:
            raise ValueError(
                "external=True needs wait=True: the canceller fires while the stage waits"
            )
        if self.external and self.where in ("never", "before_entry", "replacement"):
            raise ValueError(
                f"external=True needs a waiting cancellation point, not {self.where!r}"
            )


@final
@attrs.frozen(kw_only=True)
class Expectation:
    """What :func:`expected_outcome` predicts for a :class:`Scenario`.

    ``result`` is the one published (and, unless ``raises_cancelled``, returned) result;
    ``body_invoked`` whether the tool body was entered; ``stages`` the scripted stages
    entered, in order (``"pre"``, ``"guard"``, ``"approver"``, ``"wrapper"``, ``"body"``,
    ``"child"``, ``"post"``); ``finalize_calls`` how often ``finalize_content`` ran;
    ``raises_cancelled`` whether ``execute`` re-raises ``trio.Cancelled``; ``triggered``
    whether the cancellation point was reached.
    """

    result: ToolResult
    body_invoked: bool
    stages: tuple[str, ...]
    finalize_calls: int
    raises_cancelled: bool
    triggered: bool

    @property
    def code(self) -> str | None:
        """The expected ``error.code``, ``None`` for a successful result."""
        return self.result.code
