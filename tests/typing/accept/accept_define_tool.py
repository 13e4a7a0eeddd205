"""Accepted: ``define_tool`` / ``registry.tool`` infer the argument type from the body and
give the body's ``ctx.signal`` as a ``CancelSignal``."""

from __future__ import annotations

import typing
from collections.abc import Callable

import attrs

import trio_tools
from trio_tools import CancelSignal, ToolDefinition, ToolRunContext


@attrs.frozen
class ReadArgs:
    path: str
    max_bytes: int = 65536


registry = trio_tools.ToolRegistry()


@trio_tools.define_tool
async def bare_decorator(args: ReadArgs, ctx: ToolRunContext) -> str:
    """Read a UTF-8 text file."""
    typing.assert_type(args, ReadArgs)
    typing.assert_type(ctx.signal, CancelSignal)
    return args.path


@trio_tools.define_tool(name="read", timeout=5.0, concurrency_safe=True)
async def decorator_with_arguments(args: ReadArgs, ctx: ToolRunContext) -> str:
    typing.assert_type(ctx.signal, CancelSignal)
    return args.path


@trio_tools.define_tool()
async def decorator_with_empty_call(args: ReadArgs, ctx: ToolRunContext) -> str:
    typing.assert_type(ctx.signal, CancelSignal)
    return args.path


async def plain_function(args: ReadArgs, ctx: ToolRunContext) -> str:
    typing.assert_type(ctx.signal, CancelSignal)
    return args.path


call_form = trio_tools.define_tool(plain_function, timeout=1, concurrency_safe=False)
explicit_args = trio_tools.define_tool(plain_function, args=ReadArgs)


def small_reads(args: ReadArgs) -> bool:
    return args.max_bytes < 1024


per_call_safety = trio_tools.define_tool(
    plain_function, concurrency_safe=small_reads, requires_approval=small_reads
)
# A lambda type-checks too.  (Through define_tool's overloads mypy infers the lambda's
# parameter as Any, and the definition as ToolDefinition[Any]; pyright as ReadArgs.)
per_call_lambda = trio_tools.define_tool(
    plain_function,
    concurrency_safe=lambda args: args.max_bytes < 1024,
    timeout=lambda args: 5.0 if args.max_bytes < 1024 else None,
)


@registry.tool
async def registry_bare(args: ReadArgs, ctx: ToolRunContext) -> str:
    typing.assert_type(ctx.signal, CancelSignal)
    return args.path


@registry.tool(timeout=5.0, concurrency_safe=True)
async def registry_with_arguments(args: ReadArgs, ctx: ToolRunContext) -> str:
    typing.assert_type(ctx.signal, CancelSignal)
    return args.path


@registry.tool
async def raw_tool(args: object, ctx: ToolRunContext) -> object:
    typing.assert_type(ctx.signal, CancelSignal)
    return args


typing.assert_type(bare_decorator, ToolDefinition[ReadArgs])
typing.assert_type(decorator_with_arguments, ToolDefinition[ReadArgs])
typing.assert_type(decorator_with_empty_call, ToolDefinition[ReadArgs])
typing.assert_type(call_form, ToolDefinition[ReadArgs])
typing.assert_type(explicit_args, ToolDefinition[ReadArgs])
typing.assert_type(per_call_safety, ToolDefinition[ReadArgs])
typing.assert_type(registry_bare, ToolDefinition[ReadArgs])
typing.assert_type(registry_with_arguments, ToolDefinition[ReadArgs])
typing.assert_type(raw_tool, ToolDefinition[object])


async def raw_body(args: object, ctx: ToolRunContext) -> str:
    return "raw"


# A raw body given an explicit argument type is typed by that type.
typing.assert_type(trio_tools.define_tool(raw_body, args=ReadArgs), ToolDefinition[ReadArgs])


# ToolDefinition is also constructible directly, with a hand-written schema.
direct = ToolDefinition(
    name="read_direct",
    execute=plain_function,
    args=ReadArgs,
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)
typing.assert_type(direct, ToolDefinition[ReadArgs])
registry.register(direct)

# The stored body is called with the parsed arguments and a ToolRunContext (its result is
# awaited when it is a coroutine function; a plain function runs in a worker thread).
typing.assert_type(call_form.execute, Callable[[ReadArgs, ToolRunContext], object])
