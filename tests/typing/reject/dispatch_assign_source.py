# reject: pyright mypy
"""Rejected: `ToolDispatchExecution.signal` takes a CancelSignal, not its CancelSource."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio_tools
from trio_tools import ToolDispatchExecution, ToolResult


async def wrapper(
    exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
) -> ToolResult:
    exec.signal = trio_tools.CancelSource()  # expect-error
    return await call_next()


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_around_execute(wrapper)
