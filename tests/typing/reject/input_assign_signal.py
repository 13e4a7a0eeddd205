# reject: pyright mypy
"""Rejected: ToolExecutionInput is frozen; its signal cannot be reassigned."""

from __future__ import annotations

import trio_tools


def replace(call: trio_tools.ToolExecutionInput, source: trio_tools.CancelSource) -> None:
    call.signal = source.signal  # expect-error
