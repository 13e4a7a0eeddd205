"""Hypothesis strategies for scripted scenarios."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, get_args

import attrs
from hypothesis import strategies as st

from ._scenario import (
    ApproverKind,
    BodyKind,
    CancelHow,
    CancelWhere,
    GuardKind,
    PostKind,
    PreKind,
    Scenario,
    TimeoutPolicyPlacement,
    WrapperKind,
)

__all__ = ["CANCEL_HOWS", "CANCEL_WHERES", "scenarios"]

CANCEL_WHERES: Final[tuple[CancelWhere, ...]] = get_args(CancelWhere)
"""Every cancellation point, in pipeline order (``"never"`` first)."""
CANCEL_HOWS: Final[tuple[CancelHow, ...]] = get_args(CancelHow)
"""Every way cancellation arrives."""

# Kinds that let the call go on are listed twice: failures and denials end most calls early
# and would otherwise drown the cancellation classifications.  Shrinking goes to the first.
_PRE: Final[tuple[PreKind, ...]] = (
    "none",
    "allow",
    "none",
    "allow",
    "ask",
    "ask",
    "deny",
    "raise",
    "cancel_then_deny",
)
_GUARD: Final[tuple[GuardKind, ...]] = ("none", "none", "none", "pass", "pass", "deny", "raise")
_APPROVER: Final[tuple[ApproverKind, ...]] = (
    "granted",
    "granted",
    "none",
    "rejected",
    "cancelled",
    "raise",
)
_WRAPPER: Final[tuple[WrapperKind, ...]] = (
    "none",
    "pass",
    "replace_signal",
    "none",
    "pass",
    "replace_signal",
    "short_circuit",
    "replace_result",
    "raise_before",
    "raise_after",
)
_BODY: Final[tuple[BodyKind, ...]] = (
    "success",
    "child",
    "success",
    "child",
    "raise",
    "raise_on_cancel",
    "shielded",
)
_POST: Final[tuple[PostKind, ...]] = ("none", "accept", "none", "accept", "block", "raise")
_POLICY: Final[tuple[TimeoutPolicyPlacement, ...]] = get_args(TimeoutPolicyPlacement)
_CALLS_NEXT: Final[frozenset[WrapperKind]] = frozenset(
    {"pass", "replace_signal", "replace_result", "raise_after"}
)
_WAITING_POINTS: Final[frozenset[CancelWhere]] = frozenset(
    {"pre_execute", "approval", "wrapper_before", "body", "wrapper_after", "post_execute"}
)
# Rare draws: each collapses most outcomes into one code, so they would drown the rest.
_RARELY: Final = st.sampled_from([*(False,) * 7, True])


def _reachable(scenario: Scenario) -> Scenario:
    """Adjust the stages so that the scenario's cancellation point is reached."""
    s = scenario
    changes: dict[str, object] = {}
    where = s.where
    if where in (
        "pre_execute",
        "approval",
        "wrapper_before",
        "replacement",
        "body",
        "wrapper_after",
    ):
        changes.update(tool="known", arguments="json")
    if where == "pre_execute" and s.pre == "none":
        changes["pre"] = "allow"
    if where == "approval":
        changes["pre"] = "ask"
        if s.approver == "none":
            changes["approver"] = "granted"
    if where in ("wrapper_before", "replacement", "body", "wrapper_after"):
        # The gate must let the call through.
        if s.pre not in ("none", "allow", "ask"):
            changes["pre"] = "allow"
        if s.pre == "ask":
            changes["approver"] = "granted"
        if s.guard not in ("none", "pass"):
            changes["guard"] = "pass"
    if where == "wrapper_before" and s.wrapper == "none":
        changes["wrapper"] = "pass"
    if where in ("replacement", "wrapper_after") and s.wrapper not in _CALLS_NEXT:
        changes["wrapper"] = "pass"
    if where == "body" and s.wrapper not in ("none", *_CALLS_NEXT):
        changes["wrapper"] = "pass"
    if where == "post_execute" and s.post == "none":
        changes["post"] = "accept"
    if s.how == "timeout":
        changes["tool_timeout"] = True
        if s.timeout_policy == "none" and not s.enforce_timeouts:
            changes["timeout_policy"] = "outer"
    if s.how == "wrapper_signal" and s.wrapper in ("none", "pass") and where != "replacement":
        changes["wrapper"] = "replace_signal"
    return attrs.evolve(s, **changes)  # type: ignore[arg-type]


@st.composite
def _scenarios(
    draw: st.DrawFn,
    wheres: Sequence[CancelWhere],
    hows: Sequence[CancelHow],
    reach: bool | None,
) -> Scenario:
    where = draw(st.sampled_from(wheres))
    how = draw(st.sampled_from(hows))
    wait = where not in ("never", "before_entry", "replacement") and draw(st.booleans())
    external = wait and where in _WAITING_POINTS and draw(st.booleans())
    scenario = Scenario(
        where=where,
        how=how,
        wait=wait,
        external=external,
        arguments="not_json" if draw(_RARELY) else "json",
        tool="unknown" if draw(_RARELY) else "known",
        pre=draw(st.sampled_from(_PRE)),
        guard=draw(st.sampled_from(_GUARD)),
        approver=draw(st.sampled_from(_APPROVER)),
        wrapper=draw(st.sampled_from(_WRAPPER)),
        body=draw(st.sampled_from(_BODY)),
        post=draw(st.sampled_from(_POST)),
        tool_timeout=draw(st.booleans()),
        timeout_policy=draw(st.sampled_from(_POLICY)),
        enforce_timeouts=draw(st.booleans()),
        finalize_raises=draw(_RARELY),
        coded_errors=draw(_RARELY),
    )
    if reach if reach is not None else draw(st.booleans()):
        scenario = _reachable(scenario)
    return scenario


def scenarios(
    *,
    wheres: Sequence[CancelWhere] = CANCEL_WHERES,
    hows: Sequence[CancelHow] = CANCEL_HOWS,
    reach: bool | None = None,
) -> st.SearchStrategy[Scenario]:
    """Scripted call scenarios: where and how cancellation arrives, what each stage does.

    Every stage is drawn independently; then, for about half the examples (``reach=None``)
    or all (``True``) or none (``False``), the stages are adjusted so that the cancellation
    point is actually reached (an ``"approval"`` point gets a pre-execute hook that asks, a
    ``"timeout"`` cancellation gets a tool timeout and the timeout policy, ...).
    ``pre_cancelled`` is always ``False``: set it with ``attrs.evolve`` when the caller's
    signal has already fired.

    Args:
        wheres: the cancellation points to draw from.
        hows: the ways of cancelling to draw from.
        reach: force (``True``) or leave to chance (``False``) the reachability adjustment;
            ``None`` draws it.
    """
    if not wheres or not hows:
        raise ValueError("wheres and hows must not be empty")
    for where in wheres:
        if where not in CANCEL_WHERES:
            raise ValueError(f"unknown cancellation point {where!r}")
    for how in hows:
        if how not in CANCEL_HOWS:
            raise ValueError(f"unknown way of cancelling {how!r}")
    return _scenarios(tuple(wheres), tuple(hows), reach)
