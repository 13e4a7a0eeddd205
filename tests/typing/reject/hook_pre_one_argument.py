# reject: pyright mypy
"""Rejected: a pre-execute hook that does not take `call_next`."""

from __future__ import annotations

import trio_tools
from trio_tools import PreDecision, ToolExecution


async def pre_hook(exec: ToolExecution) -> PreDecision:
    return trio_tools.Allow()


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_pre_execute(pre_hook)  # expect-error
