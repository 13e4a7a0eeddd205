# reject: pyright mypy
"""Rejected: the (fused) signal of the ToolRunContext a tool body gets cannot be assigned."""

from __future__ import annotations

import trio_tools
from trio_tools import ToolRunContext


@trio_tools.define_tool
async def body(args: object, ctx: ToolRunContext) -> str:
    ctx.signal = trio_tools.CancelSource().signal  # expect-error
    return "done"
