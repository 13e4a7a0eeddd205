# reject: pyright mypy
"""Rejected: the signal of the read-only ToolExecution a post-execute hook gets cannot be
assigned."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio_tools
from trio_tools import PostDecision, ToolExecution, ToolResult


async def post_hook(
    exec: ToolExecution, result: ToolResult, call_next: Callable[[], Awaitable[PostDecision]]
) -> PostDecision:
    exec.signal = trio_tools.CancelSource().signal  # expect-error
    return await call_next()


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_post_execute(post_hook)
