"""Blocking code in a worker thread and a shell command, both stopped by the caller's signal.

The registry runs every tool body inside a cancel scope bound to the call's signal, and that
cancellation crosses the two boundaries a tool body most often crosses:

* ``trio.to_thread.run_sync``: Python cannot interrupt a thread, so the thread polls
  ``trio.from_thread.check_cancelled()`` between steps; it raises ``trio.Cancelled`` in the
  thread once the call is cancelled.  Trio *waits* for the thread to return (we never pass
  ``abandon_on_cancel=True``), so when the call's result arrives the thread has exited.
* A **sync tool** (a plain ``def``) is that, done by the registry: its body runs in a
  worker thread, polls ``ctx.check_cancelled()``, and calls ``ctx`` methods directly (they
  hop to the Trio thread).  It is never abandoned either.
* ``trio_tools.run_command``: a shell command is a process *tree* (here ``bash`` runs ``sh``,
  which runs ``sleep``).  ``trio.run_process`` would terminate only ``bash`` and leave
  ``sleep`` running; ``run_command`` starts the command in its own process group, and on
  cancellation sends SIGTERM to the whole group (SIGKILL after a grace period) and waits
  until none of it is running.  With ``ctx``, what the command printed so far is attached to
  the ``ABORTED`` result as an additional context, for the model to see.

Either way the registry awaits the body to quiescence: a result of ``ABORTED`` means "the
body started, side effects were possible, and nothing it started is still running".

Two rounds, each running the three tools side by side: first the user presses "stop" after
0.3 s; then the caller gives the step a 0.3 s deadline with ``trio_tools.open_signal``.  (For
a per-*tool* timeout with the ``TOOL_TIMEOUT`` code, see ``examples/timeouts.py``.)

Run it with ``.venv/bin/python examples/threads_and_processes.py``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import trio

import trio_tools

STOP_AFTER = 0.3
"""Seconds before the caller cancels; each tool below would otherwise run for a minute."""

registry = trio_tools.ToolRegistry()

# What each tool left behind, checked after its call returned.
thread_exited = threading.Event()
sync_thread_exited = threading.Event()
SCRIPT = 'echo "[child] group $$ started"; sh -c "sleep 60; true"; echo never printed'


def crunch(ctx: trio_tools.ToolRunContext) -> int:
    """Blocking work in a worker thread, a 50 ms step at a time."""
    total = 0
    try:
        for step in range(1200):  # about a minute
            trio.from_thread.check_cancelled()  # raises trio.Cancelled once cancelled
            time.sleep(0.05)
            total += step
            if step % 2 == 1:
                # Progress goes back through the Trio loop, to the caller's on_progress.
                trio.from_thread.run_sync(ctx.report_progress, f"step {step + 1}")
        return total
    finally:
        print("  [thread] exiting", flush=True)
        thread_exited.set()


@registry.tool
async def crunch_numbers(args: object, ctx: trio_tools.ToolRunContext) -> str:
    """Sum numbers in a worker thread that polls for cancellation."""
    total = await trio.to_thread.run_sync(crunch, ctx)  # awaited, never abandoned
    return f"total {total}"


@registry.tool
def count_words(*, ctx: trio_tools.ToolRunContext) -> str:
    """A sync tool: the registry runs it in a worker thread, a 50 ms step at a time."""
    words = 0
    try:
        for step in range(1200):  # about a minute
            ctx.check_cancelled()  # raises trio.Cancelled once the call is cancelled
            time.sleep(0.05)
            words += 7
            if step % 2 == 1:
                ctx.report_progress(f"{words} words")  # hops to the Trio thread
        return f"{words} words"
    finally:
        print("  [sync tool thread] exiting", flush=True)
        sync_thread_exited.set()


@registry.tool
async def run_script(args: object, ctx: trio_tools.ToolRunContext) -> str:
    """Run a shell script; cancellation stops its whole process tree and waits for it."""
    result = await trio_tools.run_command(["bash", "-c", SCRIPT], ctx=ctx, grace_period=2.0)
    return f"script exited with {result.returncode}"


def running_in_group(contexts: tuple[trio_tools.AdditionalContext, ...]) -> str:
    """How many processes of the script's group still run (Linux's /proc tells us)."""
    words = " ".join(context.text for context in contexts).split()
    if "group" not in words or not os.path.isdir("/proc"):
        return "unknown"
    pgid = words[words.index("group") + 1]
    running = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as file:
                fields = file.read().rpartition(")")[2].split()
        except OSError:
            continue  # exited while we looked
        running += fields[2] == pgid and fields[0] not in ("Z", "X")  # zombies are not running
    return str(running)


def progress_printer(name: str) -> Callable[[object], None]:
    def on_progress(progress: object) -> None:
        print(f"  [progress] {name}: {progress}", flush=True)

    return on_progress


async def run_both(step_signal: trio_tools.CancelSignal) -> dict[str, trio_tools.ToolResult]:
    """Run the tools side by side with one signal; return their results by name."""
    results: dict[str, trio_tools.ToolResult] = {}

    async def one(name: str) -> None:
        call = trio_tools.ToolExecutionInput(
            call_id=f"call-{name}",
            name=name,
            arguments={},
            signal=step_signal,
            on_progress=progress_printer(name) if name != "run_script" else None,
        )
        results[name] = await registry.execute(call)

    async with trio.open_nursery() as nursery:
        for name in ("crunch_numbers", "count_words", "run_script"):
            nursery.start_soon(one, name)
    return results


def report(results: dict[str, trio_tools.ToolResult], started: float) -> None:
    print(f"  results after {trio.current_time() - started:.1f}s:")
    for name in sorted(results):
        result = results[name]
        print(f"    {name:<15} {result.code}  {result.text}")
    print(f"  thread exited before the result: {thread_exited.is_set()}")
    print(f"  sync tool's thread exited before the result: {sync_thread_exited.is_set()}")
    contexts = results["run_script"].additional_contexts
    for context in contexts:
        print(f"  [{context.source}] " + context.text.replace("\n", "\n  " + " " * 15))
    print(f"  processes of the script's group still running: {running_in_group(contexts)}")


async def press_stop_later(source: trio_tools.CancelSource) -> None:
    await trio.sleep(STOP_AFTER)
    print('  [user] presses "stop"', flush=True)
    source.cancel("the user pressed stop")


async def main() -> None:
    print(f'round 1: the user presses "stop" after {STOP_AFTER:g}s')
    source = trio_tools.CancelSource()
    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(press_stop_later, source)
        results = await run_both(source.signal)
    report(results, started)

    print(f"round 2: the caller gives the step a {STOP_AFTER:g}s deadline")
    thread_exited.clear()
    sync_thread_exited.clear()
    source = trio_tools.CancelSource()  # a fresh lifetime: the old one has fired
    started = trio.current_time()
    async with trio_tools.open_signal(source.signal, timeout=STOP_AFTER) as step_signal:
        results = await run_both(step_signal)
        print(f"  the step's signal fired with {step_signal.reason}")
    report(results, started)


if __name__ == "__main__":
    trio.run(main)
