"""A turn that survives its process being killed: a SQLite journal and recover().

The agent turn runs in a child process (this file with ``--turn``) and journals its batch
in a SQLite file.  Mid-batch the parent kills it with SIGKILL: one tool is still running,
one has finished (but its result waits behind the running one), one never started.  The
parent then opens the journal, calls ``recover()`` and prints the repaired transcript: one
result per call, each saying what is safe to do next.

Run it: .venv/bin/python examples/durable_agent.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

import trio

import trio_tools
from trio_tools import TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH, ToolCall, ToolResult

SESSION = "agent-1"
CALLS = [
    ToolCall("call_1", "search_flights", '{"to": "Lisbon"}'),
    ToolCall("call_2", "get_weather", '{"city": "Lisbon"}'),
    ToolCall("call_3", "book_hotel", '{"city": "Lisbon", "nights": 3}'),
]


# -- the agent turn (the child process) ---------------------------------------------------


def say(text: str) -> None:
    print(f"[turn] {text}", flush=True)


class Narrated:
    """Forwards to the real journal and says which results are durable (for the demo)."""

    def __init__(self, journal: trio_tools.SqliteJournal) -> None:
        self._journal = journal

    async def record_batch(self, calls: tuple[ToolCall, ...]) -> None:
        await self._journal.record_batch(calls)

    async def record_call(self, call: ToolCall) -> None:
        await self._journal.record_call(call)

    async def record_dispatch(self, call: ToolCall) -> None:
        await self._journal.record_dispatch(call)

    async def record_settled(self, call: ToolCall, result: ToolResult) -> None:
        await self._journal.record_settled(call, result)
        say(f"{call.name} finished; its result is durable")

    async def record_result(self, call: ToolCall, result: ToolResult) -> None:
        await self._journal.record_result(call, result)


async def turn(path: str) -> None:
    registry = trio_tools.ToolRegistry()

    @registry.tool(concurrency_safe=True)
    async def search_flights(args: object, ctx: trio_tools.ToolRunContext) -> str:
        say("search_flights is waiting for the airline...")
        await trio.sleep_forever()  # the process dies while it waits
        return "never"

    @registry.tool(concurrency_safe=True)
    async def get_weather(args: object, ctx: trio_tools.ToolRunContext) -> str:
        return "Lisbon: sunny, 24 C"

    @registry.tool  # exclusive: it waits until the calls before it are done
    async def book_hotel(args: object, ctx: trio_tools.ToolRunContext) -> str:
        return "booked"

    async with trio_tools.open_sqlite_journal(path, session=SESSION) as journal:
        await trio_tools.run_tool_calls(
            registry, CALLS, signal=trio_tools.CancelSource().signal, journal=Narrated(journal)
        )


# -- the supervisor (the parent process) --------------------------------------------------


ADVICE = {
    None: "keep it: the real result",
    TOOL_ABORTED: "it may have run: check its effects before retrying",
    TOOL_ABORTED_BEFORE_DISPATCH: "it never ran: safe to retry",
}


async def supervise() -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "agent.db")
        child = await trio.lowlevel.open_process(
            [sys.executable, __file__, "--turn", path], stdout=subprocess.PIPE
        )
        try:
            assert child.stdout is not None
            output = b""
            # Wait until one call is running and another has finished, then kill the turn.
            while b"waiting" not in output or b"durable" not in output:
                data = await child.stdout.receive_some()
                if not data:
                    raise RuntimeError("the turn ended early")
                output += data
            print(output.decode().rstrip("\n"))
            child.send_signal(signal.SIGKILL)
            await child.wait()
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
            await child.stdout.aclose()
        print(f"turn killed with SIGKILL: {child.returncode == -signal.SIGKILL}")

        async with trio_tools.open_sqlite_journal(path, session=SESSION) as journal:
            (before,) = await journal.history()
            print(f"batch complete before recovery: {before.complete}")
            (outcome,) = await journal.recover()
            again = await journal.recover()
            print(f"recover() again returns the same: {again == (outcome,)}")
        print("repaired transcript:")
        for call, result in zip(CALLS, outcome.results, strict=True):
            code = result.code or "ok"
            kind = "synthetic" if result.synthetic else "real"
            text = " ".join(b.text for b in result.content if isinstance(b, trio_tools.TextBlock))
            print(f"  {call.name:<15} {code:<24} {kind:<9} {text}")
            print(f"  {'':<15} -> {ADVICE[result.code]}")


def main() -> None:
    if sys.argv[1:2] == ["--turn"]:
        trio.run(turn, sys.argv[2])
    else:
        trio.run(supervise)


if __name__ == "__main__":
    main()
