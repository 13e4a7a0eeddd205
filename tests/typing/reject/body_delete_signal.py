# reject: pyright
# mypy does not check `del` of an attribute against its declaration (a property without a
# deleter, a frozen attrs field), so pyright is the authority for this case; mypy must find
# the rest of the file clean.
"""Rejected: the (fused) signal of the ToolRunContext a tool body gets cannot be deleted."""

from __future__ import annotations

import trio_tools
from trio_tools import ToolRunContext


@trio_tools.define_tool
async def body(args: object, ctx: ToolRunContext) -> str:
    del ctx.signal  # expect-error
    return "done"
