"""Scripted call scenarios and the pure model of what the registry must return for each.

A :class:`Scenario` says where cancellation arrives, how, and what every pipeline stage does.
:func:`expected_outcome` is the registry's contract (the pipeline, its result codes, the
precedence rules and the timeout policy) written as a small
interpreter over those draws: it walks the stages in pipeline order keeping only what the
contract talks about (which signals fired, in what order; whether an enclosing scope is
cancelled; whether the body was invoked), and returns the one result the registry must
publish.  It imports nothing from the registry's implementation, only the public result
types, so it can disagree with it.
"""

from __future__ import annotations

from typing import Final, Literal, final

import attrs

from .._results import (
    AdditionalContext,
    ErrorInfo,
    TextBlock,
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
    "expected_outcome",
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


# ---------------------------------------------------------------------------------------
# Expected results, built from the documented table of codes (not from the registry's
# helpers).


def _error(
    name: str, code: str, message: str, contexts: tuple[AdditionalContext, ...] = ()
) -> ToolResult:
    return ToolResult(
        content=(TextBlock(f"Error: {message}"),),
        is_error=True,
        error=ErrorInfo(name, code, message),
        additional_contexts=contexts,
    )


def _aborted(body_invoked: bool, contexts: tuple[AdditionalContext, ...] = ()) -> ToolResult:
    if body_invoked:
        return _error("AbortError", "ABORTED", "tool call aborted", contexts)
    return _error(
        "AbortError", "ABORTED_BEFORE_DISPATCH", "tool call aborted before dispatch", contexts
    )


def _success(text: str, contexts: tuple[AdditionalContext, ...] = ()) -> ToolResult:
    return ToolResult(content=(TextBlock(text),), additional_contexts=contexts)


def _denied(reason: str) -> ToolResult:
    return _error("ToolDeniedError", "DENIED", reason)


# ---------------------------------------------------------------------------------------
# The interpreter.  Signals are modelled as the set of *causes* they follow: "caller" (the
# caller's source), "own" (the source behind the wrapper's replacement) and "deadline" (the
# timeout policy's timer).  A signal has fired when any of its causes has; its reason is the
# cause that fired first.


class _Final(Exception):
    """A result no later stage may change (materialisation, gate, wrapper, post failure)."""

    def __init__(self, result: ToolResult) -> None:
        self.result = result


class _Interrupted(Exception):
    """A wait inside a registry-owned scope (gate or body) was cancelled by its signal."""


class _Ambient(Exception):
    """``trio.Cancelled`` from the enclosing scope: propagates out of ``execute``."""


class _Failure(Exception):
    """A scripted stage raised."""

    def __init__(self, stage: str) -> None:
        self.stage = stage


_FAILURE_NAMES: Final = {
    "pre": "PRE_EXECUTE_FAILED",
    "guard": "PRE_EXECUTE_FAILED",
    "approver": "PRE_EXECUTE_FAILED",
    "wrapper": "WRAPPER_FAILED",
    "body": "TOOL_FAILED",
    "body_on_cancel": "TOOL_FAILED",
    "post": "POST_EXECUTE_FAILED",
    "finalize": "FINALIZE_FAILED",
}


class _Sim:
    def __init__(self, scenario: Scenario) -> None:
        self.s = scenario
        self.fired: list[str] = ["caller"] if scenario.pre_cancelled else []
        self.ambient = False
        self.triggered = False
        self.body_invoked = False
        self.stages: list[str] = []
        self.body_contexts: tuple[AdditionalContext, ...] = ()
        # The causes of the timeout policy's narrowed signal while its window is open.
        self.window: frozenset[str] | None = None

    # -- signals and waits ---------------------------------------------------------------

    def has_fired(self, causes: frozenset[str]) -> bool:
        return any(cause in causes for cause in self.fired)

    def first_cause(self, causes: frozenset[str]) -> str | None:
        return next((cause for cause in self.fired if cause in causes), None)

    def fire(self, cause: str) -> None:
        if cause not in self.fired:
            self.fired.append(cause)

    def failure(self, stage: str) -> ToolResult:
        code = CODED if self.s.coded_errors else _FAILURE_NAMES[stage]
        return _error("ScriptedFailure", code, FAILURE_MESSAGES[stage])

    def at(self, where: CancelWhere) -> bool:
        return self.s.where == where

    def trigger(self) -> None:
        self.triggered = True
        how = self.s.how
        if how == "signal":
            self.fire("caller")
        elif how == "wrapper_signal":
            self.fire("own")
        elif how == "ambient":
            self.ambient = True

    def checkpoint(self, causes: frozenset[str] = frozenset()) -> None:
        """An unshielded checkpoint inside scopes bound to ``causes`` (plus the ambient)."""
        if self.ambient:
            raise _Ambient
        if self.has_fired(causes):
            raise _Interrupted

    def elapse(self) -> None:
        """A full ``WAIT`` passes: the timeout policy's deadline fires if its window is open."""
        if self.window is not None and not self.has_fired(self.window):
            self.fire("deadline")

    def wait(self, causes: frozenset[str]) -> None:
        """``await trio.sleep(WAIT)`` inside a registry scope bound to ``causes``."""
        self.checkpoint(causes)
        self.elapse()
        self.checkpoint(causes)

    def wait_in_own_scope(self, causes: frozenset[str]) -> None:
        """``with exec.signal.open_scope(): await trio.sleep(WAIT)``: the stage's own scope
        absorbs its signal's cancellation; only the ambient one propagates."""
        if self.ambient:
            raise _Ambient
        if not self.has_fired(causes):
            self.elapse()

    def cancel_point(self, where: CancelWhere, causes: frozenset[str], *, own_scope: bool) -> None:
        if not self.at(where):
            return
        self.trigger()
        if self.s.wait:
            if own_scope:
                self.wait_in_own_scope(causes)
            else:
                self.wait(causes)

    # -- the pipeline ----------------------------------------------------------------------

    def run(self) -> tuple[ToolResult, bool]:
        """The candidate result before finish, and whether Cancelled escapes ``execute``."""
        s = self.s
        if self.at("before_entry"):
            self.trigger()
        not_json = s.arguments == "not_json"
        try:
            # Entry materialises first; its only checkpoint comes after.
            if self.ambient:
                raise _Ambient
            if not_json:
                raise _Final(
                    _error(
                        "TypeError",
                        "NOT_JSON",
                        "tool execution arguments must be losslessly JSON-serializable",
                    )
                )
            if self.has_fired(frozenset({"caller"})):
                raise _Final(_aborted(False))
            if s.tool == "unknown":
                result = _error(
                    "ToolNotFoundError", "UNKNOWN_TOOL", f'unknown tool "{UNKNOWN_NAME}"'
                )
            else:
                gate = self.gate()
                result = gate if gate is not None else self.overrides(self.around())
            return self.overrides(self.post_execute(result)), False
        except _Final as final:
            return final.result, False
        except _Ambient:
            if not_json:
                return _error(
                    "TypeError",
                    "NOT_JSON",
                    "tool execution arguments must be losslessly JSON-serializable",
                ), True
            return _aborted(self.body_invoked, self.body_contexts), True

    def overrides(self, result: ToolResult) -> ToolResult:
        """Cancellation of the caller replaces only a non-error result, keeping its contexts;
        under ambient cancellation a non-error result re-raises it instead."""
        if result.is_error:
            return result
        if self.ambient:
            raise _Ambient
        if not self.has_fired(frozenset({"caller"})):
            return result
        return _aborted(self.body_invoked, result.additional_contexts)

    def gate(self) -> ToolResult | None:
        s = self.s
        if s.pre == "none" and s.guard == "none":
            return None
        caller = frozenset({"caller"})
        try:
            outcome = self.decide(caller)
        except _Interrupted:
            return _aborted(False)
        except _Failure as failure:
            raise _Final(self.failure(failure.stage)) from None
        if outcome is None and self.has_fired(caller):
            return _aborted(False)
        return outcome

    def decide(self, caller: frozenset[str]) -> ToolResult | None:
        s = self.s
        decision = "allow"
        if s.pre != "none":
            self.stages.append("pre")
            self.checkpoint(caller)
            self.cancel_point("pre_execute", caller, own_scope=False)
            if s.pre == "raise":
                raise _Failure("pre")
            if s.pre == "cancel_then_deny":
                self.fire("caller")
                return _denied(CANCEL_DENY_REASON)
            decision = s.pre
        if decision == "allow":
            if s.guard == "none":
                return None
            self.stages.append("guard")
            if s.guard == "raise":
                raise _Failure("guard")
            return _denied(GUARD_REASON) if s.guard == "deny" else None
        if decision == "deny":
            return _denied(DENY_REASON)
        if s.approver == "none":
            return _denied(f'tool "{TOOL_NAME}" requires approval, but no approver is configured')
        self.stages.append("approver")
        self.checkpoint(caller)
        self.cancel_point("approval", caller, own_scope=False)
        if s.approver == "raise":
            raise _Failure("approver")
        if s.approver == "rejected":
            return _denied(f'the user rejected tool "{TOOL_NAME}"')
        if s.approver == "cancelled":
            if self.has_fired(caller):
                return _aborted(False)
            return _denied(f'approval for tool "{TOOL_NAME}" was cancelled')
        return None

    def around(self) -> ToolResult:
        s = self.s
        chain: list[str] = []
        if s.timeout_policy == "outer":
            chain.append("timeout")
        if s.wrapper != "none":
            chain.append("wrapper")
        if s.timeout_policy == "inner" or (s.timeout_policy == "none" and s.enforce_timeouts):
            chain.append("timeout")
        try:
            result = self.step(chain, frozenset({"caller"}))
        except _Failure as failure:
            raise _Final(self.failure(failure.stage)) from None
        if (
            self.body_invoked
            and result.additional_contexts[: len(self.body_contexts)] != self.body_contexts
        ):
            result = attrs.evolve(
                result, additional_contexts=(*self.body_contexts, *result.additional_contexts)
            )
        return result

    def step(self, chain: list[str], causes: frozenset[str]) -> ToolResult:
        if not chain:
            return self.dispatch(causes)
        head, rest = chain[0], chain[1:]
        if head == "timeout":
            return self.timeout_policy(rest, causes)
        return self.wrapper(rest, causes)

    def timeout_policy(self, rest: list[str], causes: frozenset[str]) -> ToolResult:
        if not self.s.tool_timeout:
            return self.step(rest, causes)
        narrowed = causes | {"deadline"}
        self.window = narrowed
        try:
            result = self.step(rest, narrowed)
        finally:
            self.window = None
        if self.first_cause(narrowed) != "deadline":
            return result
        return _error(
            "ToolTimeoutError",
            "TOOL_TIMEOUT",
            f"tool call timed out after {TIMEOUT:g}s",
            result.additional_contexts,
        )

    def wrapper(self, rest: list[str], causes: frozenset[str]) -> ToolResult:
        kind = self.s.wrapper
        self.stages.append("wrapper")
        self.checkpoint()
        self.cancel_point("wrapper_before", causes, own_scope=True)
        if kind == "raise_before":
            raise _Failure("wrapper")
        if kind == "short_circuit":
            return _success(SHORT_CIRCUIT_TEXT, (WRAPPER_CONTEXT,))
        if kind == "replace_signal" or self.at("replacement"):
            causes = causes | {"own"}
            if self.at("replacement"):
                self.trigger()
        result = self.step(rest, causes)
        self.cancel_point("wrapper_after", causes, own_scope=True)
        if kind == "raise_after":
            raise _Failure("wrapper")
        if kind == "replace_result":
            return _success(REPLACED_TEXT, (WRAPPER_CONTEXT,))
        return attrs.evolve(
            result, additional_contexts=(*result.additional_contexts, WRAPPER_CONTEXT)
        )

    def dispatch(self, causes: frozenset[str]) -> ToolResult:
        fused = causes | {"caller"}
        if self.has_fired(fused):
            return _aborted(False)
        self.body_invoked = True
        self.stages.append("body")
        self.body_contexts = (BODY_CONTEXT,)
        try:
            value = self.body(fused)
        except _Interrupted:
            value = None
        except _Failure as failure:
            return attrs.evolve(self.failure(failure.stage), additional_contexts=self.body_contexts)
        if value is None or self.has_fired(fused):
            # The registry checkpoints on its aborted path: an enclosing scope's pending
            # cancellation surfaces here, before any later stage runs.
            self.checkpoint()
            return _aborted(True, self.body_contexts)
        return _success(value, self.body_contexts)

    def body(self, fused: frozenset[str]) -> str:
        kind = self.s.body
        if kind == "raise_on_cancel":
            try:
                self.checkpoint(fused)
                if self.at("body"):
                    self.trigger()
                    if self.s.wait:
                        self.wait(fused)
                    else:
                        self.checkpoint(fused)
            except (_Interrupted, _Ambient):
                raise _Failure("body_on_cancel") from None
            return SUCCESS_TEXT
        self.checkpoint(fused)
        if kind == "shielded":
            if self.at("body"):
                self.trigger()
            self.elapse()
            return SUCCESS_TEXT
        if kind == "child":
            # The body returns at once; the child it started does the waiting, and the
            # call's nursery awaits it before the body's value counts.
            self.stages.append("child")
            self.checkpoint(fused)
            self.cancel_point("body", fused, own_scope=False)
            return SUCCESS_TEXT
        self.cancel_point("body", fused, own_scope=False)
        if kind == "raise":
            raise _Failure("body")
        return SUCCESS_TEXT

    def post_execute(self, result: ToolResult) -> ToolResult:
        kind = self.s.post
        if kind == "none":
            return result
        self.stages.append("post")
        try:
            self.checkpoint()
            self.cancel_point("post_execute", frozenset({"caller"}), own_scope=True)
        except _Interrupted:  # pragma: no cover - post-execute waits in its own scope
            raise AssertionError("unreachable") from None
        if kind == "raise":
            raise _Final(self.failure("post"))
        if kind == "block":
            return ToolResult(
                content=(TextBlock(BLOCK_FEEDBACK),),
                is_error=True,
                error=ErrorInfo("ToolBlockedError", "BLOCKED", BLOCK_FEEDBACK),
                additional_contexts=(BLOCK_CONTEXT,),
            )
        return attrs.evolve(result, additional_contexts=(*result.additional_contexts, POST_CONTEXT))


def expected_outcome(scenario: Scenario) -> Expectation:
    """The outcome the registry's contract requires for ``scenario``: a pure function.

    Precedence, as the model applies it: materialisation failure beats a pre-cancelled
    signal; a denial, a hook/guard/approver failure, a wrapper failure, a tool failure, a
    post-execute failure and the timeout policy's own ``TOOL_TIMEOUT`` all beat generic
    cancellation, which replaces only a non-error result (keeping its contexts); cancelled
    before the body was invoked gives ``ABORTED_BEFORE_DISPATCH``, after gives ``ABORTED``.
    Ambient cancellation that reaches the registry publishes ``ABORTED`` /
    ``ABORTED_BEFORE_DISPATCH`` (a ``NOT_JSON`` materialisation failure stays) and re-raises;
    so does a success that a stage returned after an enclosing scope was cancelled.
    ``finalize_content`` runs once for every call of a known tool, and a raise there turns
    any result into ``FINALIZE_FAILED``.
    """
    sim = _Sim(scenario)
    result, raises = sim.run()
    known = scenario.tool == "known"
    if known and scenario.finalize_raises:
        code = CODED if scenario.coded_errors else "FINALIZE_FAILED"
        result = _error(
            "ScriptedFailure", code, FAILURE_MESSAGES["finalize"], result.additional_contexts
        )
    return Expectation(
        result=result,
        body_invoked=sim.body_invoked,
        stages=tuple(sim.stages),
        finalize_calls=1 if known else 0,
        raises_cancelled=raises,
        triggered=sim.triggered,
    )
