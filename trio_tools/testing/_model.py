"""The pure model of what the registry must return for a scripted :class:`Scenario`.

:func:`expected_outcome` is the registry's contract (the pipeline, its result codes, the
precedence rules and the timeout policy) written as a small
interpreter over those draws: it walks the stages in pipeline order keeping only what the
contract talks about (which signals fired, in what order; whether an enclosing scope is
cancelled; whether the body was invoked), and returns the one result the registry must
publish.  It imports nothing from the registry's implementation, only the public result
types, so it can disagree with it.
"""

from __future__ import annotations

from typing import Final

import attrs

from .._results import AdditionalContext, ErrorInfo, TextBlock, ToolResult
from ._scenario import (
    BLOCK_CONTEXT,
    BLOCK_FEEDBACK,
    BODY_CONTEXT,
    CANCEL_DENY_REASON,
    CODED,
    DENY_REASON,
    FAILURE_MESSAGES,
    GUARD_REASON,
    POST_CONTEXT,
    REPLACED_TEXT,
    SHORT_CIRCUIT_TEXT,
    SUCCESS_TEXT,
    TIMEOUT,
    TOOL_NAME,
    UNKNOWN_NAME,
    WRAPPER_CONTEXT,
    CancelWhere,
    Expectation,
    Scenario,
)

__all__ = ["expected_outcome"]


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
    """``trio.Cancelled`` from the enclosing scope: propagates out of ``execute``.

    Raised with the contexts of the success it replaces (by the caller's signal's rule)
    when a stage returned one after the scope was cancelled; else the body's are kept.
    """


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
        except _Ambient as ambient:
            if not_json:
                return _error(
                    "TypeError",
                    "NOT_JSON",
                    "tool execution arguments must be losslessly JSON-serializable",
                ), True
            contexts = ambient.args[0] if ambient.args else self.body_contexts
            return _aborted(self.body_invoked, contexts), True

    def overrides(self, result: ToolResult) -> ToolResult:
        """Cancellation of the caller replaces only a non-error result, keeping its contexts;
        under ambient cancellation a non-error result re-raises it instead (the published
        result keeping its contexts likewise)."""
        if result.is_error:
            return result
        if self.ambient:
            raise _Ambient(result.additional_contexts)
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
