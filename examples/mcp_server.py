"""A tool registry served over MCP on stdio: any MCP client can mount it.

Run it as the command of an MCP client (``examples/mcp_client.py`` does, as would an MCP
host's server configuration)::

    .venv/bin/python examples/mcp_server.py

It serves until the client closes its stdin.  Every ``tools/call`` runs through the
registry with its own cancellation signal: when the client sends
``notifications/cancelled`` (or the connection closes), the tool's signal fires, with a
reason saying which, and the body stops at its next checkpoint.  stdout carries the
protocol, so the tools write their notes to stderr.
"""

from __future__ import annotations

import functools
import sys

import attrs
import trio

import trio_tools
from trio_tools.mcp import serve_stdio

registry = trio_tools.ToolRegistry()


@attrs.frozen
class CountArgs:
    text: str


@attrs.frozen
class SearchArgs:
    query: str
    pages: int = 20


def note(text: str) -> None:
    print(f"[server] {text}", file=sys.stderr, flush=True)


@registry.tool(concurrency_safe=True)
async def word_count(args: CountArgs, ctx: trio_tools.ToolRunContext) -> dict[str, int]:
    """Count the words of a text."""
    return {"words": len(args.text.split())}


@registry.tool
async def slow_search(args: SearchArgs, ctx: trio_tools.ToolRunContext) -> str:
    """Search page by page, reporting progress; stops when the call is cancelled."""
    ctx.signal.add_listener(lambda reason: note(f"slow_search stopped: {reason.message}"))
    for page in range(1, args.pages + 1):
        ctx.report_progress({"progress": page, "total": args.pages, "message": f"page {page}"})
        await trio.sleep(0.5)
    return f"no page mentions {args.query!r}"


def main() -> None:
    trio.run(functools.partial(serve_stdio, registry, name="example-tools"))


if __name__ == "__main__":
    main()
