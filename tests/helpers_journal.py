"""Journal test helpers: a journal of a backend by name; a registry and calls to run on it."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import trio_tools
from trio_tools import ToolCall, ToolRegistry, ToolRunContext


def open_journal_at(backend: str, target: str, session: str) -> AbstractAsyncContextManager[Any]:
    if backend == "sqlite":
        return trio_tools.open_sqlite_journal(target, session=session)
    return trio_tools.open_postgres_journal(target, session=session)


def registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(concurrency_safe=True)
    async def echo(args: object, ctx: ToolRunContext) -> str:
        return f"echo {ctx.call_id}"

    return registry


def calls(*ids: str, name: str = "echo") -> list[ToolCall]:
    return [ToolCall(call_id, name, {"n": index}) for index, call_id in enumerate(ids)]
