"""Where a program runs: the :class:`CodeRuntime` protocol and :class:`SubprocessRuntime`."""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, cast, final

import attrs
import trio

from .._command import _signal_group, _stop_group, _wait_group_gone
from .._json import FrozenDict
from ._errors import CodeRunFailedError

__all__ = ["CallTool", "CodeRuntime", "SubprocessRuntime"]

CallTool = Callable[[str, object], Awaitable[Mapping[str, object]]]
"""``await call_tool(name, arguments) -> reply``: ``{"ok": text}`` or
``{"error": {"code": str, "message": str}}``."""

_MAX_LINE = 1 << 26  # one protocol message (a call's arguments, a reply's text)


class CodeRuntime(Protocol):
    """Runs one program of ``run_code`` and forwards its tool calls.

    ``run_code`` owns the tool calls: it numbers and dispatches them through the registry,
    limits how many overlap and settles them when the run ends.  A runtime only carries
    them: for each ``tools.NAME(**arguments)`` of the program it awaits
    ``call_tool(name, arguments)`` and hands the reply back to the program, ``{"ok": text}``
    (the awaited value) or ``{"error": {"code": ..., "message": ...}}`` (raise
    ``ToolError(code, message)`` there).  Calls may overlap: ``call_tool(...)`` takes the
    call's place in line when it is *called*, and the awaitable it returns is the reply, so
    a runtime calls it in the program's order and awaits each reply in a task of its own.
    Once the run has settled, every call is refused (without dispatch).
    """

    async def run(self, code: str, call_tool: CallTool) -> str:
        """Run ``code`` to its end and return what it printed.

        Raises:
            CodeRunFailedError: the program failed (``syntax``, ``exception``, ``killed``,
                ``output_limit``).
            trio.Cancelled: the run was cancelled; the program must be stopped and every
                process of it reaped before this propagates.
        """
        ...


def _memory_limit(_instance: object, _attribute: object, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise ValueError(f"memory_limit must be a positive int (bytes) or None, got {value!r}")


def _max_output(_instance: object, _attribute: object, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"max_output must be a positive int (bytes), got {value!r}")


def _grace_period(_instance: object, _attribute: object, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"grace_period must be a non-negative number, got {value!r}")


def _command(value: str | Sequence[str]) -> tuple[str, ...]:
    command = (value,) if isinstance(value, str) else tuple(value)
    if not command or not all(isinstance(part, str) and part for part in command):
        raise ValueError(f"python must be a non-empty command, got {value!r}")
    return command


def _environment(value: Mapping[str, str] | None) -> Mapping[str, str]:
    env = dict(value or {})
    for key, item in env.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"env must map str to str, got {key!r}: {item!r}")
    return FrozenDict(env)


@functools.cache
def _child_source() -> str:
    return (Path(__file__).parent / "_child.py").read_text(encoding="utf-8")


@final
@attrs.frozen(kw_only=True)
class SubprocessRuntime:
    """Runs each program in a fresh child Python, on asyncio.

    The child starts as ``python -I`` (no user site, no ``PYTHON*`` variables) with an
    environment of ``env`` only (empty by default), in a new temporary directory (removed
    afterwards) and in a session of its own, with its address space limited to
    ``memory_limit`` bytes.  Its stdout and stderr are the captured output, at most
    ``max_output`` bytes: one byte more and the child is killed (``output_limit``).  Tool
    calls travel as line-delimited JSON on the child's stdin and stdout.

    When the program ends, or fails, its whole process group is killed and the child
    reaped.  When the run is cancelled, the group gets SIGTERM, then SIGKILL after
    ``grace_period`` seconds, and the child is reaped before the cancellation propagates.

    POSIX only (sessions, process groups, ``RLIMIT_AS``).  This isolates the program from
    the agent's process; it is **not** a security sandbox:
    the program runs as the same user, and can read and write what that user can.

    Args:
        python: the command that starts a Python 3.11+ interpreter (a path, or a sequence
            such as a container runner's command line ending in ``python``).
        memory_limit: ``RLIMIT_AS`` of the child in bytes, or ``None`` for no limit.
        max_output: the most bytes of output (stdout and stderr together) the program may
            write.
        grace_period: seconds between SIGTERM and SIGKILL when a run is cancelled.
        env: the child's whole environment.
    """

    python: tuple[str, ...] = attrs.field(default=(sys.executable,), converter=_command)
    memory_limit: int | None = attrs.field(default=1 << 30, validator=_memory_limit)
    max_output: int = attrs.field(default=1_000_000, validator=_max_output)
    grace_period: float = attrs.field(default=5.0, validator=_grace_period)
    env: Mapping[str, str] = attrs.field(factory=FrozenDict, converter=_environment)

    async def run(self, code: str, call_tool: CallTool) -> str:
        """Run ``code`` in a new child and return its output (see :class:`CodeRuntime`)."""
        workdir = await trio.to_thread.run_sync(tempfile.mkdtemp, "", "trio_tools-code-")
        try:
            return await self._run_in(workdir, code, call_tool)
        finally:
            # The directory is the run's own: remove it even when the run was cancelled.
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(
                    functools.partial(shutil.rmtree, workdir, ignore_errors=True)
                )

    async def _run_in(self, workdir: str, code: str, call_tool: CallTool) -> str:
        command = [
            *self.python,
            "-I",
            "-X",
            "utf8",
            "-u",
            "-c",
            _child_source(),
            str(self.memory_limit or 0),
        ]
        process = await trio.lowlevel.open_process(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=dict(self.env),
            start_new_session=True,
        )
        session = _Session(self, process, call_tool)
        try:
            return await session.run(code)
        finally:
            # The child must be dead and reaped before the run returns or its
            # cancellation propagates.
            with trio.CancelScope(shield=True):
                await session.stop()


class _ProtocolError(Exception):
    pass


class _LineReader:
    """Whole lines from the child's pipe; ``b""`` at its end."""

    __slots__ = ("_buffer", "_fd")

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self._fd = stream.fileno()
        self._buffer = bytearray()

    async def receive_line(self) -> bytes:
        buffer = self._buffer
        start = 0
        while True:
            index = buffer.find(b"\n", start)
            if index >= 0:
                line = bytes(buffer[:index])
                del buffer[: index + 1]
                return line
            if len(buffer) > _MAX_LINE:
                raise _ProtocolError(f"a message longer than {_MAX_LINE} bytes")
            start = len(buffer)
            chunk = await self._receive()
            if not chunk:
                return b""
            buffer += chunk

    async def _receive(self) -> bytes:
        """The next chunk of the pipe (``b""``: its end), as ``FdStream.receive_some`` reads
        it, but with one schedule point per chunk, not two: the wait for the chunk when the
        pipe is empty (the usual case: the child answers after the parent), else a
        checkpoint after reading it."""
        waited = False
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._fd)
                waited = True
                continue
            except OSError as exc:
                raise trio.BrokenResourceError from exc
            if not waited:
                await trio.lowlevel.checkpoint()
            return chunk


class _Session:
    """One child process, from start to reaped."""

    def __init__(self, runtime: SubprocessRuntime, process: trio.Process, call_tool: CallTool):
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        self.runtime = runtime
        self.process = process
        self.stdin = process.stdin
        self.stdin_fd = cast("trio.lowlevel.FdStream", process.stdin).fileno()
        self.stdout = process.stdout
        self.stderr = process.stderr
        self.call_tool = call_tool
        self.send_lock = trio.Lock()
        self.output = bytearray()
        self.overflowed = False
        self.output_done = trio.Event()
        self.finished = False

    async def run(self, code: str) -> str:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read_output)
            async with trio.open_nursery() as calls:
                await self._send({"code": code})
                final = await self._serve(calls)
                # What is left are waiters for replies that no program will read.
                calls.cancel_scope.cancel()
            self.finished = True
            await self._kill_and_reap()
            # Every writer of the output pipe is dead now, unless a process escaped the
            # group: do not wait for it.
            with trio.move_on_after(self.runtime.grace_period):
                await self.output_done.wait()
            nursery.cancel_scope.cancel()
        return self._outcome(final)

    async def _serve(self, calls: trio.Nursery) -> dict[str, object] | None:
        """Answer the program's calls until its final message (``None``: it died)."""
        reader = _LineReader(cast("trio.lowlevel.FdStream", self.stdout))
        try:
            while line := await reader.receive_line():
                decoded: object = json.loads(line)
                if not isinstance(decoded, dict):
                    raise _ProtocolError(f"not a JSON object: {line[:200]!r}")
                message = cast("dict[str, object]", decoded)
                op = message.get("op")
                if op == "call":
                    self._answer(message, calls)
                elif op in ("done", "failed"):
                    return message
                else:
                    raise _ProtocolError(f"unknown message {line[:200]!r}")
        except (_ProtocolError, ValueError) as exc:
            return {"op": "failed", "kind": "exception", "message": f"protocol error: {exc}"}
        return None

    def _answer(self, message: dict[str, object], calls: trio.Nursery) -> None:
        ident, name, arguments = message.get("id"), message.get("name"), message.get("arguments")
        if type(ident) is not int:
            return  # no reply can reach a call without an id
        if type(name) is not str:
            calls.start_soon(
                self._send,
                {
                    "id": ident,
                    "error": {"code": "INVALID_ARGS", "message": "a tool name must be a str"},
                },
            )
            return
        # Called here, in the order of the messages: call_tool takes the call's place in
        # line when it is called, and its awaitable is the reply.
        calls.start_soon(
            self._reply, ident, self.call_tool(name, {} if arguments is None else arguments)
        )

    async def _reply(self, ident: int, reply: Awaitable[Mapping[str, object]]) -> None:
        await self._send({"id": ident, **(await reply)})

    async def _send(self, message: Mapping[str, object]) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        lock = self.send_lock
        try:
            # Free (no queued sender: a release hands the lock to the next in line), so no
            # schedule point of its own per reply; send_all below is the checkpoint.
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        try:
            # When the child is gone, how it ended is what the run reports.
            with contextlib.suppress(OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                # Written at once when the pipe has room (the usual case: every sender got
                # here through a schedule point of its own); the rest as send_all does.
                try:
                    sent = os.write(self.stdin_fd, data)
                except BlockingIOError:
                    sent = 0
                if sent < len(data):
                    await self.stdin.send_all(memoryview(data)[sent:])
        finally:
            lock.release()

    async def _read_output(self) -> None:
        limit = self.runtime.max_output
        try:
            while chunk := await self.stderr.receive_some(65536):
                if self.overflowed:
                    continue
                room = limit - len(self.output)
                self.output += chunk[:room]
                if len(chunk) > room:
                    self.overflowed = True
                    _signal_group(self.process.pid, signal.SIGKILL)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.output_done.set()

    async def _kill_and_reap(self) -> None:
        """The program is over: kill what is left of its group, wait until it is gone."""
        _signal_group(self.process.pid, signal.SIGKILL)
        await _wait_group_gone(self.process)

    async def stop(self) -> None:
        """Stop the child's group if the run did not get to (SIGTERM, SIGKILL after the
        grace period), reap the child, close the pipes."""
        if not self.finished or self.process.returncode is None:
            grace = 0 if self.finished else self.runtime.grace_period
            await _stop_group(self.process, grace, leftovers_only=False)
        for stream in (self.stdin, self.stdout, self.stderr):
            await stream.aclose()

    def _outcome(self, final: dict[str, object] | None) -> str:
        output = self.output.decode("utf-8", "replace")
        runtime = self.runtime
        if self.overflowed:
            raise CodeRunFailedError(
                "output_limit",
                f"the program wrote more than {runtime.max_output} bytes of output",
                output,
            )
        if final is None:
            returncode = self.process.returncode
            assert returncode is not None
            if returncode < 0:
                try:
                    name = signal.Signals(-returncode).name
                except ValueError:
                    name = f"signal {-returncode}"
                message = f"the program was killed by {name}"
            else:
                message = f"the program exited with status {returncode} before it finished"
            raise CodeRunFailedError("killed", message, output)
        if final.get("op") == "done":
            return output
        kind = final.get("kind")
        message = str(final.get("message"))
        if kind == "memory":
            limit = runtime.memory_limit
            raise CodeRunFailedError(
                "killed",
                "the program ran out of memory"
                + ("" if limit is None else f" (memory limit: {limit} bytes)"),
                output,
            )
        if kind == "syntax":
            raise CodeRunFailedError("syntax", message, output)
        raise CodeRunFailedError("exception", message, output)
