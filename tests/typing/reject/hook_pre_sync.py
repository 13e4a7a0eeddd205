# reject: pyright mypy
"""Rejected: a synchronous pre-execute hook (the hook must be `async`)."""

from __future__ import annotations

from collections.abc import Callable

import trio_tools
from trio_tools import PreDecision, ToolExecution


def pre_hook(exec: ToolExecution, call_next: Callable[[], PreDecision]) -> PreDecision:
    return trio_tools.Allow()


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_pre_execute(pre_hook)  # expect-error
