# reject: pyright mypy
"""Rejected: a pre-execute hook must return a PreDecision (Allow, Deny or Ask), not a bool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio_tools
from trio_tools import PreDecision, ToolExecution


async def pre_hook(exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]) -> bool:
    return True


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_pre_execute(pre_hook)  # expect-error
