"""Shared Hypothesis strategies for the test suite (CONVENTIONS.md, "Tests").

The scripted-scenario strategies are public in :mod:`trio_tools.testing`, so framework
authors draw from the same distributions; this module re-exports them and adds the ones only
the suite's own state machines use.
"""

from __future__ import annotations

import attrs
from hypothesis import strategies as st

from trio_tools.testing import CANCEL_HOWS, CANCEL_WHERES, Scenario, call_plans, scenarios

__all__ = [
    "CANCEL_HOWS",
    "CANCEL_WHERES",
    "call_plans",
    "concurrent_scenarios",
    "scenarios",
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
