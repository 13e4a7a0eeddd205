"""OpenAI Responses API: tool specs, tool calls in, tool results out, stream assembly.

Inputs may be the ``openai`` SDK's objects (anything with ``model_dump()``) or plain dicts;
outputs are plain, mutable, JSON-ready dicts and lists, ready for
``client.responses.create(tools=..., input=...)``.  Nothing here imports the SDK.

* :func:`tool_specs`: the ``tools=`` parameter.
* :func:`tool_calls`: the :class:`~trio_tools.ToolCall`\\ s of a response.
* :func:`tool_results`: the input items that answer every call, in model order.
* :class:`StreamAssembler`: the tool calls of a streamed response, from its events.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast, final

from .._registry import ToolRegistry
from .._results import ImageBlock
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
    """The ``tools=`` parameter: one ``{"type": "function", "name": ..., ...}`` per tool.

    Each spec has the tool's ``name``, ``description`` (when it has one), ``parameters``
    (its JSON Schema, thawed into plain dicts and lists) and ``strict``, always given
    (the API's default is strict).  With ``strict=True`` the schema is rewritten to the
    strict subset: every property of every object schema (``$defs`` included) required,
    the optional ones nullable, ``additionalProperties: false``, no ``default``.  Pass the
    same registry to :func:`tool_calls` so that the ``null``\\ s a strict model sends for
    left-out properties are dropped again.

    Raises:
        ValueError: ``strict`` and a tool's schema cannot be made strict (a free-form
            object such as ``dict[str, int]``, a tuple); the message names the tool.
    """
    specs: list[dict[str, Any]] = []
    for name, description, parameters in tool_descriptions(registry, strict=strict):
        spec: dict[str, Any] = {"type": "function", "name": name}
        if description:
            spec["description"] = description
        spec["parameters"] = parameters
        spec["strict"] = strict
        specs.append(spec)
    return specs


def _output_items(response: object) -> list[dict[str, Any]]:
    if isinstance(response, list | tuple):
        return plain_items(cast("Sequence[object]", response), "output item")
    return plain_items(plain(response, "response").get("output"), "output item")


def tool_calls(response: object, *, registry: ToolRegistry | None = None) -> tuple[ToolCall, ...]:
    """The ``function_call`` items of a response (or of its ``output`` list), in model order.

    ``response`` is a ``Response`` (SDK object or dict) or its ``output`` list; other
    items (messages, reasoning, built-in tools) are skipped.  Each call's id is the item's
    ``call_id``; its ``arguments`` is the model's JSON text, unchanged unless ``registry``
    is given: then a top-level ``null`` for a property that the tool's own schema neither
    requires nor allows to be ``null`` is dropped (a strict model's "not given"), so the
    tool's default applies.

    Raises:
        TypeError: ``response`` (or an item) is neither a dict nor an SDK object.
        ValueError: a ``function_call`` item has no ``call_id`` or ``name``.
    """
    calls: list[ToolCall] = []
    for item in _output_items(response):
        if item.get("type") != "function_call":
            continue
        call_id = field(item, "call_id", "a function_call item")
        name = field(item, "name", "function_call {}", call_id)
        arguments = item.get("arguments") or ""
        calls.append(make_call(call_id, name, drop_unset_nulls(registry, name, arguments)))
    return tuple(calls)


def tool_results(calls: Sequence[ToolCall], outcome: BatchOutcome) -> list[dict[str, Any]]:
    """The input items that answer every call, in model order.

    One ``{"type": "function_call_output", "call_id": ..., "output": ...}`` per call: the
    output is the result's text (text blocks joined with newlines; the ``Error: ...`` text
    for errors and cancelled calls), or, when the result has images, a list of
    ``input_text`` and ``input_image`` parts (images as ``data:`` URLs) in content order.
    The outcome's contexts follow as one ``user`` message item of ``input_text`` parts.
    Images of a type the API does not take become a text note.  Without
    ``previous_response_id``, send the response's own output items before these.

    Raises:
        TypeError: ``outcome`` is not a :class:`~trio_tools.BatchOutcome`, or ``calls``
            holds something that is not a :class:`~trio_tools.ToolCall`.
        ValueError: ``calls`` and ``outcome.results`` differ in length.
    """
    items: list[dict[str, Any]] = []
    for call, result in pair_results(calls, outcome):
        parts = content_parts(result)
        output: str | list[dict[str, Any]]
        if any(isinstance(part, ImageBlock) for part in parts):
            output = [
                {"type": "input_image", "image_url": data_url(part), "detail": "auto"}
                if isinstance(part, ImageBlock)
                else {"type": "input_text", "text": part.text}
                for part in parts
                if isinstance(part, ImageBlock) or part.text
            ]
        else:
            output = joined_text(parts)
        items.append({"type": "function_call_output", "call_id": call.call_id, "output": output})
    if outcome.contexts:
        items.append(
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": context_text(c)} for c in outcome.contexts
                ],
            }
        )
    return items


@final
class StreamAssembler:
    """Assemble the tool calls of a streamed response (``stream=True``).

    :meth:`feed` every event, in order; :meth:`tool_calls` gives the calls assembled so
    far.  A call starts with ``response.output_item.added`` (a ``function_call`` item);
    ``response.function_call_arguments.delta`` events add pieces of its arguments (matched
    by ``output_index``, else ``item_id``); ``response.function_call_arguments.done`` and
    ``response.output_item.done`` give the complete arguments, which win.  Other events
    are ignored.  A stream cut off in the middle of a call's arguments leaves them as the
    partial text: running the call then reports ``INVALID_ARGS``.
    """

    __slots__ = ("_by_item", "_calls")

    def __init__(self) -> None:
        self._calls: dict[int, PartialCall] = {}
        self._by_item: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<openai_responses.StreamAssembler with {len(self._calls)} call(s)>"

    def _find(self, event: dict[str, Any]) -> PartialCall | None:
        index = event.get("output_index")
        if isinstance(index, int) and index in self._calls:
            return self._calls[index]
        item_id = event.get("item_id")
        if isinstance(item_id, str) and item_id in self._by_item:
            return self._calls[self._by_item[item_id]]
        return None

    def _start(self, event: dict[str, Any], item: dict[str, Any]) -> PartialCall:
        index = event.get("output_index")
        if not isinstance(index, int):
            raise ValueError(f"output item event without an int 'output_index': {event!r}")
        partial = self._calls.get(index)
        if partial is None:
            partial = self._calls[index] = PartialCall()
        partial.call_id = item.get("call_id") or partial.call_id
        partial.name = item.get("name") or partial.name
        if isinstance(item.get("id"), str):
            self._by_item[item["id"]] = index
        return partial

    def feed(self, event: object) -> None:
        """Take one streamed event (SDK object or dict).

        Raises:
            TypeError: ``event`` is neither a dict nor an SDK object.
            ValueError: ``event`` has no ``type``, or an arguments event names no call
                that was started.
        """
        data = plain(event, "event")
        kind = data.get("type")
        if not isinstance(kind, str):
            raise ValueError(f"not a Responses stream event (no 'type'): {data!r}")
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = plain(data.get("item"), "output item")
            if item.get("type") != "function_call":
                return
            partial = self._start(data, item)
            arguments = item.get("arguments")
            if kind == "response.output_item.done" and isinstance(arguments, str):
                partial.final = arguments
            elif arguments:
                partial.parts.append(arguments)
        elif kind in (
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
        ):
            found = self._find(data)
            if found is None:
                raise ValueError(f"{kind} for a call the stream never started: {data!r}")
            if kind.endswith(".delta"):
                found.parts.append(data.get("delta") or "")
            elif isinstance(data.get("arguments"), str):
                found.final = data["arguments"]

    def tool_calls(self, *, registry: ToolRegistry | None = None) -> tuple[ToolCall, ...]:
        """The calls assembled so far, in model order (``registry`` as for
        :func:`tool_calls`).

        Raises:
            ValueError: a call's id or name never arrived.
        """
        return assembled(self._calls, registry)
