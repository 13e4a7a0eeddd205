"""Ctrl+C as the stop button: a batch stopped mid-way still leaves a balanced transcript.

An agent's transcript must answer every tool call the model made, exactly once and in
order (the next model request is rejected otherwise); ``MemoryJournal.assert_balanced()``
checks that.  Three ways a batch is stopped:

1. **The step's signal** (a "stop" button): started calls are drained and committed, every
   unstarted call gets a synthetic ``ABORTED_BEFORE_DISPATCH`` result, and
   ``run_tool_calls`` returns normally with ``outcome.aborted`` set.

2. **Ctrl+C once**, inside ``trio_tools.open_sigint_cancel(source)``: the first Ctrl+C
   cancels the step's source, so the batch stops exactly as it does for the stop button,
   and the program goes on (an agent REPL would ask for the next prompt).

3. **Ctrl+C twice**: when a stop does not take effect (here a tool's cleanup takes its
   time), the second Ctrl+C raises ``KeyboardInterrupt`` as usual.  That is not a
   cancellation the batch owns, so it is never swallowed: Trio cancels everything under
   ``trio.run`` and the interrupt propagates.  On the way out every started call still
   publishes its one result (``ABORTED``), and the scheduler commits those results and
   closes the calls it never started with synthetic results, shielded, before the interrupt
   leaves ``run_tool_calls``.  The journal is balanced when ``trio.run`` raises.

To make the demo repeatable, a task raises SIGINT itself with ``signal.raise_signal``, as
the terminal does when you press Ctrl+C.

Run it with ``.venv/bin/python examples/ctrl_c.py``.
"""

from __future__ import annotations

import signal

import trio

import trio_tools

registry = trio_tools.ToolRegistry()


@registry.tool(concurrency_safe=True)
async def search(query: str, *, ctx: trio_tools.ToolRunContext) -> str:
    """Search the web (takes a while, and a moment to stop)."""
    try:
        await trio.sleep(1.0)
    finally:
        if ctx.signal.cancelled:
            with trio.CancelScope(shield=True):  # saving partial results must not be cut
                await trio.sleep(CLEANUP)
    return "3 hits"


@registry.tool(concurrency_safe=True)
async def read_file(path: str) -> str:
    """Read a file (quick)."""
    await trio.sleep(0.01)
    return "file contents"


@registry.tool
async def write_file(path: str) -> str:
    """Write a file: not concurrency-safe, so it waits for the calls before it."""
    return "written"


CALLS = [
    trio_tools.ToolCall("call-1", "read_file", '{"path": "notes.txt"}'),
    trio_tools.ToolCall("call-2", "search", '{"query": "trio"}'),
    trio_tools.ToolCall("call-3", "search", '{"query": "attrs"}'),
    trio_tools.ToolCall("call-4", "write_file", '{"path": "summary.txt"}'),
    trio_tools.ToolCall("call-5", "read_file", '{"path": "summary.txt"}'),
]
INTERRUPT_AFTER = 0.2
CLEANUP = 0.3
"""Seconds a cancelled search takes to stop; the second Ctrl+C comes before that."""


def print_journal(journal: trio_tools.MemoryJournal) -> None:
    for event in journal.events:
        if event.result is None:
            print(f"    call    {event.call.call_id} {event.call.name}")
        else:
            how = event.result.code or "OK"
            synthetic = " (synthetic)" if event.result.synthetic else ""
            print(f"    result  {event.call.call_id} {how}{synthetic}")
    journal.assert_balanced()
    print("  the journal is balanced")


async def stop_button_round() -> None:
    journal = trio_tools.MemoryJournal()
    source = trio_tools.CancelSource()

    async def press_stop() -> None:
        await trio.sleep(INTERRUPT_AFTER)
        source.cancel("the user pressed stop")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(press_stop)
        outcome = await trio_tools.run_tool_calls(
            registry, CALLS, signal=source.signal, journal=journal
        )
    print(f"  run_tool_calls returned; aborted={outcome.aborted}")
    print_journal(journal)


async def press_ctrl_c(delay: float) -> None:
    await trio.sleep(delay)
    print("  [user] presses Ctrl+C", flush=True)
    signal.raise_signal(signal.SIGINT)


async def ctrl_c_once_round() -> None:
    journal = trio_tools.MemoryJournal()
    source = trio_tools.CancelSource()
    with trio_tools.open_sigint_cancel(source, reason="the user pressed Ctrl+C"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(press_ctrl_c, INTERRUPT_AFTER)
            outcome = await trio_tools.run_tool_calls(
                registry, CALLS, signal=source.signal, journal=journal
            )
    print(f"  run_tool_calls returned; aborted={outcome.aborted}; reason: {source.signal.reason}")
    print_journal(journal)


async def ctrl_c_twice_round(journal: trio_tools.MemoryJournal) -> None:
    source = trio_tools.CancelSource()
    with trio_tools.open_sigint_cancel(source, reason="the user pressed Ctrl+C"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(press_ctrl_c, INTERRUPT_AFTER)
            nursery.start_soon(press_ctrl_c, INTERRUPT_AFTER + CLEANUP / 3)
            await trio_tools.run_tool_calls(registry, CALLS, signal=source.signal, journal=journal)
    raise AssertionError("unreachable: the batch was interrupted")


def main() -> None:
    print("round 1: the user presses stop (the step's signal fires)")
    trio.run(stop_button_round)

    print("round 2: the user presses Ctrl+C once")
    trio.run(ctrl_c_once_round)

    print("round 3: the stop takes a while, the user presses Ctrl+C again")
    journal = trio_tools.MemoryJournal()
    try:
        trio.run(ctrl_c_twice_round, journal)
    except* KeyboardInterrupt:
        # Trio raises it in whichever task was running, here inside the demo's own nursery:
        # hence a group, and `except*`.
        print("  KeyboardInterrupt propagated out of trio.run, as it should")
    print_journal(journal)


if __name__ == "__main__":
    main()
