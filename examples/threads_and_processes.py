"""Blocking code in a worker thread and a child process, both stopped by the caller's signal.

The registry runs every tool body inside a cancel scope bound to the call's signal, and Trio
carries that cancellation across the two boundaries a tool body most often crosses:

* ``trio.to_thread.run_sync``: Python cannot interrupt a thread, so the thread polls
  ``trio.from_thread.check_cancelled()`` between steps; it raises ``trio.Cancelled`` in the
  thread once the call is cancelled.  Trio *waits* for the thread to return (we never pass
  ``abandon_on_cancel=True``), so when the call's result arrives the thread has exited.
* ``trio.run_process``: on cancellation Trio terminates the child (SIGTERM, then SIGKILL
  after five seconds) and waits for it to exit, so the result arrives with a return code.
  Only that child: processes it started in turn (a shell's children) are not signalled.

Either way the registry awaits the body to quiescence: a result of ``ABORTED`` means "the
body started, side effects were possible, and nothing it started is still running".

Two rounds, each running both tools side by side: first the user presses "stop" after
0.3 s; then the caller gives the step a 0.3 s deadline with ``trio_tools.open_signal``.  (For
a per-*tool* timeout with the ``TOOL_TIMEOUT`` code, see ``examples/timeouts.py``.)

Run it with ``.venv/bin/python examples/threads_and_processes.py``.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

import trio

import trio_tools

STOP_AFTER = 0.3
"""Seconds before the caller cancels; each tool below would otherwise run for a minute."""

registry = trio_tools.ToolRegistry()

# What each tool left behind, checked after its call returned.
thread_exited = threading.Event()
processes: list[trio.Process] = []


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
async def run_script(args: object, ctx: trio_tools.ToolRunContext) -> str:
    """Run a child process; cancellation terminates it and waits for it to exit."""
    code = "import time; print('  [child] started', flush=True); time.sleep(60)"
    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(trio.run_process, [sys.executable, "-c", code])
        processes.append(process)
    return "script finished"


def on_progress(progress: object) -> None:
    print(f"  [progress] crunch_numbers: {progress}", flush=True)


async def run_both(step_signal: trio_tools.CancelSignal) -> dict[str, trio_tools.ToolResult]:
    """Run both tools side by side with one signal; return their results by name."""
    results: dict[str, trio_tools.ToolResult] = {}

    async def one(name: str) -> None:
        call = trio_tools.ToolExecutionInput(
            call_id=f"call-{name}",
            name=name,
            arguments={},
            signal=step_signal,
            on_progress=on_progress if name == "crunch_numbers" else None,
        )
        results[name] = await registry.execute(call)

    async with trio.open_nursery() as nursery:
        for name in ("crunch_numbers", "run_script"):
            nursery.start_soon(one, name)
    return results


def report(results: dict[str, trio_tools.ToolResult], started: float) -> None:
    print(f"  results after {trio.current_time() - started:.1f}s:")
    for name in sorted(results):
        result = results[name]
        text = " ".join(b.text for b in result.content if isinstance(b, trio_tools.TextBlock))
        print(f"    {name:<15} {result.code}  {text}")
    print(f"  thread exited before the result: {thread_exited.is_set()}")
    returncode = processes[-1].returncode
    assert returncode is not None  # run_process waited for the child
    how = f" ({signal.Signals(-returncode).name})" if returncode < 0 else ""
    print(f"  child process waited for: returncode={returncode}{how}")


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
    source = trio_tools.CancelSource()  # a fresh lifetime: the old one has fired
    started = trio.current_time()
    async with trio_tools.open_signal(source.signal, timeout=STOP_AFTER) as step_signal:
        results = await run_both(step_signal)
        print(f"  the step's signal fired with {step_signal.reason}")
    report(results, started)


if __name__ == "__main__":
    trio.run(main)
