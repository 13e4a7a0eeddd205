# reject: pyright mypy
"""Rejected: a post-execute hook returns a PostDecision (Accept or Block), not a ToolResult."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio_tools
from trio_tools import PostDecision, ToolExecution, ToolResult


async def post_hook(
    exec: ToolExecution, result: ToolResult, call_next: Callable[[], Awaitable[PostDecision]]
) -> ToolResult:
    return result


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_post_execute(post_hook)  # expect-error
