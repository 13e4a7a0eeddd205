"""A small fake model API for the examples and tests: scripted replies over real HTTP.

It speaks just enough of OpenAI's Chat Completions (``POST /v1/chat/completions``) and
Responses (``POST /v1/responses``) APIs and Anthropic's Messages API (``POST
/v1/messages``), JSON or server-sent events, for the official ``openai`` and ``anthropic``
clients to talk to it, with h11 over Trio on 127.0.0.1 (a free port).  It is a test
double, not a model: ``serve(model)`` calls ``model(path, body)`` for each request, and
the scripted model says what to answer.

Like the real APIs, it rejects (HTTP 400) a conversation whose tool calls are not each
answered exactly once, in order, or whose images are where the API does not take them:
``check_chat``, ``check_responses`` and ``check_anthropic`` are those rules, and the
scripted models of the examples call them.

Needs ``h11`` (``pip install h11``).
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import h11
import trio

__all__ = [
    "SSE",
    "BadRequest",
    "FakeModelServer",
    "anthropic_message",
    "anthropic_stream",
    "chat_completion",
    "chat_stream",
    "check_anthropic",
    "check_chat",
    "check_responses",
    "response",
    "responses_stream",
    "serve",
]

JSON = dict[str, Any]


class BadRequest(Exception):
    """Raised by a scripted model (or a check) to answer HTTP 400 with this message."""


@attrs.frozen
class SSE:
    """A streamed reply: ``(event name or None, data)`` pairs; ``data`` is JSON or text."""

    events: Sequence[tuple[str | None, JSON | str]]


Reply = JSON | SSE
Model = Callable[[str, JSON], Reply]


@attrs.define
class FakeModelServer:
    """The running server: its ``base_url`` and every request it received."""

    base_url: str
    requests: list[tuple[str, JSON]] = attrs.Factory(list)
    rejected: list[str] = attrs.Factory(list)


@asynccontextmanager
async def serve(model: Model) -> AsyncIterator[FakeModelServer]:
    """Serve ``model`` on 127.0.0.1 (a free port) for the span of the ``async with`` block.

    The server stops when the block exits, however it exits.
    """
    async with trio.open_nursery() as nursery:
        server: FakeModelServer | None = None

        async def handle(stream: trio.SocketStream) -> None:
            assert server is not None
            # A client that goes away mid-request is not an error of the server.
            with contextlib.suppress(h11.RemoteProtocolError, trio.BrokenResourceError):
                async with stream:
                    await _serve_connection(stream, model, server)

        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        server = FakeModelServer(base_url=f"http://127.0.0.1:{port}")
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()


async def _serve_connection(
    stream: trio.SocketStream, model: Model, server: FakeModelServer
) -> None:
    connection = h11.Connection(h11.SERVER)
    while True:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            else:  # ConnectionClosed, or PAUSED after a message we did not answer
                return
        assert request is not None
        path = request.target.decode().partition("?")[0]
        status, headers, chunks = _answer(path, bytes(body), model, server)
        await stream.send_all(connection.send(h11.Response(status_code=status, headers=headers)))
        for chunk in chunks:
            await stream.send_all(connection.send(h11.Data(data=chunk)))
        await stream.send_all(connection.send(h11.EndOfMessage()))
        if connection.our_state is h11.MUST_CLOSE:
            return
        connection.start_next_cycle()


def _answer(
    path: str, raw: bytes, model: Model, server: FakeModelServer
) -> tuple[int, list[tuple[str, str]], list[bytes]]:
    try:
        body = json.loads(raw)
        server.requests.append((path, body))
        reply = model(path, body)
    except (BadRequest, ValueError, KeyError, AssertionError) as exc:
        message = f"{type(exc).__name__}: {exc}"
        server.rejected.append(message)
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        return 400, [("content-type", "application/json")], [json.dumps(error).encode()]
    if isinstance(reply, SSE):
        chunks: list[bytes] = []
        for name, data in reply.events:
            text = data if isinstance(data, str) else json.dumps(data)
            head = f"event: {name}\n" if name is not None else ""
            chunks.append(f"{head}data: {text}\n\n".encode())
        return 200, [("content-type", "text/event-stream")], chunks
    return 200, [("content-type", "application/json")], [json.dumps(reply).encode()]


# -- the APIs' rules for tool calls and results ---------------------------------------------


def check_chat(messages: Sequence[JSON]) -> None:
    """Each assistant message's tool calls are answered by the ``tool`` messages right
    after it, one per call, in order; tool messages carry text only."""
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            content = message.get("content")
            if not isinstance(content, str) and any(part.get("type") != "text" for part in content):
                raise BadRequest(f"messages[{index}]: a tool message can only hold text")
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        expected = [call["id"] for call in message["tool_calls"]]
        answers = messages[index + 1 : index + 1 + len(expected)]
        got = [m.get("tool_call_id") for m in answers if m.get("role") == "tool"]
        if got != expected:
            raise BadRequest(f"messages[{index}]: tool calls {expected} answered by {got}")


def check_responses(items: Sequence[JSON]) -> None:
    """Every ``function_call`` item has exactly one ``function_call_output``, in order."""
    calls = [item["call_id"] for item in items if item.get("type") == "function_call"]
    outputs = [item["call_id"] for item in items if item.get("type") == "function_call_output"]
    if calls != outputs:
        raise BadRequest(f"function calls {calls} answered by {outputs}")


def check_anthropic(messages: Sequence[JSON]) -> None:
    """Each assistant message's ``tool_use`` blocks are answered by ``tool_result`` blocks
    at the start of the next (user) message, one per call, in order."""
    for index, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") != "assistant" or isinstance(content, str):
            continue
        expected = [block["id"] for block in content if block.get("type") == "tool_use"]
        if not expected:
            continue
        following = messages[index + 1] if index + 1 < len(messages) else {}
        blocks = following.get("content", [])
        head = [
            b.get("tool_use_id") for b in blocks[: len(expected)] if b.get("type") == "tool_result"
        ]
        if following.get("role") != "user" or head != expected:
            raise BadRequest(
                f"messages[{index}]: tool_use ids {expected} must be answered first in the next "
                f"user message, got {head}"
            )


# -- replies ------------------------------------------------------------------------------

Call = tuple[str, str, str]
"""A scripted tool call: (id, name, arguments as JSON text)."""


def chat_completion(text: str | None = None, calls: Sequence[Call] = ()) -> JSON:
    """A chat completion with one choice: some text, and tool calls."""
    message: JSON = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}
            for cid, name, arguments in calls
        ]
    finish = "tool_calls" if calls else "stop"
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }


def _pieces(text: str) -> list[str]:
    """Arguments cut into small pieces, as models stream them."""
    return [text[index : index + 7] for index in range(0, len(text), 7)]


def chat_stream(text: str | None = None, calls: Sequence[Call] = ()) -> SSE:
    """The same completion as chunks: ``data:`` lines, then ``[DONE]``."""

    def chunk(delta: JSON, finish: str | None = None) -> tuple[None, JSON]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return None, {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "fake-model",
            "choices": [choice],
        }

    events: list[tuple[str | None, JSON | str]] = [chunk({"role": "assistant", "content": ""})]
    if text:
        events.append(chunk({"content": text}))
    for index, (cid, name, arguments) in enumerate(calls):
        head = {"index": index, "id": cid, "type": "function"}
        events.append(
            chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
        )
        events.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(arguments)
        )
    events.append(chunk({}, "tool_calls" if calls else "stop"))
    events.append((None, "[DONE]"))
    return SSE(events)


def _response_items(text: str | None, calls: Sequence[Call]) -> list[JSON]:
    items: list[JSON] = []
    if text:
        items.append(
            {
                "type": "message",
                "id": "msg_fake",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    items.extend(
        {
            "type": "function_call",
            "id": f"fc_{cid}",
            "call_id": cid,
            "name": name,
            "arguments": arguments,
            "status": "completed",
        }
        for cid, name, arguments in calls
    )
    return items


def response(text: str | None = None, calls: Sequence[Call] = ()) -> JSON:
    """A Responses API response: a message item, and function_call items."""
    return {
        "id": "resp_fake",
        "object": "response",
        "created_at": 0,
        "model": "fake-model",
        "status": "completed",
        "output": _response_items(text, calls),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def responses_stream(text: str | None = None, calls: Sequence[Call] = ()) -> SSE:
    """The same response as events: created, each item added / its deltas / done, completed."""
    events: list[tuple[str | None, JSON | str]] = []

    def add(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **data}))

    add("response.created", response={**response(), "output": [], "status": "in_progress"})
    for index, item in enumerate(_response_items(text, calls)):
        if item["type"] == "message":
            add("response.output_item.added", output_index=index, item={**item, "content": []})
            add("response.output_item.done", output_index=index, item=item)
            continue
        add("response.output_item.added", output_index=index, item={**item, "arguments": ""})
        for piece in _pieces(item["arguments"]):
            add(
                "response.function_call_arguments.delta",
                output_index=index,
                item_id=item["id"],
                delta=piece,
            )
        add(
            "response.function_call_arguments.done",
            output_index=index,
            item_id=item["id"],
            arguments=item["arguments"],
        )
        add("response.output_item.done", output_index=index, item=item)
    add("response.completed", response=response(text, calls))
    return SSE(events)


def _anthropic_blocks(text: str | None, calls: Sequence[Call]) -> list[JSON]:
    blocks: list[JSON] = [{"type": "text", "text": text}] if text else []
    blocks.extend(
        {"type": "tool_use", "id": cid, "name": name, "input": json.loads(arguments)}
        for cid, name, arguments in calls
    )
    return blocks


def anthropic_message(text: str | None = None, calls: Sequence[Call] = ()) -> JSON:
    """A Messages API message: a text block, and tool_use blocks."""
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "fake-model",
        "content": _anthropic_blocks(text, calls),
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def anthropic_stream(text: str | None = None, calls: Sequence[Call] = ()) -> SSE:
    """The same message as events: message_start, each block's start / deltas / stop, ..."""
    events: list[tuple[str | None, JSON | str]] = []

    def add(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, **data}))

    add("message_start", message={**anthropic_message(), "content": [], "stop_reason": None})
    for index, block in enumerate(_anthropic_blocks(text, calls)):
        if block["type"] == "text":
            add("content_block_start", index=index, content_block={"type": "text", "text": ""})
            add("content_block_delta", index=index, delta={"type": "text_delta", "text": text})
        else:
            add("content_block_start", index=index, content_block={**block, "input": {}})
            for piece in _pieces(json.dumps(block["input"])):
                add(
                    "content_block_delta",
                    index=index,
                    delta={"type": "input_json_delta", "partial_json": piece},
                )
        add("content_block_stop", index=index)
    stop = "tool_use" if calls else "end_turn"
    add(
        "message_delta",
        delta={"stop_reason": stop, "stop_sequence": None},
        usage={"output_tokens": 1},
    )
    add("message_stop")
    return SSE(events)
