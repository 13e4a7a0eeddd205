"""The child side of Code Mode: run one program on asyncio, forwarding tool calls to the parent.

This file is not imported by the parent: its source is the ``-c`` program of the child
interpreter (``python -I -X utf8 -u -c SOURCE MEMORY_LIMIT``), so it uses the standard
library only.  It speaks a line-delimited JSON protocol (one UTF-8 object per line):

* parent -> child, on the child's stdin: first ``{"code": str}``, then one reply per call,
  ``{"id": n, "ok": text}`` or ``{"id": n, "error": {"code": str, "message": str}}``;
* child -> parent, on the child's stdout: ``{"op": "call", "id": n, "name": str,
  "arguments": {...}}`` for each ``await tools.NAME(**arguments)``, and finally one
  ``{"op": "done"}`` or ``{"op": "failed", "kind": "syntax" | "exception" | "memory",
  "message": str}``.

Before the program starts, the protocol moves to duplicated descriptors: the program's
stdout and stderr both go to the child's stderr (the captured output) and its stdin reads
``/dev/null``.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import inspect
import json
import linecache
import math
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import cast

FILENAME = "<run_code>"
MAX_LINE = 1 << 26


class ToolError(Exception):
    """A tool call of the program failed: ``code`` and ``message`` of its error result."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def json_problem(value: object, path: str = "$", seen: frozenset[int] = frozenset()) -> str | None:
    """Why ``value`` is not lossless JSON (exact types only, as the registry demands)."""
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str:
        return None
    if isinstance(value, float) and kind is float:
        return None if math.isfinite(value) else f"{path}: {value!r} is not a finite number"
    if isinstance(value, list | tuple | dict) and kind in (list, tuple, dict):
        ident = id(cast(object, value))
        if ident in seen:
            return f"{path}: a cycle"
        inner = seen | {ident}
        if isinstance(value, dict):
            for key, item in cast("dict[object, object]", value).items():
                if type(key) is not str:
                    return f"{path}: key {key!r} is not a str"
                problem = json_problem(item, f"{path}.{key}", inner)
                if problem is not None:
                    return problem
            return None
        for index, item in enumerate(cast("list[object] | tuple[object, ...]", value)):
            problem = json_problem(item, f"{path}[{index}]", inner)
            if problem is not None:
                return problem
        return None
    return f"{path}: {kind.__name__} is not JSON"


class Tools:
    """``tools`` in the program: ``await tools.NAME(**arguments)`` calls the parent's tool."""

    def __init__(self, call: Callable[[str, dict[str, object]], Awaitable[object]]) -> None:
        self._call = call

    def __getattr__(self, name: str) -> Callable[..., Awaitable[object]]:
        if name.startswith("__"):
            raise AttributeError(name)
        call = self._call

        async def binding(**arguments: object) -> object:
            return await call(name, arguments)

        binding.__name__ = binding.__qualname__ = name
        return binding

    def __repr__(self) -> str:
        return "<tools>"


class Lines(asyncio.Protocol):
    """The parent's lines, each handed to the channel as it arrives: a reply resolves its
    call's future right in the loop's callback, with no task of its own to wake."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        if self.channel.gone is not None:
            return  # nothing more is read once the channel is gone
        buffer = self.buffer
        buffer += data
        start = 0
        while (index := buffer.find(b"\n", start)) >= 0:
            self.channel.received(bytes(buffer[start:index]))
            start = index + 1
        del buffer[:start]
        if len(buffer) > MAX_LINE:
            buffer.clear()
            self.channel.closed(f"a message longer than {MAX_LINE} bytes")

    def eof_received(self) -> None:
        self.channel.closed("the parent closed the tool channel")

    def connection_lost(self, exc: Exception | None) -> None:
        self.channel.closed("the parent closed the tool channel")


class Channel:
    """The protocol's child end, driven by one asyncio loop."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        self.in_fd = in_fd
        self.out_fd = out_fd
        self.count = 0
        self.pending: dict[int, asyncio.Future[dict[str, object]]] = {}
        self.code: asyncio.Future[str] | None = None  # the program, the first line
        self.gone: str | None = None  # why the parent's end is gone, once it is

    def send(self, message: dict[str, object]) -> None:
        # A blocking write from the loop: the parent always reads, and one writer (this
        # loop) keeps the lines whole.
        view = memoryview((json.dumps(message, separators=(",", ":")) + "\n").encode())
        while view:
            view = view[os.write(self.out_fd, view) :]

    async def call(self, name: str, arguments: dict[str, object]) -> object:
        problem = json_problem(arguments)
        if problem is not None:
            # Rejected here: the call never reaches the parent.
            raise ToolError(
                "NOT_JSON",
                f"tool execution arguments must be losslessly JSON-serializable ({problem})",
            )
        if self.gone is not None:
            raise ConnectionError(self.gone)
        self.count += 1
        ident = self.count
        future: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
        self.pending[ident] = future
        try:
            self.send({"op": "call", "id": ident, "name": name, "arguments": arguments})
            reply = await future
        finally:
            self.pending.pop(ident, None)
        error = reply.get("error")
        if isinstance(error, dict):
            details = cast("dict[str, object]", error)
            raise ToolError(str(details.get("code")), str(details.get("message")))
        return reply.get("ok")

    def received(self, line: bytes) -> None:
        """One line from the parent: the program's code first, then a call's reply."""
        message = json.loads(line)
        if self.code is not None and not self.code.done():
            self.code.set_result(str(message["code"]))
            return
        future = self.pending.get(message.get("id"))
        if future is not None and not future.done():
            future.set_result(message)

    def closed(self, why: str) -> None:
        """The parent's end of the channel is gone: nothing more will be answered."""
        if self.gone is None:
            self.gone = why
        if self.code is not None and not self.code.done():
            self.code.set_exception(ConnectionError(why))
        for future in self.pending.values():
            if not future.done():
                future.set_exception(ConnectionError(why))

    async def main(self) -> dict[str, object]:
        loop = asyncio.get_running_loop()
        self.code = loop.create_future()
        pipe = os.fdopen(self.in_fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(lambda: Lines(self), pipe)
        try:
            return await self.run(await self.code)
        finally:
            transport.close()

    async def run(self, code: str) -> dict[str, object]:
        try:
            compiled = compile(
                code, FILENAME, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
            )
        except (SyntaxError, ValueError) as exc:
            sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))
            if isinstance(exc, SyntaxError):
                return failed("syntax", f"{exc.msg} (line {exc.lineno})")
            return failed("syntax", str(exc))
        linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
        namespace: dict[str, object] = {
            "__name__": "__main__",
            "__builtins__": builtins,
            "asyncio": asyncio,
            "tools": Tools(self.call),
            "ToolError": ToolError,
        }
        try:
            outcome = eval(compiled, namespace)
            if inspect.iscoroutine(outcome):
                await outcome
        except SystemExit as exc:
            if exc.code not in (None, 0):
                return failed("exception", f"SystemExit: {exc.code}")
        except MemoryError:
            return failed("memory", "the program ran out of memory")
        except BaseException as exc:
            # Skip this function's own frame: the traceback starts in the program.
            tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
            traceback.print_exception(type(exc), exc, tb)
            text = str(exc)
            return failed(
                "exception", f"{type(exc).__name__}: {text}" if text else type(exc).__name__
            )
        return {"op": "done"}


def failed(kind: str, message: str) -> dict[str, object]:
    return {"op": "failed", "kind": kind, "message": message}


def main() -> None:
    memory_limit = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    if memory_limit > 0:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    out_fd = os.dup(1)
    os.dup2(2, 1)
    in_fd = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    channel = Channel(in_fd, out_fd)
    try:
        outcome = asyncio.run(channel.main())
    except MemoryError:
        outcome = failed("memory", "the program ran out of memory")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    channel.send(outcome)
    # Whatever the program left behind (threads, atexit handlers) must not keep it alive.
    os._exit(0)


if __name__ == "__main__":
    main()
