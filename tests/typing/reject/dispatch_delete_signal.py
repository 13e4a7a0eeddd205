# reject: pyright
# mypy does not check `del` of an attribute against its declaration (a property without a
# deleter, a frozen attrs field), so pyright is the authority for this case; mypy must find
# the rest of the file clean.
"""Rejected: an around-execute wrapper cannot delete `exec.signal` (no deleter)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio_tools
from trio_tools import ToolDispatchExecution, ToolResult


async def wrapper(
    exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
) -> ToolResult:
    del exec.signal  # expect-error
    return await call_next()


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_around_execute(wrapper)
