"""Mount an MCP server's tools, run one model step's tool calls, and stop it midway.

The server is ``examples/mcp_server.py``, started as a child process over stdio.  Its
tools become registry tools (``files_word_count``, ``files_slow_search``), so a batch runs
them like any other: the two read-only word counts in parallel, then the search alone.
When the search reports its first progress, the user "presses stop": the batch's signal
fires, the mounted call cancels its remote request (the SDK sends
``notifications/cancelled``), and the call that never started gets a synthetic result.

MCP has no acknowledgement of a cancel: the local result is ``ABORTED`` as soon as the
notice is written, and whether the remote work stopped cannot be confirmed from here.
This server happens to say so on its stderr, which this example shares.

Run it with ``.venv/bin/python examples/mcp_client.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

import trio_tools
from trio_tools.mcp import mount

SERVER = Path(__file__).with_name("mcp_server.py")


async def main() -> None:
    registry = trio_tools.ToolRegistry()
    stop = trio_tools.CancelSource()
    journal = trio_tools.MemoryJournal()
    calls = [
        trio_tools.ToolCall("call-1", "files_word_count", '{"text": "the quick brown fox"}'),
        trio_tools.ToolCall("call-2", "files_word_count", '{"text": "jumps"}'),
        trio_tools.ToolCall("call-3", "files_slow_search", '{"query": "trio"}'),
        trio_tools.ToolCall("call-4", "files_word_count", '{"text": "never counted"}'),
    ]

    def on_progress(call_id: str, progress: object) -> None:
        print(f"progress {call_id} {progress}", flush=True)
        stop.cancel("the user pressed stop")

    server = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    # The server's stderr is this program's stdout, so its notes show up in order.
    async with Client(stdio_client(server, errlog=sys.stdout), mode="legacy") as client:
        with await mount(registry, client, prefix="files_"):
            print("mounted:", ", ".join(schema.name for schema in registry.schemas()), flush=True)
            outcome = await trio_tools.run_tool_calls(
                registry, calls, signal=stop.signal, journal=journal, on_progress=on_progress
            )
    for call, result in zip(calls, outcome.results, strict=True):
        code = result.code or "OK"
        synthetic = " (synthetic)" if result.synthetic else ""
        text = " ".join(
            block.text for block in result.content if isinstance(block, trio_tools.TextBlock)
        )
        print(f"result  {call.call_id} {code}{synthetic}: {text}")
    print(f"aborted={outcome.aborted}")
    journal.assert_balanced()
    print("the journal is balanced")


if __name__ == "__main__":
    trio.run(main)
