# reject: pyright mypy
"""Rejected: a tool body receives a ToolRunContext, not a ToolExecution."""

from __future__ import annotations

import trio_tools
from trio_tools import ToolExecution


async def body(args: object, ctx: ToolExecution) -> str:
    return "done"


tool = trio_tools.define_tool(body)  # expect-error
