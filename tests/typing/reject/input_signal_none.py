# reject: pyright mypy
"""Rejected: `None` is not a signal; there is no never-cancelled default."""

from __future__ import annotations

from trio_tools import ToolExecutionInput


def build() -> ToolExecutionInput:
    return ToolExecutionInput(call_id="1", name="t", arguments={}, signal=None)  # expect-error
