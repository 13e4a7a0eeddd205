"""Per-tool timeouts: async, thread and subprocess tools all stop cleanly at their deadline.

The registry enforces each tool's ``timeout`` by itself (``ToolRegistry(enforce_timeouts=True)``,
the default): it narrows the call's signal to the deadline and runs the body inside a cancel
scope bound to that signal.  So the deadline reaches:

* plain async code at its next checkpoint;
* a worker thread through ``trio.from_thread.check_cancelled()`` (the registry waits for the
  thread: ``to_thread.run_sync`` is never told to abandon it);
* a child process through ``trio.run_process``, which kills it and waits for it to exit.

Every call comes back as ``TOOL_TIMEOUT`` only once nothing it started is still running.

Run it with ``.venv/bin/python examples/timeouts.py``.
"""

from __future__ import annotations

import sys
import threading
import time

import trio

import trio_tools

TIMEOUT = 0.25
"""Seconds each tool may run; every tool below would otherwise run for a minute."""

registry = trio_tools.ToolRegistry()

# What each tool left behind, reported after its call returned.
thread_stopped = threading.Event()
processes: list[trio.Process] = []


@registry.tool(timeout=TIMEOUT)
async def slow_search() -> str:
    """Async code: cancelled at its next checkpoint."""
    await trio.sleep(60)
    return "found it"


def _crunch() -> int:
    try:
        total = 0
        for step in range(6000):  # about a minute of 10 ms steps
            trio.from_thread.check_cancelled()  # raises trio.Cancelled after the deadline
            time.sleep(0.01)
            total += step
        return total
    finally:
        thread_stopped.set()


@registry.tool(timeout=TIMEOUT)
async def crunch_numbers() -> str:
    """A worker thread that polls for cancellation between steps."""
    total = await trio.to_thread.run_sync(_crunch)  # awaited, never abandoned
    return str(total)


@registry.tool(timeout=TIMEOUT)
async def run_script() -> str:
    """A child process: killed at the deadline and waited for."""
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(trio.run_process, command)
        processes.append(process)
    return "script finished"


async def main() -> None:
    source = trio_tools.CancelSource()  # the caller owns the lifetime; never cancelled here
    for name in ("slow_search", "crunch_numbers", "run_script"):
        call = trio_tools.ToolExecutionInput(
            call_id=f"call-{name}", name=name, arguments={}, signal=source.signal
        )
        start = trio.current_time()
        result = await registry.execute(call)
        elapsed = trio.current_time() - start
        print(f"{name:<15} {result.code}  after {elapsed:.2f}s  {result.text}")
    print(f"worker thread stopped: {thread_stopped.is_set()}")
    print(f"child process exit code: {processes[0].returncode}")


if __name__ == "__main__":
    trio.run(main)
