# reject: pyright mypy
"""Rejected: a pre-execute hook gets the read-only ToolExecution, so a hook declared for the
wrapper's ToolDispatchExecution (which could replace the signal) does not fit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio_tools
from trio_tools import PreDecision, ToolDispatchExecution


async def pre_hook(
    exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[PreDecision]]
) -> PreDecision:
    return await call_next()


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_pre_execute(pre_hook)  # expect-error
