# reject: pyright mypy
"""Rejected: a ToolExecutionInput without a signal (the caller owns the lifetime)."""

from __future__ import annotations

import trio_tools


def build() -> trio_tools.ToolExecutionInput:
    return trio_tools.ToolExecutionInput(call_id="1", name="t", arguments={})  # expect-error
