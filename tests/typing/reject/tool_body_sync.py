# reject: pyright mypy
"""Rejected: a tool body must be `async def body(args, ctx)`."""

from __future__ import annotations

import trio_tools
from trio_tools import ToolRunContext


def body(args: object, ctx: ToolRunContext) -> str:
    return "done"


tool = trio_tools.define_tool(body)  # expect-error
