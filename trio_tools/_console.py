"""An approver that asks the person at the terminal, and that a stop interrupts."""

from __future__ import annotations

import errno
import os
import sys
from typing import Protocol, TextIO, final

import trio

from ._decisions import ApprovalAnswer, ApprovalRequest
from ._execution import ToolExecution
from ._json import to_compact_json
from ._registry import Approver

__all__ = ["console_approver"]

_READ_SIZE = 4096

_ANSWERS: dict[str, str] = {
    "y": "y",
    "yes": "y",
    "n": "n",
    "no": "n",
    "": "n",  # Enter alone: the default is no
    "a": "a",
    "always": "a",
}


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


def console_approver(
    *, stdin: _HasFileno | int | None = None, stdout: TextIO | None = None
) -> Approver:
    """An approver that shows each call on ``stdout`` and reads y / n / a from ``stdin``.

    The prompt shows the reason from the pre-execute hook's ``Ask``, the tool's name and its
    arguments as compact JSON.  Answers (case-insensitive): ``y`` / ``yes`` grants the call;
    ``n`` / ``no`` or an empty line rejects it (``DENIED``); ``a`` / ``always`` grants it and
    every later call of the same tool for the approver's lifetime, without asking again;
    anything else asks again.  End of input answers ``"cancelled"`` (a ``DENIED`` call: the
    approval could not happen).  Prompts are asked one at a time: concurrent calls wait
    their turn.

    **Interruption.**  The prompt waits inside a scope bound to the call's signal: when the
    caller cancels (a stop button, Ctrl-C under :func:`open_sigint_cancel`), the wait ends at
    once, the prompt line is closed with ``(interrupted: <reason>)`` and the answer is
    ``"cancelled"`` (the call comes back ``ABORTED_BEFORE_DISPATCH``).  Nothing is lost: no
    thread is left reading, and a line typed later answers the next prompt.

    **The terminal stays blocking.**  ``stdin`` is read by waiting for it to become readable
    in Trio's I/O loop and then reading what is there; its file descriptor is never switched
    to non-blocking mode.  (A terminal's stdin, stdout and stderr usually share one open file
    description, so the non-blocking flag of ``trio.lowlevel.FdStream`` on stdin would make
    ``print`` to stdout fail with ``BlockingIOError`` when the terminal is busy.)  The file
    descriptor is read directly, bypassing Python's buffer of ``sys.stdin``.  Unix only.

    Args:
        stdin: a file object or a file descriptor to read answers from (default
            ``sys.stdin``, looked up at each prompt).  Input from a pipe or a file is echoed
            after the prompt, so a transcript reads like a terminal session.
        stdout: a text stream for the prompts (default ``sys.stdout``, looked up at each
            prompt).
    """
    return _ConsoleApprover(stdin, stdout)


@final
class _ConsoleApprover:
    """The state behind :func:`console_approver`: the input buffer and the always-allowed."""

    __slots__ = ("_always", "_buffer", "_eof", "_lock", "_stdin", "_stdout")

    def __init__(self, stdin: _HasFileno | int | None, stdout: TextIO | None) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._buffer = bytearray()  # read past the current line: the next prompt's answer
        self._eof = False
        self._always: set[str] = set()
        self._lock = trio.Lock()

    async def __call__(self, request: ApprovalRequest) -> ApprovalAnswer:
        execution = request.execution
        name = execution.name
        async with self._lock:
            out = self._stdout if self._stdout is not None else sys.stdout
            if name in self._always:
                _write(out, f"  {name} {_arguments(execution.arguments)}: allowed (always)\n")
                return "granted"
            fd = self._fd()
            echo = not os.isatty(fd)
            if request.reason:
                _write(out, f"? {request.reason}\n")
            _write(out, f"  {name} {_arguments(execution.arguments)}\n")
            while True:
                _write(out, "  allow? [y]es / [N]o / [a]lways for this tool > ")
                try:
                    with execution.signal.open_scope() as scope:
                        line = await self._readline(fd)
                except BaseException:
                    # The registry's gate scope, bound to the same signal, caught it first;
                    # or some other interruption: either way, close the prompt's line.
                    _write(out, _interrupted(execution) + "\n")
                    raise
                if scope.cancelled_caught:  # called outside a registry's gate
                    _write(out, _interrupted(execution) + "\n")
                    return "cancelled"
                if line is None:
                    _write(out, "(end of input)\n")
                    return "cancelled"
                if echo:
                    _write(out, f"{line}\n")
                answer = _ANSWERS.get(line.strip().lower())
                if answer == "y":
                    return "granted"
                if answer == "n":
                    return "rejected"
                if answer == "a":
                    self._always.add(name)
                    return "granted"
                _write(out, "  please answer y, n or a\n")

    def _fd(self) -> int:
        stdin = self._stdin if self._stdin is not None else sys.stdin
        return stdin if isinstance(stdin, int) else stdin.fileno()

    async def _readline(self, fd: int) -> str | None:
        """The next line without its newline, or ``None`` at end of input; cancellable."""
        while b"\n" not in self._buffer and not self._eof:
            chunk = await _read_some(fd)
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True
        if not self._buffer:
            return None
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer[:] = rest
        return line.decode(errors="replace").rstrip("\r")


async def _read_some(fd: int) -> bytes:
    """Read what ``fd`` has, waiting for it in Trio's I/O loop; never sets O_NONBLOCK.

    Waiting is cancellable and consumes nothing; the read happens only once the fd is
    readable, so it does not block (a terminal in canonical mode is readable once a whole
    line, or end of input, is there).
    """
    while True:
        try:
            await trio.lowlevel.wait_readable(fd)
        except OSError as exc:
            if exc.errno != errno.EPERM:
                raise
            # epoll refuses what can never block (a regular file, /dev/null): just read it.
            await trio.lowlevel.checkpoint()
            return os.read(fd, _READ_SIZE)
        try:
            return os.read(fd, _READ_SIZE)
        except BlockingIOError:
            continue  # someone else's non-blocking flag, and someone else read it first
        except OSError as exc:
            if exc.errno == errno.EIO:
                return b""  # a terminal whose other end hung up: end of input
            raise


def _interrupted(execution: ToolExecution) -> str:
    reason = execution.signal.reason
    return f"(interrupted: {reason.message})" if reason is not None else "(interrupted)"


def _write(out: TextIO, text: str) -> None:
    out.write(text)
    out.flush()


def _arguments(arguments: object) -> str:
    """The frozen arguments as compact JSON (``None`` when they could not be materialised)."""
    return to_compact_json(arguments)
