"""A tool registry served over MCP's streamable HTTP transport, and mounted by a client.

The server is the MCP SDK's ASGI app for a registry (``server(...).streamable_http_app()``)
under Hypercorn's Trio worker, listening on 127.0.0.1 only, on a free port.  In the same
process, the SDK's ``mcp.Client`` connects to it over HTTP and mounts its tools into a
second registry: a call of the mounted word count goes through both registries and comes
back with the remote tool's result.  Then a slow search is cancelled mid-call when it
reports its first progress ("the user pressed stop"): the local call is ``ABORTED``, the
client ends its HTTP request, and the remote tool's signal fires, so its body stops at its
next checkpoint and the serving registry publishes its own ``ABORTED``.  The program waits
for that, shuts the server down and exits.

Run it with ``.venv/bin/python examples/mcp_http.py``.
"""

from __future__ import annotations

import functools

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp import Client

import trio_tools
from trio_tools.mcp import mount, server

# Real sockets: real time, bounded.
DEADLINE = 20


@attrs.frozen
class CountArgs:
    text: str


@attrs.frozen
class SearchArgs:
    query: str
    pages: int = 20


def serving_registry(stopped: trio.Event) -> trio_tools.ToolRegistry:
    """The registry the server exposes; ``stopped`` is set once the search is over."""
    registry = trio_tools.ToolRegistry()

    @registry.tool(concurrency_safe=True)
    async def word_count(args: CountArgs, ctx: trio_tools.ToolRunContext) -> dict[str, int]:
        """Count the words of a text."""
        return {"words": len(args.text.split())}

    @registry.tool
    async def slow_search(args: SearchArgs, ctx: trio_tools.ToolRunContext) -> str:
        """Search page by page, reporting progress; stops when the call is cancelled."""
        ctx.signal.add_listener(
            lambda reason: print(f"[server] slow_search stopped: {reason.message}", flush=True)
        )
        for page in range(1, args.pages + 1):
            ctx.report_progress({"progress": page, "total": args.pages})
            await trio.sleep(0.5)
        return f"no page mentions {args.query!r}"

    def published(exec: trio_tools.ToolExecution, result: trio_tools.ToolResult) -> None:
        print(f"[server] {exec.name} published {result.code or 'OK'}", flush=True)
        if exec.name == "slow_search":
            stopped.set()

    registry.add_observer(published)
    return registry


def text_of(result: trio_tools.ToolResult) -> str:
    return " ".join(
        block.text for block in result.content if isinstance(block, trio_tools.TextBlock)
    )


async def use(url: str, stopped: trio.Event) -> None:
    """Mount the served tools over HTTP, call one, and cancel the other mid-call."""
    registry = trio_tools.ToolRegistry()
    async with Client(url) as client:
        with await mount(registry, client, prefix="remote_"):
            print("mounted:", ", ".join(schema.name for schema in registry.schemas()))
            counted = await registry.execute(
                trio_tools.ToolExecutionInput(
                    call_id="call-1",
                    name="remote_word_count",
                    arguments={"text": "the quick brown fox"},
                    signal=trio_tools.CancelSource().signal,
                )
            )
            print(f"result  call-1 {counted.code or 'OK'}: {text_of(counted)}")
            stop = trio_tools.CancelSource()

            def on_progress(progress: object) -> None:
                print(f"progress call-2 {progress}", flush=True)
                stop.cancel("the user pressed stop")

            searched = await registry.execute(
                trio_tools.ToolExecutionInput(
                    call_id="call-2",
                    name="remote_slow_search",
                    arguments={"query": "trio"},
                    signal=stop.signal,
                    on_progress=on_progress,
                )
            )
            print(f"result  call-2 {searched.code}: {text_of(searched)}")
            # MCP has no acknowledgement of a cancel: the server's own result says it stopped.
            with trio.fail_after(DEADLINE):
                await stopped.wait()


async def main() -> None:
    stopped = trio.Event()
    app = server(serving_registry(stopped), name="search-tools").streamable_http_app()
    config = Config()
    config.bind = ["127.0.0.1:0"]  # a free port, on this machine only
    config.accesslog = None
    config.graceful_timeout = 1
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            functools.partial(serve, app, config, shutdown_trigger=shutdown.wait)
        )
        url = f"{binds[0]}/mcp"
        print(f"serving over streamable HTTP at {url}")
        try:
            await use(url, stopped)
        finally:
            shutdown.set()  # Hypercorn stops serving and returns: the nursery waits for it
    print("server stopped")


if __name__ == "__main__":
    trio.run(main)
