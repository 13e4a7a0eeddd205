"""An agent turn: a scripted model asks for tool calls over two steps; the user presses stop.

Each model step's calls go through ``trio_tools.run_tool_calls``, which runs them in model
order (parallel reads side by side, an exclusive write alone), commits each result in model
order to a journal, and keeps that transcript balanced: every call gets exactly one result.

* Step 1: two reads run side by side, then the write runs alone.
* Step 2: a slow search, a fetch that overruns its 1 s ``timeout`` (``TOOL_TIMEOUT``: the
  registry enforces each tool's timeout), a read of a missing file (a tool error is just a
  result), and a write waiting for its turn.  The user presses stop 3 s into the step: the search is
  ``ABORTED`` (its body ran) and the write, which never started, gets a synthetic
  ``ABORTED_BEFORE_DISPATCH`` result.  The fetch and the read finished early, but their
  results are committed after the search's: in model order.

The model is a script and time is virtual (``trio.testing.MockClock``), so the turn takes a
few "seconds" on the printed clock and milliseconds in reality.

Run it with ``.venv/bin/python examples/agent_turn.py`` (``make demo``).
"""

from __future__ import annotations

import json

import attrs
import trio
import trio.testing

import trio_tools

# -- the tools ------------------------------------------------------------------------------

FILES = {
    "notes.md": "Trio cancel scopes nest; the innermost cancelled scope catches.",
    "todo.md": "- write the summary\n- search for prior art",
}


def build_registry() -> trio_tools.ToolRegistry:
    registry = trio_tools.ToolRegistry()

    @registry.tool(concurrency_safe=True)
    async def read_file(path: str) -> str:
        """Read a text file.

        Args:
            path: The file, relative to the workspace.
        """
        await trio.sleep(0.2)
        if path not in FILES:
            raise FileNotFoundError(f"no such file: {path}")
        return FILES[path]

    @registry.tool  # not concurrency-safe: runs alone
    async def write_file(path: str, text: str) -> str:
        """Write a text file.

        Args:
            path: The file, relative to the workspace.
            text: Its new content.
        """
        await trio.sleep(0.1)
        FILES[path] = text
        return f"wrote {len(text)} characters to {path}"

    @registry.tool(concurrency_safe=True, timeout=30)
    async def search(query: str, *, ctx: trio_tools.ToolRunContext) -> str:
        """Search four shards, slowly."""
        for shard in range(1, 5):
            await trio.sleep(2)
            ctx.report_progress(f"searched shard {shard}/4")
        return f"3 hits for {query!r}"

    @registry.tool(concurrency_safe=True, timeout=1)
    async def fetch_url(url: str) -> str:
        """Fetch a web page (this server takes 5 s)."""
        await trio.sleep(5)
        return f"<html>{url}</html>"

    return registry


# -- the model: a script --------------------------------------------------------------------


def call(call_id: str, name: str, **arguments: object) -> trio_tools.ToolCall:
    # Models send arguments as raw JSON text; run_tool_calls parses it.
    return trio_tools.ToolCall(call_id, name, json.dumps(arguments))


SCRIPT: list[tuple[str, list[trio_tools.ToolCall]]] = [
    (
        "Let me read your notes and to-do list, then write a summary.",
        [
            call("c1", "read_file", path="notes.md"),
            call("c2", "read_file", path="todo.md"),
            call("c3", "write_file", path="summary.md", text="Scopes nest. Search next."),
        ],
    ),
    (
        "Now the prior art: searching, fetching the reference, and writing a report.",
        [
            call("d1", "search", query="trio cancel scopes"),
            call("d2", "fetch_url", url="https://example.org/slow"),
            call("d3", "read_file", path="missing.md"),
            call("d4", "write_file", path="report.md", text="(the findings)"),
        ],
    ),
]

STOP_AFTER = 3.0
"""Seconds into step 2 at which the user presses stop."""


# -- the transcript -------------------------------------------------------------------------


def describe(result: trio_tools.ToolResult) -> str:
    code = result.code or "OK"
    synthetic = " (synthetic)" if result.synthetic else ""
    return f"{code}{synthetic}: {result.text!r}"


@attrs.define
class PrintingJournal:
    """A journal that prints each event as it is written, and keeps them in memory."""

    started: float
    memory: trio_tools.MemoryJournal = attrs.Factory(trio_tools.MemoryJournal)

    def stamp(self) -> str:
        return f"[{trio.current_time() - self.started:5.2f}s]"

    async def record_call(self, call: trio_tools.ToolCall) -> None:
        print(f"{self.stamp()} call    {call.call_id} {call.name} {call.arguments}")
        await self.memory.record_call(call)

    async def record_result(self, call: trio_tools.ToolCall, result: trio_tools.ToolResult) -> None:
        print(f"{self.stamp()} result  {call.call_id} {describe(result)}")
        await self.memory.record_result(call, result)


# -- the agent loop -------------------------------------------------------------------------


async def agent_turn() -> trio_tools.MemoryJournal:
    registry = build_registry()
    journal = PrintingJournal(started=trio.current_time())
    source = trio_tools.CancelSource()  # the turn's lifetime: the stop button

    def on_progress(call_id: str, progress: object) -> None:
        print(f"{journal.stamp()} ...     {call_id} {progress}")

    async def user_presses_stop(after: float) -> None:
        await trio.sleep(after)
        print(f"{journal.stamp()} [the user presses stop]")
        source.cancel("the user pressed stop")

    async with trio.open_nursery() as nursery:
        for number, (thought, calls) in enumerate(SCRIPT, start=1):
            await trio.sleep(0.5)  # the model thinks
            print(f"\nstep {number}: model: {thought}")
            if number == 2:
                nursery.start_soon(user_presses_stop, STOP_AFTER)
            outcome = await trio_tools.run_tool_calls(
                registry,
                calls,
                signal=source.signal,
                max_parallel=4,
                journal=journal,
                on_progress=on_progress,
            )
            # A real loop sends outcome.results (and outcome.contexts) back to the model.
            if outcome.aborted or outcome.halt is not None or outcome.concludes_turn:
                break
        print(f"\nturn over: {source.signal.reason.message if source.signal.reason else 'done'}")
        nursery.cancel_scope.cancel()  # the stop button is not needed any more
    return journal.memory


def main() -> None:
    journal = trio.run(agent_turn, clock=trio.testing.MockClock(autojump_threshold=0))
    print("\ntranscript:")
    results = {e.call.call_id: e.result for e in journal.events if e.result is not None}
    for event in journal.events:
        if event.kind == "call":
            result = results[event.call.call_id]
            print(f"  {event.call.call_id} {event.call.name:<10} {describe(result)}")
    journal.assert_balanced()
    count = sum(1 for e in journal.events if e.kind == "call")
    print(f"journal.assert_balanced(): the transcript is balanced ({count} calls, {count} results)")


if __name__ == "__main__":
    main()
