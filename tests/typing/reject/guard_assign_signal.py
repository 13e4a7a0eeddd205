# reject: pyright mypy
"""Rejected: the signal of the read-only ToolExecution a guard gets cannot be assigned."""

from __future__ import annotations

import trio_tools
from trio_tools import ToolExecution


def guard(exec: ToolExecution) -> str | None:
    exec.signal = trio_tools.CancelSource().signal  # expect-error
    return None


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_guard(guard)
