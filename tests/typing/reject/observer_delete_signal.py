# reject: pyright
# mypy does not check `del` of an attribute against its declaration (a property without a
# deleter, a frozen attrs field), so pyright is the authority for this case; mypy must find
# the rest of the file clean.
"""Rejected: the signal of the read-only ToolExecution a result observer gets cannot be
deleted."""

from __future__ import annotations

import trio_tools
from trio_tools import ToolExecution, ToolResult


def observer(exec: ToolExecution, result: ToolResult) -> None:
    del exec.signal  # expect-error


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_observer(observer)
