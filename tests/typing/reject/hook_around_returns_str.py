# reject: pyright mypy
"""Rejected: an around-execute wrapper returns a ToolResult, not a str."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio_tools
from trio_tools import ToolDispatchExecution, ToolResult


async def wrapper(
    exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
) -> str:
    return "short-circuit"


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_around_execute(wrapper)  # expect-error
