"""Anthropic Messages API: tool specs, tool calls in, tool results out, stream assembly.

Inputs may be the ``anthropic`` SDK's objects (anything with ``model_dump()``) or plain
dicts; outputs are plain, mutable, JSON-ready dicts and lists, ready for
``client.messages.create(tools=..., messages=...)``.  Nothing here imports the SDK.

* :func:`tool_specs`: the ``tools=`` parameter.
* :func:`tool_calls`: the :class:`~trio_tools.ToolCall`\\ s of an assistant message.
* :func:`tool_results`: the ``user`` message that answers every call, in model order.
* :class:`StreamAssembler`: the tool calls of a streamed message, from its events.
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
    drop_unset_nulls,
    field,
    make_call,
    pair_results,
    plain,
    plain_items,
    thaw,
    tool_descriptions,
)

__all__ = ["StreamAssembler", "tool_calls", "tool_results", "tool_specs"]


def tool_specs(registry: ToolRegistry, *, strict: bool = False) -> list[dict[str, Any]]:
    """The ``tools=`` parameter: one ``{"name", "description", "input_schema"}`` per tool.

    ``input_schema`` is the tool's JSON Schema, thawed into plain dicts and lists.  With
    ``strict=True`` each spec also has ``"strict": true`` (Anthropic's strict tool use)
    and its schema is rewritten exactly as for OpenAI's strict mode (every property
    required, the optional ones nullable, ``additionalProperties: false``, no
    ``default``), a form strict tool use accepts; pass the same registry to
    :func:`tool_calls` to drop the ``null``\\ s that stand for left-out properties.

    Raises:
        ValueError: ``strict`` and a tool's schema cannot be made strict; the message
            names the tool.
    """
    specs: list[dict[str, Any]] = []
    for name, description, parameters in tool_descriptions(registry, strict=strict):
        spec: dict[str, Any] = {"name": name}
        if description:
            spec["description"] = description
        spec["input_schema"] = parameters
        if strict:
            spec["strict"] = True
        specs.append(spec)
    return specs


def tool_calls(message: object, *, registry: ToolRegistry | None = None) -> tuple[ToolCall, ...]:
    """The ``tool_use`` blocks of an assistant message, in model order.

    ``message`` is a ``Message`` (SDK object or dict); its other blocks (text, thinking,
    server tools, which Anthropic runs itself) are skipped.  Each call's ``arguments`` is
    a plain copy of the block's ``input`` object; with ``registry``, a top-level ``null``
    for a property that the tool's own schema neither requires nor allows to be ``null``
    is dropped (a strict model's "not given"), so the tool's default applies.

    Raises:
        TypeError: ``message`` (or a block) is neither a dict nor an SDK object.
        ValueError: a ``tool_use`` block has no ``id`` or ``name``.
    """
    content = plain(message, "message").get("content")
    if isinstance(content, str):
        return ()
    calls: list[ToolCall] = []
    for block in plain_items(content, "content block"):
        if block.get("type") != "tool_use":
            continue
        call_id = field(block, "id", "a tool_use block")
        name = field(block, "name", "tool_use block {}", call_id)
        raw = block.get("input")
        arguments: object = thaw(raw) if raw else {}
        if registry is not None:
            arguments = drop_unset_nulls(registry, name, arguments)
        calls.append(make_call(call_id, name, arguments))
    return tuple(calls)


def tool_results(calls: Sequence[ToolCall], outcome: BatchOutcome) -> list[dict[str, Any]]:
    """The ``user`` message that answers every call: ``[{"role": "user", "content": [...]}]``.

    Its content begins with one ``tool_result`` block per call, in model order (the API
    requires them first): ``tool_use_id``, ``is_error``, and the result's text and image
    blocks (images as base64 sources; empty text left out; no ``content`` at all for an
    empty result).  Images of a type the API does not take become a text note.  The
    outcome's contexts follow as text blocks.  Add your own text blocks after them.  With
    no calls and no contexts the list is empty.

    Raises:
        TypeError: ``outcome`` is not a :class:`~trio_tools.BatchOutcome`, or ``calls``
            holds something that is not a :class:`~trio_tools.ToolCall`.
        ValueError: ``calls`` and ``outcome.results`` differ in length.
    """
    blocks: list[dict[str, Any]] = []
    for call, result in pair_results(calls, outcome):
        content: list[dict[str, Any]] = []
        parts = result.content
        if len(parts) == 1 and type(parts[0]) is TextBlock:  # the common case: one text
            if parts[0].text:
                content.append({"type": "text", "text": parts[0].text})
        else:
            for part in content_parts(result):
                if isinstance(part, ImageBlock):
                    source = {"type": "base64", "media_type": part.media_type, "data": part.data}
                    content.append({"type": "image", "source": source})
                elif part.text:
                    content.append({"type": "text", "text": part.text})
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": call.call_id,
            "is_error": result.is_error,
        }
        if content:
            block["content"] = content
        blocks.append(block)
    blocks.extend({"type": "text", "text": context_text(c)} for c in outcome.contexts)
    return [{"role": "user", "content": blocks}] if blocks else []


@final
class StreamAssembler:
    """Assemble the tool calls of a streamed message (``stream=True`` or ``.stream()``).

    :meth:`feed` every event, in order; :meth:`tool_calls` gives the calls assembled so
    far.  A call starts with ``content_block_start`` (a ``tool_use`` block, matched by its
    ``index``); ``content_block_delta`` events with an ``input_json_delta`` add pieces of
    its input JSON.  Other events are ignored, and so is the input that other blocks
    stream (server tools, such as web search, which Anthropic runs itself).  A stream cut
    off in the middle of a call's input leaves it as the partial text: running the call
    then reports ``INVALID_ARGS``.
    """

    __slots__ = ("_calls", "_others")

    def __init__(self) -> None:
        self._calls: dict[int, PartialCall] = {}
        # The other blocks started: server tools stream their input as deltas too.
        self._others: set[int] = set()

    def __repr__(self) -> str:
        return f"<anthropic.StreamAssembler with {len(self._calls)} call(s)>"

    def feed(self, event: object) -> None:
        """Take one streamed event (SDK object or dict).

        Raises:
            TypeError: ``event`` is neither a dict nor an SDK object.
            ValueError: ``event`` has no ``type``, or an ``input_json_delta`` belongs to
                no block that was started.
        """
        data = plain(event, "event")
        kind = data.get("type")
        if not isinstance(kind, str):
            raise ValueError(f"not a Messages stream event (no 'type'): {data!r}")
        if kind == "content_block_start":
            block = plain(data.get("content_block"), "content block")
            index = data.get("index")
            if block.get("type") != "tool_use":
                if isinstance(index, int):
                    self._others.add(index)
                return
            if not isinstance(index, int):
                raise ValueError(f"content_block_start without an int 'index': {data!r}")
            partial = self._calls[index] = PartialCall(block.get("id"), block.get("name"))
            partial.initial = block.get("input") or None
        elif kind == "content_block_delta":
            delta = plain(data.get("delta"), "delta")
            if delta.get("type") != "input_json_delta":
                return
            index = data.get("index")
            found = self._calls.get(index) if isinstance(index, int) else None
            if found is None:
                if index in self._others:
                    return  # a server tool's input (Anthropic runs it itself)
                raise ValueError(f"input_json_delta for no started tool_use block: {data!r}")
            found.parts.append(delta.get("partial_json") or "")

    def tool_calls(self, *, registry: ToolRegistry | None = None) -> tuple[ToolCall, ...]:
        """The calls assembled so far, in model order (``registry`` as for
        :func:`tool_calls`).

        Raises:
            ValueError: a call's id or name never arrived.
        """
        return assembled(self._calls, registry)
