# reject: pyright mypy
"""Rejected: `call_next()` takes no arguments."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio_tools
from trio_tools import ToolDispatchExecution, ToolResult


async def wrapper(
    exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
) -> ToolResult:
    return await call_next(exec)  # expect-error


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_around_execute(wrapper)
