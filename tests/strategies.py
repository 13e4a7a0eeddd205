"""Shared Hypothesis strategies for the test suite (CONVENTIONS.md, "Tests").

The scripted-scenario strategies are public in :mod:`trio_tools.testing`, so framework
authors draw from the same distributions; this module re-exports them and adds the ones only
the suite's own state machines use.
"""

from __future__ import annotations

import attrs
from hypothesis import strategies as st

from trio_tools import (
    DENIED,
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_FAILED,
    AdditionalContext,
    ErrorInfo,
    Halt,
    ImageBlock,
    TextBlock,
    ToolCall,
    ToolResult,
)
from trio_tools._json import freeze
from trio_tools.testing import CANCEL_HOWS, CANCEL_WHERES, Scenario, call_plans, scenarios

__all__ = [
    "CANCEL_HOWS",
    "CANCEL_WHERES",
    "call_plans",
    "concurrent_scenarios",
    "json_scalars",
    "json_values",
    "scenarios",
    "tool_calls",
    "tool_results",
]


def concurrent_scenarios() -> st.SearchStrategy[list[Scenario]]:
    """Scenarios that may run side by side on one shared, long-lived caller signal.

    None of them fires that signal (no ``"signal"`` cancellation, no cancel-then-deny hook),
    so each call's outcome is independent of its siblings' and the model still applies.
    """
    return st.lists(
        scenarios(hows=("ambient", "timeout", "wrapper_signal")).map(
            lambda s: attrs.evolve(s, pre="deny") if s.pre == "cancel_then_deny" else s
        ),
        min_size=2,
        max_size=4,
    )


# --------------------------------------------------------------------------------------
# Values of the wire forms (ToolCall / ToolResult .to_dict / .from_dict)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=5), children, max_size=5)
    ),
    max_leaves=30,
)
"""Plain JSON values: lists and dicts (what ``json.loads`` gives), any int, finite floats."""

content_blocks = st.builds(TextBlock, st.text()) | st.builds(
    ImageBlock, st.sampled_from(["image/png", "image/jpeg", ""]), st.text(max_size=20)
)
additional_contexts = st.builds(AdditionalContext, st.text(), st.none() | st.text(max_size=10))
error_infos = st.builds(
    ErrorInfo,
    st.sampled_from(["AbortError", "ToolDeniedError", "ValueError"]) | st.text(max_size=10),
    st.sampled_from([TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH, DENIED, TOOL_FAILED])
    | st.text(max_size=10),
    st.text(),
)


@st.composite
def tool_results(draw: st.DrawFn) -> ToolResult:
    """Every shape of :class:`ToolResult`: errors, images, contexts, halts, meta, synthetic."""
    error = draw(st.none() | error_infos)
    return ToolResult(
        content=draw(st.lists(content_blocks, max_size=4)),
        is_error=True if error is not None else draw(st.booleans()),
        error=error,
        additional_contexts=draw(st.lists(additional_contexts, max_size=3)),
        # Frozen, as the registry makes it (and from_dict gives it back).
        meta=freeze(draw(json_values)),
        concludes_turn=draw(st.booleans()),
        halt=draw(st.none() | st.builds(Halt, st.text())),
        synthetic=draw(st.booleans()),
    )


tool_calls = st.builds(
    ToolCall,
    st.text(),
    st.text(),
    # Raw JSON text (valid or not), or parsed plain JSON of any shape.
    st.text() | json_values,
)
