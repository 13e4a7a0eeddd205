# reject: pyright
# mypy does not check `del` of an attribute against its declaration (a property without a
# deleter, a frozen attrs field), so pyright is the authority for this case; mypy must find
# the rest of the file clean.
"""Rejected: the signal of the read-only ToolExecution a pre-execute hook gets cannot be
deleted."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio_tools
from trio_tools import PreDecision, ToolExecution


async def pre_hook(
    exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
) -> PreDecision:
    del exec.signal  # expect-error
    return await call_next()


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_pre_execute(pre_hook)
