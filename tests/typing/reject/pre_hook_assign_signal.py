# reject: pyright mypy
"""Rejected: the signal of the read-only ToolExecution a pre-execute hook gets cannot be
assigned."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio_tools
from trio_tools import PreDecision, ToolExecution


async def pre_hook(
    exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
) -> PreDecision:
    exec.signal = trio_tools.CancelSource().signal  # expect-error
    return await call_next()


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_pre_execute(pre_hook)
