"""Accepted: every view's ``signal`` reads as a ``CancelSignal``, whatever stage holds it;
an around-execute wrapper may replace ``ToolDispatchExecution.signal`` with a narrowed one."""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable
from typing import Literal

import trio_tools
from trio_tools import (
    ApprovalRequest,
    CancelSignal,
    PostDecision,
    PreDecision,
    ToolDispatchExecution,
    ToolExecution,
    ToolResult,
    ToolRunContext,
)


async def pre_hook(
    exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
) -> PreDecision:
    typing.assert_type(exec.signal, CancelSignal)
    if exec.signal.cancelled:
        return trio_tools.Deny("cancelled")
    return await call_next()


async def post_hook(
    exec: ToolExecution, result: ToolResult, call_next: Callable[[], Awaitable[PostDecision]]
) -> PostDecision:
    typing.assert_type(exec.signal, CancelSignal)
    return await call_next()


def observer(exec: ToolExecution, result: ToolResult) -> None:
    typing.assert_type(exec.signal, CancelSignal)


async def async_observer(exec: ToolExecution, result: ToolResult) -> None:
    typing.assert_type(exec.signal, CancelSignal)
    await exec.signal.wait_cancelled()


def guard(exec: ToolExecution) -> str | None:
    typing.assert_type(exec.signal, CancelSignal)
    return "cancelled" if exec.signal.cancelled else None


async def approver(request: ApprovalRequest) -> Literal["granted", "rejected", "cancelled"]:
    typing.assert_type(request.execution, ToolExecution)
    typing.assert_type(request.execution.signal, CancelSignal)
    await request.execution.signal.wait_cancelled()
    return "cancelled"


def finalize_content(
    exec: ToolExecution, result: ToolResult
) -> tuple[trio_tools.ContentBlock, ...] | None:
    typing.assert_type(exec.signal, CancelSignal)
    return None


async def passthrough_wrapper(
    exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
) -> ToolResult:
    typing.assert_type(exec.signal, CancelSignal)
    return await call_next()


async def narrowing_wrapper(
    exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
) -> ToolResult:
    # The documented way to narrow a call's lifetime for the span of call_next().
    async with trio_tools.open_signal(exec.signal, timeout=1) as narrowed:
        exec.signal = narrowed
        typing.assert_type(exec.signal, CancelSignal)
        return await call_next()


async def replacing_wrapper(
    exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
) -> ToolResult:
    # Any CancelSignal may be assigned, e.g. one the wrapper owns.
    source = trio_tools.CancelSource()
    caller = exec.signal
    exec.signal = source.signal
    try:
        return await call_next()
    finally:
        exec.signal = caller


async def body(args: object, ctx: ToolRunContext) -> str:
    typing.assert_type(ctx.signal, CancelSignal)
    with ctx.signal.open_scope():
        await ctx.signal.wait_cancelled()
    return "done"
