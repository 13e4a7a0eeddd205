"""Accepted: the capabilities' documented signatures, as a tool body and a REPL use them."""

from __future__ import annotations

import sys
from pathlib import Path

import trio
import trio.lowlevel

import trio_tools
from trio_tools import CommandResult, ToolRunContext


async def shell_body(args: object, ctx: ToolRunContext) -> str:
    result: CommandResult = await trio_tools.run_command(
        "make test", ctx=ctx, shell=True, cwd=Path("."), env={"CI": "1"}, input="y\n"
    )
    listing = await trio_tools.run_command(["ls", "-l"], max_output=10_000, grace_period=0.5)
    code: int = result.returncode
    text: str = result.stdout + result.stderr + listing.stdout
    cut: bool = result.truncated
    return f"{code} {cut} {text}"


async def repl_turn(registry: trio_tools.ToolRegistry) -> None:
    registry.set_approver(trio_tools.console_approver())
    registry.set_approver(trio_tools.console_approver(stdin=sys.stdin, stdout=sys.stdout))
    registry.set_approver(trio_tools.console_approver(stdin=0))
    source = trio_tools.CancelSource()
    with trio_tools.open_sigint_cancel(source, reason="Ctrl-C"):
        await trio.lowlevel.checkpoint()
