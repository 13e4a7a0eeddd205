# reject: pyright mypy
"""Rejected: a guard is synchronous; an `async` guard would return a coroutine."""

from __future__ import annotations

import trio_tools
from trio_tools import ToolExecution


async def guard(exec: ToolExecution) -> str | None:
    return None


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_guard(guard)  # expect-error
