"""OpenAI Chat Completions: tool specs, tool calls in, tool results out, stream assembly.

Inputs may be the ``openai`` SDK's objects (anything with ``model_dump()``) or plain dicts;
outputs are plain, mutable, JSON-ready dicts and lists, ready for
``client.chat.completions.create(tools=..., messages=...)``.  Nothing here imports the SDK.

* :func:`tool_specs`: the ``tools=`` parameter.
* :func:`tool_calls`: the :class:`~trio_tools.ToolCall`\\ s of an assistant message.
* :func:`tool_results`: the messages that answer every call, in model order.
* :class:`StreamAssembler`: the tool calls of a streamed completion, from its chunks.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

from .._registry import ToolRegistry
from .._results import ImageBlock, TextBlock
from .._scheduler import BatchOutcome, ToolCall
from ._common import (
    PartialCall,
    assembled,
    content_parts,
    context_text,
    data_url,
    drop_unset_nulls,
    field,
    joined_text,
    make_call,
    pair_results,
    plain,
    plain_items,
    tool_descriptions,
)

__all__ = ["StreamAssembler", "tool_calls", "tool_results", "tool_specs"]


def tool_specs(registry: ToolRegistry, *, strict: bool = False) -> list[dict[str, Any]]:
    """The ``tools=`` parameter: one ``{"type": "function", "function": {...}}`` per tool.

    Each function has the tool's ``name``, ``description`` (when it has one) and
    ``parameters`` (its JSON Schema, thawed into plain dicts and lists).  With
    ``strict=True`` each also has ``"strict": true`` and its schema rewritten to the strict
    subset: every property of every object schema (``$defs`` included) required, the
    optional ones nullable, ``additionalProperties: false``, no ``default``.  Pass the same
    registry to :func:`tool_calls` so that the ``null``\\ s a strict model sends for
    left-out properties are dropped again.

    Raises:
        ValueError: ``strict`` and a tool's schema cannot be made strict (a free-form
            object such as ``dict[str, int]``, a tuple); the message names the tool.
    """
    specs: list[dict[str, Any]] = []
    for name, description, parameters in tool_descriptions(registry, strict=strict):
        function: dict[str, Any] = {"name": name}
        if description:
            function["description"] = description
        function["parameters"] = parameters
        if strict:
            function["strict"] = True
        specs.append({"type": "function", "function": function})
    return specs


def tool_calls(message: object, *, registry: ToolRegistry | None = None) -> tuple[ToolCall, ...]:
    """The tool calls of an assistant message, in model order.

    ``message`` is the assistant message (``completion.choices[0].message``) or the whole
    completion (its first choice is used), an SDK object or a dict.  Each call's
    ``arguments`` is the model's JSON text, unchanged unless ``registry`` is given: then a
    top-level ``null`` for a property that the tool's own schema neither requires nor
    allows to be ``null`` is dropped (a strict model's "not given"), so the tool's default
    applies.

    Raises:
        TypeError: ``message`` (or a call in it) is neither a dict nor an SDK object.
        ValueError: a call is not a function call (a custom tool's), or has no id or name.
    """
    data = plain(message, "message")
    if "choices" in data:
        choices = plain_items(data["choices"], "choice")
        if not choices:
            return ()
        data = plain(choices[0].get("message"), "choices[0].message")
    calls: list[ToolCall] = []
    for item in plain_items(data.get("tool_calls"), "tool call"):
        call_id = field(item, "id", "a tool call")
        kind = item.get("type") or "function"
        if kind != "function":
            raise ValueError(
                f"tool call {call_id!r} is a {kind!r} call; only function calls are tool calls"
            )
        function = plain(item.get("function"), "tool call {}'s function", call_id)
        name = field(function, "name", "tool call {}", call_id)
        arguments = function.get("arguments") or ""
        calls.append(make_call(call_id, name, drop_unset_nulls(registry, name, arguments)))
    return tuple(calls)


def tool_results(calls: Sequence[ToolCall], outcome: BatchOutcome) -> list[dict[str, Any]]:
    """The messages to append after the assistant message: every call answered, in order.

    One ``{"role": "tool", "tool_call_id": ..., "content": text}`` per call, in model order
    (the result's text blocks joined with newlines; the ``Error: ...`` text for errors and
    cancelled calls).  Tool messages cannot carry images, so when results have images, one
    ``user`` message after all tool messages carries them as ``data:`` URLs, each call's
    images after a line naming the call (and the call's tool message says they follow).
    The outcome's contexts come last, as text parts of that ``user`` message (which exists
    only when there are images or contexts).  Images of a type the API does not take
    become a text note.

    Raises:
        TypeError: ``outcome`` is not a :class:`~trio_tools.BatchOutcome`, or ``calls``
            holds something that is not a :class:`~trio_tools.ToolCall`.
        ValueError: ``calls`` and ``outcome.results`` differ in length.
    """
    messages: list[dict[str, Any]] = []
    user_parts: list[dict[str, Any]] = []
    for call, result in pair_results(calls, outcome):
        content = result.content
        if len(content) == 1 and type(content[0]) is TextBlock:  # the common case
            messages.append(
                {"role": "tool", "tool_call_id": call.call_id, "content": content[0].text}
            )
            continue
        parts = content_parts(result)
        text = joined_text(parts)
        images = [part for part in parts if isinstance(part, ImageBlock)]
        if images:
            note = f"[{len(images)} image(s) in the next user message]"
            text = f"{text}\n{note}" if text else note
            user_parts.append(
                {"type": "text", "text": f"Images from tool call {call.call_id} ({call.name}):"}
            )
            user_parts.extend(
                {"type": "image_url", "image_url": {"url": data_url(image)}} for image in images
            )
        messages.append({"role": "tool", "tool_call_id": call.call_id, "content": text})
    user_parts.extend({"type": "text", "text": context_text(c)} for c in outcome.contexts)
    if user_parts:
        messages.append({"role": "user", "content": user_parts})
    return messages


# The events of the SDK's stream helper other than ``chunk``: what the chunks already said.
_HELPER_EVENTS = frozenset(
    f"{what}.{stage}"
    for what in (
        "content",
        "refusal",
        "tool_calls.function.arguments",
        "logprobs.content",
        "logprobs.refusal",
    )
    for stage in ("delta", "done")
)


@final
class StreamAssembler:
    """Assemble the tool calls of a streamed chat completion (``stream=True``).

    :meth:`feed` every chunk, in order (or every event of the SDK's
    ``client.chat.completions.stream()``: its ``chunk`` events are read, the others,
    which repeat what the chunks say, ignored); :meth:`tool_calls` gives the calls assembled so
    far.  Tool call deltas are matched by their ``index``; the first delta of a call
    carries its id and name, later ones pieces of its arguments.  Only the first choice
    (``index`` 0) is assembled.  A stream cut off in the middle of a call's arguments
    leaves them as the partial text: running the call then reports ``INVALID_ARGS``.
    """

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[int, PartialCall] = {}

    def __repr__(self) -> str:
        return f"<openai_chat.StreamAssembler with {len(self._calls)} call(s)>"

    def feed(self, event: object) -> None:
        """Take one ``ChatCompletionChunk`` or stream helper event (SDK object or dict).

        Raises:
            TypeError: ``event`` is neither a dict nor an SDK object.
            ValueError: ``event`` is neither a chat completion chunk (it has no
                ``choices``) nor an event of the SDK's stream helper.
        """
        chunk = plain(event, "chunk")
        if "choices" not in chunk:
            kind = chunk.get("type")
            if kind == "chunk" and "chunk" in chunk:
                # The SDK's ``client.chat.completions.stream()`` wraps each chunk in a
                # ``ChunkEvent``; its other events repeat what the chunks say.
                chunk = plain(chunk["chunk"], "chunk")
            elif kind in _HELPER_EVENTS:
                return
            if "choices" not in chunk:
                raise ValueError(f"not a chat completion chunk (no 'choices'): {chunk!r}")
        for choice in plain_items(chunk["choices"], "choice"):
            if choice.get("index", 0) != 0:
                continue
            delta = plain(choice.get("delta") or {}, "delta")
            for piece in plain_items(delta.get("tool_calls"), "tool call delta"):
                index = piece.get("index")
                if not isinstance(index, int):
                    raise ValueError(f"tool call delta without an int 'index': {piece!r}")
                partial = self._calls.setdefault(index, PartialCall())
                if piece.get("id"):
                    partial.call_id = piece["id"]
                function = plain(piece.get("function") or {}, "function delta")
                if function.get("name"):
                    partial.name = function["name"]
                if function.get("arguments"):
                    partial.parts.append(function["arguments"])

    def tool_calls(self, *, registry: ToolRegistry | None = None) -> tuple[ToolCall, ...]:
        """The calls assembled so far, in model order (``registry`` as for
        :func:`tool_calls`).

        Raises:
            ValueError: a call's id or name never arrived.
        """
        return assembled(self._calls, registry)
