# reject: pyright mypy
"""Rejected: a callable ``timeout`` gives seconds or ``None``, not a ``str``."""

from __future__ import annotations

import attrs

import trio_tools
from trio_tools import ToolRunContext


@attrs.frozen
class Args:
    seconds: str


def seconds(args: Args) -> str:
    return args.seconds


async def body(args: Args, ctx: ToolRunContext) -> str:
    return "done"


tool = trio_tools.define_tool(body, timeout=seconds)  # expect-error
