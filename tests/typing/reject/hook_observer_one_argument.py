# reject: pyright mypy
"""Rejected: a result observer is called as `observer(exec, result)`."""

from __future__ import annotations

import trio_tools
from trio_tools import ToolResult


def observer(result: ToolResult) -> None:
    pass


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_observer(observer)  # expect-error
