"""Ask the person at the terminal before a dangerous tool runs, and let "stop" interrupt it.

The dangerous tools are defined with ``requires_approval=True``, so the registry asks its
approver before their bodies run (the end of the pre-execute chain answers ``Ask()``
instead of ``Allow()``); here the approver is ``trio_tools.console_approver()``.  It shows
the call (the tool's name and its arguments as JSON) and reads one answer from stdin: ``y``
grants the call, ``n`` (or Enter) rejects it (``DENIED``), ``a`` grants it and every later
call of the same tool without asking again, and end of input answers ``"cancelled"`` (also
``DENIED``: nobody cancelled the call, the approval just could not happen).

The approval prompt runs inside the registry's *gate*, which is bound to the caller's
signal.  When the caller's stop source fires while the prompt waits, the read is interrupted
at once and the call comes back ``ABORTED_BEFORE_DISPATCH``: the tool body never ran, so
nothing was emptied.  The last call below shows it: nobody answers, the user presses "stop"
half a second later.

Why this needs care: a thread blocked in ``read()`` on a terminal cannot be interrupted, so
``trio.to_thread.run_sync(input)`` would either ignore "stop" until someone presses Enter or,
with ``abandon_on_cancel=True``, leave a thread behind that swallows the next line typed.
And reading through ``trio.lowlevel.FdStream`` switches the terminal to non-blocking mode:
a terminal's stdin and stdout share that flag, so ``print`` can then fail with
``BlockingIOError``.  ``console_approver`` waits for stdin in Trio's I/O loop and reads only
once a line is there, so a stop interrupts the wait, no input is lost, and the terminal stays
blocking.

Try it: ``.venv/bin/python examples/approval.py`` and answer ``y``, ``n``, ``a``, then wait.
Or feed it from a pipe that stays open, so that the last prompt waits and is interrupted:
``(printf 'y\\nn\\na\\n'; sleep 2) | .venv/bin/python examples/approval.py`` (once a pipe is
closed, every prompt reads end of input instead).
"""

from __future__ import annotations

import trio

import trio_tools

STOP_AFTER = 0.5
"""Seconds after the last prompt appears when the user presses "stop"."""


registry = trio_tools.ToolRegistry()
deleted: list[str] = []


@registry.tool(requires_approval=True)
async def delete_file(path: str) -> str:
    """Delete a file (this demo only pretends to).

    Args:
        path: The file to delete.
    """
    deleted.append(path)
    return f"deleted {path}"


@registry.tool(requires_approval=True)
async def empty_trash() -> str:
    """Empty the trash (this demo only pretends to)."""
    deleted.append("trash")
    return "trash emptied"


registry.set_approver(trio_tools.console_approver())

CALLS: list[tuple[str, object]] = [
    ("delete_file", {"path": "notes.txt"}),
    ("delete_file", {"path": "report.pdf"}),
    ("delete_file", {"path": "draft.txt"}),
    ("delete_file", {"path": "old.log"}),
    ("empty_trash", {}),
]


def show(result: trio_tools.ToolResult) -> None:
    print(f"  -> {result.code or 'OK'}: {result.text}")


async def press_stop_later(source: trio_tools.CancelSource, delay: float) -> None:
    await trio.sleep(delay)
    source.cancel("the user pressed stop")


async def main() -> None:
    async with trio.open_nursery() as nursery:
        for number, (name, arguments) in enumerate(CALLS, start=1):
            source = trio_tools.CancelSource()  # the caller owns each call's lifetime
            if number == len(CALLS):
                print(f'call {number}: nobody answers; "stop" is pressed {STOP_AFTER:g}s later')
                nursery.start_soon(press_stop_later, source, STOP_AFTER)
            else:
                print(f"call {number}:")
            call = trio_tools.ToolExecutionInput(
                call_id=f"call-{number}", name=name, arguments=arguments, signal=source.signal
            )
            show(await registry.execute(call))
    print(f"what the tool bodies actually deleted: {deleted}")


if __name__ == "__main__":
    trio.run(main)
