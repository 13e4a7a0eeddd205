"""Ask the person at the terminal before a dangerous tool runs, and let "stop" interrupt it.

``delete_file`` is defined with ``requires_approval=True``, so the registry asks its
approver before the body runs (the end of the pre-execute chain answers ``Ask()`` instead
of ``Allow()``).  The approver prints a prompt and reads one line from stdin: ``y`` grants the call,
anything else rejects it (``DENIED``), and end-of-input answers ``"cancelled"`` (also
``DENIED``: nobody cancelled the call, the approval just could not happen).

The approval prompt runs inside the registry's *gate*, which is bound to the caller's
signal.  When the caller's stop source fires while the prompt waits, the read is interrupted
at once and the call comes back ``ABORTED_BEFORE_DISPATCH``: the tool body never ran, so
nothing was deleted.  The third call below shows it: nobody answers, the user presses
"stop" half a second later.

Why stdin is read through ``trio.lowlevel.FdStream`` and not in a thread: a thread blocked
in ``read()`` on a pipe or a terminal cannot be interrupted.  ``trio.to_thread.run_sync``
would either wait for it (the prompt ignores "stop" until someone presses Enter) or, with
``abandon_on_cancel=True``, leave the thread behind, still holding stdin, to swallow the
next line the user types.  ``FdStream`` reads a *duplicate* of fd 0 in non-blocking mode
through Trio's I/O loop, so a cancelled read just stops waiting and no input is lost: the
line buffer below lives across prompts, and ``receive_some`` is atomic under cancellation.
(The non-blocking flag is shared with fd 0 while the stream is open; closing the stream
restores it.)  FdStream exists on Unix only; on Windows this falls back to a thread, whose
prompt cannot be interrupted.

Try it: ``.venv/bin/python examples/approval.py`` and answer ``y``, then ``n``, then wait.
Or feed it from a pipe that stays open, so that the third prompt waits and is interrupted:
``(printf 'y\\nn\\n'; sleep 2) | .venv/bin/python examples/approval.py`` (once a pipe is
closed, every prompt reads end of input instead).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import TracebackType
from typing import Self, cast

import trio

import trio_tools

STOP_AFTER = 0.5
"""Seconds after the third prompt appears when the user presses "stop"."""


class LineReader:
    """Lines from stdin, read without blocking the Trio loop; cancellable at any point."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._eof = False
        # A terminal echoes what the user types; piped input is echoed by the prompt.
        self.echo = not os.isatty(sys.stdin.fileno())
        self._stream: trio.lowlevel.FdStream | None = None
        if sys.platform != "win32":
            # A duplicate: closing the stream must not close the process's own stdin.
            self._stream = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._stream is not None:
            await self._stream.aclose()  # also restores fd 0's blocking mode

    async def readline(self) -> str | None:
        """The next line without its newline, or ``None`` at end of input."""
        while b"\n" not in self._buffer and not self._eof:
            if self._stream is None:  # pragma: no cover - Windows
                chunk = (await trio.to_thread.run_sync(sys.stdin.buffer.readline)) or b""
            else:
                chunk = await self._stream.receive_some(4096)
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True
        if not self._buffer:
            return None
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer[:] = rest
        return line.decode(errors="replace").strip()


def terminal_approver(lines: LineReader) -> trio_tools.Approver:
    """An approver that asks on the terminal."""

    async def approve(request: trio_tools.ApprovalRequest) -> trio_tools.ApprovalAnswer:
        execution = request.execution
        why = f"{request.reason} " if request.reason else ""
        print(f"  ? {why}Allow {execution.name}({dict_text(execution.arguments)})?")
        print("    [y/N] > ", end="", flush=True)
        try:
            answer = await lines.readline()
        finally:
            if execution.signal.cancelled:
                # The registry's gate scope interrupted the read; no need to catch anything.
                reason = execution.signal.reason
                print(f"(interrupted: {reason.message if reason else '?'})")
        if answer is None:
            print("(end of input)")
            return "cancelled"
        if lines.echo:
            print(answer)
        return "granted" if answer.lower() in ("y", "yes") else "rejected"

    return approve


def dict_text(arguments: object) -> str:
    """``path='x'`` for the frozen arguments ``{"path": "x"}``."""
    if isinstance(arguments, Mapping):
        items = cast("Mapping[str, object]", arguments)
        return ", ".join(f"{key}={value!r}" for key, value in items.items())
    return repr(arguments)


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


def show(result: trio_tools.ToolResult) -> None:
    print(f"  -> {result.code or 'OK'}: {result.text}")


async def press_stop_later(source: trio_tools.CancelSource, delay: float) -> None:
    await trio.sleep(delay)
    source.cancel("the user pressed stop")


async def main() -> None:
    async with LineReader() as lines:
        registry.set_approver(terminal_approver(lines))
        async with trio.open_nursery() as nursery:
            for number, path in enumerate(["notes.txt", "report.pdf", "photos/"], start=1):
                source = trio_tools.CancelSource()  # the caller owns each call's lifetime
                if number == 3:
                    print(f'call {number}: nobody answers; "stop" is pressed {STOP_AFTER:g}s later')
                    nursery.start_soon(press_stop_later, source, STOP_AFTER)
                else:
                    print(f"call {number}:")
                call = trio_tools.ToolExecutionInput(
                    call_id=f"call-{number}",
                    name="delete_file",
                    arguments={"path": path},
                    signal=source.signal,
                )
                show(await registry.execute(call))
    print(f"files the tool body actually deleted: {deleted}")


if __name__ == "__main__":
    trio.run(main)
