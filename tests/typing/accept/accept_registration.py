"""Accepted: each stage's documented signature is taken by its registration method."""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable
from typing import Literal

import trio_tools
from trio_tools import (
    ApprovalRequest,
    PostDecision,
    PreDecision,
    Registration,
    ToolDispatchExecution,
    ToolExecution,
    ToolResult,
    ToolRunContext,
)


async def pre_hook(
    exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
) -> PreDecision:
    return await call_next()


async def pre_hook_allow(
    exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
) -> trio_tools.Allow:
    # A narrower return type is fine.
    return trio_tools.Allow()


async def around_wrapper(
    exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
) -> ToolResult:
    return await call_next()


async def post_hook(
    exec: ToolExecution, result: ToolResult, call_next: Callable[[], Awaitable[PostDecision]]
) -> PostDecision:
    if result.is_error:
        return trio_tools.Block("no")
    return await call_next()


def sync_observer(exec: ToolExecution, result: ToolResult) -> None:
    pass


async def async_observer(exec: ToolExecution, result: ToolResult) -> None:
    pass


def guard(exec: ToolExecution) -> str | None:
    return None


async def approver(request: ApprovalRequest) -> Literal["granted", "rejected", "cancelled"]:
    return "granted"


async def body(args: object, ctx: ToolRunContext) -> str:
    return "ok"


def register_everything(registry: trio_tools.ToolRegistry) -> list[Registration]:
    registrations = [
        registry.register(trio_tools.define_tool(body, name="raw")),
        registry.add_pre_execute(pre_hook),
        registry.add_pre_execute(pre_hook_allow),
        registry.add_around_execute(around_wrapper),
        registry.add_around_execute(trio_tools.timeout_policy()),
        registry.add_post_execute(post_hook),
        registry.add_observer(sync_observer),
        registry.add_observer(async_observer),
        registry.add_guard(guard),
        registry.set_approver(approver),
        registry.set_approver(None),
    ]
    with registry.add_guard(guard) as registration:
        typing.assert_type(registration, Registration)
    return registrations


def aliases_match() -> tuple[trio_tools.AroundWrapper, trio_tools.AroundWrapper]:
    # timeout_policy() and a hand-written wrapper are both of the public alias's type.
    policy: trio_tools.AroundWrapper = trio_tools.timeout_policy()
    mine: trio_tools.AroundWrapper = around_wrapper
    return policy, mine
