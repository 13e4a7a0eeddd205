# reject: pyright mypy
"""Rejected: the signal of the read-only ToolExecution a result observer gets cannot be
assigned."""

from __future__ import annotations

import trio_tools
from trio_tools import ToolExecution, ToolResult


def observer(exec: ToolExecution, result: ToolResult) -> None:
    exec.signal = trio_tools.CancelSource().signal  # expect-error


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_observer(observer)
