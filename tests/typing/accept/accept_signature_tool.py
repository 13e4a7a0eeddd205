"""Accepted: signature tools (arguments as parameters), sync tools, callable timeouts and
``requires_approval``; a signature tool's ``ctx.signal`` is a ``CancelSignal``."""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

import msgspec
import trio

import trio_tools
from trio_tools import CancelSignal, ToolDefinition, ToolResult, ToolRunContext

registry = trio_tools.ToolRegistry(thread_limiter=trio.CapacityLimiter(4), enforce_timeouts=True)


@registry.tool(timeout=30, requires_approval=True)
async def read_file(
    path: Annotated[str, msgspec.Meta(description="The file, relative to the workspace.")],
    max_bytes: int = 65536,
    *,
    ctx: ToolRunContext,
) -> str:
    """Read a UTF-8 text file."""
    typing.assert_type(ctx.signal, CancelSignal)
    return path[:max_bytes]


@trio_tools.define_tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@trio_tools.define_tool(timeout=lambda args: args.timeout, requires_approval=lambda args: True)
def run_command(
    command: str,
    timeout: float | None = None,
    mode: Literal["a", "b"] = "a",
    *,
    ctx: ToolRunContext,
) -> str:
    """A sync tool: it runs in a worker thread."""
    typing.assert_type(ctx.signal, CancelSignal)
    ctx.check_cancelled()
    ctx.report_progress("started")
    return command


# A JSON-typed first argument and a positional context is a signature tool, not class
# style with an argument type of `str`: its callables see the parsed arguments' attributes.
@registry.tool(requires_approval=lambda args: args.path.startswith("/"))
async def stat(path: str, ctx: ToolRunContext) -> str:
    typing.assert_type(ctx.signal, CancelSignal)
    return path


@registry.tool
def count(n: int, ctx: ToolRunContext) -> int:
    return n


typing.assert_type(read_file, ToolDefinition[Any])
typing.assert_type(stat, ToolDefinition[Any])
typing.assert_type(count, ToolDefinition[Any])
typing.assert_type(add, ToolDefinition[Any])
typing.assert_type(run_command, ToolDefinition[Any])
text: str = ToolResult(content=()).text
