# reject: pyright mypy
"""Rejected: `register()` takes a ToolDefinition, not the bare body."""

from __future__ import annotations

import trio_tools
from trio_tools import ToolRunContext


async def body(args: object, ctx: ToolRunContext) -> str:
    return "done"


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.register(body)  # expect-error
