"""Shared pieces of the MCP tests: a recording in-memory wire, connections in each era.

``open_client(server, era)`` connects the real SDK client to a real SDK server in this
process, in one of the ways the SDK offers:

* ``"legacy"``: the SDK's own in-memory transport, the 2025 handshake era over JSON-RPC;
* ``"modern"``: the SDK's in-process client for a ``Server`` (the 2026-07-28 era, no
  JSON-RPC framing; cancellation is the caller's scope, there is no notice);
* ``"legacy-wire"`` / ``"modern-wire"``: JSON-RPC over memory streams that this module
  records (``Wire.sent`` / ``Wire.received``) and can cut (``Wire.close``).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Literal

import anyio
import attrs
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import Client
from mcp.server import Server
from mcp.shared.message import SessionMessage

Era = Literal["legacy", "modern", "legacy-wire", "modern-wire"]
ERAS: tuple[Era, ...] = ("legacy", "modern", "legacy-wire", "modern-wire")
WIRE_ERAS: tuple[Era, ...] = ("legacy-wire", "modern-wire")
MEMORY_ERAS: tuple[Era, ...] = ("legacy", "modern")


def _dump(message: SessionMessage | Exception) -> dict[str, Any]:
    if isinstance(message, Exception):
        return {"exception": repr(message)}
    return message.message.model_dump(by_alias=True, mode="json", exclude_none=True)


@attrs.define
class Wire:
    """What went over one in-memory JSON-RPC connection, and a way to cut it."""

    sent: list[dict[str, Any]] = attrs.Factory(list)
    """Client to server, in order."""
    received: list[dict[str, Any]] = attrs.Factory(list)
    """Server to client, in order."""
    _closers: list[Any] = attrs.Factory(list)
    _after_response: list[Callable[[], object]] = attrs.Factory(list)

    def after_next_response(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` once the client has dispatched the next response it reads, before
        the waiting caller resumes: the caller got its answer, but has not seen it yet."""
        self._after_response.append(fn)

    def close(self) -> None:
        """Cut the connection both ways: each side reads end-of-stream."""
        for stream in self._closers:
            stream.close()

    def methods_sent(self) -> list[str]:
        return [m["method"] for m in self.sent if "method" in m]

    def responses_to(self, request_id: object) -> list[dict[str, Any]]:
        """Results and errors the server sent for ``request_id``."""
        return [m for m in self.received if "method" not in m and m.get("id") == request_id]

    def request_id_of(self, method: str, name: str | None = None) -> object:
        """The id of the (last) request of ``method`` (for ``tools/call``, of tool ``name``)."""
        ids = [
            m["id"]
            for m in self.sent
            if m.get("method") == method
            and "id" in m
            and (name is None or m.get("params", {}).get("name") == name)
        ]
        assert ids, f"no {method} request on the wire"
        return ids[-1]

    def cancel_notices(self) -> list[dict[str, Any]]:
        return [m for m in self.sent if m.get("method") == "notifications/cancelled"]


class _Tap:
    """A stream end that records each message it carries."""

    def __init__(
        self,
        inner: Any,
        record: list[dict[str, Any]],
        after_response: list[Callable[[], object]] | None = None,
    ) -> None:
        self._inner = inner
        self._record = record
        self._after_response = after_response
        self._answered = False

    async def send(self, item: SessionMessage) -> None:
        self._record.append(_dump(item))
        await self._inner.send(item)

    async def receive(self) -> SessionMessage | Exception:
        if self._answered and self._after_response:
            # The reader is back for more: the response it took was dispatched, and no
            # task has run since.
            self._after_response.pop(0)()
        item: SessionMessage | Exception = await self._inner.receive()
        self._record.append(_dump(item))
        self._answered = "result" in self._record[-1] or "error" in self._record[-1]
        return item

    def __aiter__(self) -> _Tap:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()

    async def __aenter__(self) -> _Tap:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _WireTransport:
    """A client ``Transport`` over the given stream ends."""

    def __init__(self, read: Any, write: Any) -> None:
        self._streams = (read, write)

    async def __aenter__(self) -> tuple[Any, Any]:
        return self._streams

    async def __aexit__(self, *exc_info: object) -> None:
        for stream in self._streams:
            await stream.aclose()


@asynccontextmanager
async def open_wire_client(
    server: Server[Any], *, modern: bool
) -> AsyncIterator[tuple[Client, Wire]]:
    """A client connected to ``server`` over recorded JSON-RPC memory streams."""
    wire = Wire()
    to_server: tuple[MemoryObjectSendStream[Any], MemoryObjectReceiveStream[Any]]
    to_server = anyio.create_memory_object_stream[Any](math.inf)
    to_client = anyio.create_memory_object_stream[Any](math.inf)
    wire._closers.extend([to_server[0], to_client[0]])
    async with trio.open_nursery() as nursery:

        async def run_server() -> None:
            await server.run(
                to_server[1],
                _Tap(to_client[0], wire.received),
                server.create_initialization_options(),
            )

        nursery.start_soon(run_server)
        transport = _WireTransport(
            _Tap(to_client[1], [], wire._after_response), _Tap(to_server[0], wire.sent)
        )
        client = Client(transport, mode="auto" if modern else "legacy")
        async with client:
            yield client, wire
        wire.close()


@asynccontextmanager
async def open_client(server: Server[Any], era: Era) -> AsyncIterator[tuple[Client, Wire | None]]:
    """A real SDK client connected to ``server`` in ``era`` (see the module docstring)."""
    if era in WIRE_ERAS:
        async with open_wire_client(server, modern=era == "modern-wire") as (client, wire):
            yield client, wire
        return
    async with Client(server, mode="legacy" if era == "legacy" else "auto") as client:
        yield client, None


class Published(list[tuple[str, Any]]):
    """A result observer that keeps ``(tool name, result)`` pairs and can be waited on."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = trio.Event()

    def __call__(self, execution: Any, result: Any) -> None:
        self.append((execution.name, result))
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, count: int) -> None:
        """Until ``count`` results were published (bounded: a hang fails the test)."""
        with trio.fail_after(10):
            while len(self) < count:
                await self._changed.wait()
