"""The child process of the journal crash tests (``tests/test_journal_crash.py``).

``python journal_child.py run CONFIG`` runs the batches of a plan on a durable journal and
reports every journal write on stdout (one JSON line each, flushed) after the write
returned.  With ``kill_after=k`` it SIGKILLs itself right after the k-th write returned (and
was reported); the test may also SIGKILL it from outside at any moment.  Each tool body
first writes its marker file (flushed and fsynced), then does what the plan says.

``python journal_child.py recover CONFIG`` opens each journal of ``targets`` in this fresh
process, calls ``recover()`` twice, reads ``history()``, reopens the journal and calls
``recover()`` once more, and prints one JSON line per target.

The journal backends are named in ``OPENERS`` (from ``helpers_journal``): a new backend
adds its opener there and its target factory in ``conftest.journal_target``, and the whole
crash suite runs on it.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import trio
from helpers_journal import open_journal_at

import trio_tools
from trio_tools import ToolCall, ToolResult, ToolRunContext

OPENERS: dict[str, Callable[[str, str], AbstractAsyncContextManager[Any]]] = {
    backend: functools.partial(open_journal_at, backend) for backend in ("sqlite", "postgres")
}


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class ReportingJournal:
    """Forwards every write to the real journal; reports it once it returned."""

    def __init__(self, inner: Any, kill_after: int | None) -> None:
        self._inner = inner
        self._kill_after = kill_after
        self._writes = 0

    def _done(self, method: str, call: ToolCall | None, result: ToolResult | None) -> None:
        self._writes += 1
        emit(
            {
                "write": self._writes,
                "method": method,
                "call_id": None if call is None else call.call_id,
                "result": None if result is None else result.to_dict(),
            }
        )
        if self._kill_after == self._writes:
            os.kill(os.getpid(), signal.SIGKILL)

    async def record_batch(self, calls: tuple[ToolCall, ...]) -> None:
        await self._inner.record_batch(calls)
        self._done("record_batch", None, None)

    async def record_call(self, call: ToolCall) -> None:
        await self._inner.record_call(call)
        self._done("record_call", call, None)

    async def record_dispatch(self, call: ToolCall) -> None:
        await self._inner.record_dispatch(call)
        self._done("record_dispatch", call, None)

    async def record_settled(self, call: ToolCall, result: ToolResult) -> None:
        await self._inner.record_settled(call, result)
        self._done("record_settled", call, result)

    async def record_result(self, call: ToolCall, result: ToolResult) -> None:
        await self._inner.record_result(call, result)
        self._done("record_result", call, result)


def make_registry(markers: str) -> trio_tools.ToolRegistry:
    """One raw tool, ``step``: marker file first; then ``sleep``, ``fail``, ``exclusive``."""
    registry = trio_tools.ToolRegistry()

    def mark(call_id: str) -> None:
        with open(os.path.join(markers, call_id), "w") as file:
            file.write("started\n")
            file.flush()
            os.fsync(file.fileno())

    def parallel(args: object) -> bool:
        return not (isinstance(args, dict) and args.get("exclusive", False))

    @registry.tool(concurrency_safe=parallel)
    async def step(raw: object, ctx: ToolRunContext) -> str:
        mark(ctx.call_id)
        args: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
        await trio.sleep(args.get("sleep", 0))
        if args.get("fail"):
            raise RuntimeError(f"{ctx.call_id} failed")
        return f"done {ctx.call_id}"

    return registry


async def run(config: dict[str, Any]) -> None:
    registry = make_registry(config["markers"])
    opener = OPENERS[config["backend"]]
    async with opener(config["target"], config["session"]) as inner:
        journal = ReportingJournal(inner, config.get("kill_after"))
        source = trio_tools.CancelSource()
        for batch in config["batches"]:
            calls = [ToolCall(call_id, name, arguments) for call_id, name, arguments in batch]
            await trio_tools.run_tool_calls(registry, calls, signal=source.signal, journal=journal)
            emit({"batch_done": [call.call_id for call in calls]})
    emit({"finished": True})


async def recover(config: dict[str, Any]) -> None:
    opener = OPENERS[config["backend"]]
    for target in config["targets"]:
        async with opener(target, config["session"]) as journal:
            first = await journal.recover()
            second = await journal.recover()
            history = await journal.history()
        async with opener(target, config["session"]) as journal:
            reopened = await journal.recover()
        emit(
            {
                "target": target,
                "recovered": [outcome_json(outcome) for outcome in first],
                "same_twice": first == second,
                "same_after_reopen": first == reopened,
                "history": [
                    {
                        "calls": [call.to_dict() for call in record.calls],
                        "results": [
                            None if result is None else result.to_dict()
                            for result in record.results
                        ],
                        "dispatched": list(record.dispatched),
                        "complete": record.complete,
                    }
                    for record in history
                ],
            }
        )


def outcome_json(outcome: trio_tools.BatchOutcome) -> list[dict[str, Any]]:
    return [result.to_dict() for result in outcome.results]


def main() -> None:
    mode, config = sys.argv[1], json.loads(sys.argv[2])
    trio.run(run if mode == "run" else recover, config)


if __name__ == "__main__":
    main()
