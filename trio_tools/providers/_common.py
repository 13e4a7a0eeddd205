"""What the three provider formats share: reading SDK objects, thawing, content, null-dropping.

Everything here is a pure function of plain data (or a small mutable record for stream
assembly): no I/O, no SDK import.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

from .._json import _parse_int, to_compact_json
from .._json import thaw as _thaw
from .._registry import ToolRegistry
from .._results import AdditionalContext, ImageBlock, TextBlock, ToolResult
from .._scheduler import BatchOutcome, ToolCall
from ._schema import allows_null
from ._strict import strict_schema

__all__ = [
    "SUPPORTED_IMAGE_TYPES",
    "PartialCall",
    "assembled",
    "content_parts",
    "context_text",
    "data_url",
    "drop_unset_nulls",
    "field",
    "joined_text",
    "make_call",
    "pair_results",
    "plain",
    "plain_items",
    "thaw",
    "tool_descriptions",
]

JSONDict = dict[str, Any]

SUPPORTED_IMAGE_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""The image types both OpenAI and Anthropic accept as base64 input."""


# ---------------------------------------------------------------------------------------
# Reading input: SDK objects or plain dicts


def _named(what: str, owner: str | None) -> str:
    """``what`` for an error message, its ``{}`` filled with ``repr(owner)`` (built only
    when it is needed: the converters name each call's id in their messages)."""
    return what if owner is None else what.format(repr(owner))


def plain(value: object, what: str, owner: str | None = None) -> JSONDict:
    """``value`` as a mapping: a dict as is, an SDK object through its ``model_dump()``.

    Raises:
        TypeError: ``value`` is neither a mapping nor has a ``model_dump()`` giving one
            (the message names ``what``, see :func:`_named`).
    """
    if type(value) is dict or isinstance(value, Mapping):
        return cast(JSONDict, value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        dumped = dump()
        if isinstance(dumped, Mapping):
            return cast(JSONDict, dumped)
    raise TypeError(
        f"{_named(what, owner)} must be a dict or an SDK object with model_dump(), got {value!r}"
    )


def plain_items(value: object, what: str) -> list[JSONDict]:
    """A sequence (``None`` = empty) of dicts or SDK objects, each as a mapping."""
    if value is None:
        return []
    if type(value) is not list and (
        isinstance(value, str | bytes) or not isinstance(value, Sequence)
    ):
        raise TypeError(f"{what} must be a list, got {value!r}")
    items = cast("Sequence[object]", value)
    # One cast for the list (a `cast` per item is a function call per item).
    return cast(
        "list[JSONDict]", [item if type(item) is dict else plain(item, what) for item in items]
    )


_CALL_SLOTS = tuple(ToolCall.__dict__[name].__set__ for name in ("call_id", "name", "arguments"))


def make_call(call_id: str, name: str, arguments: object) -> ToolCall:
    """``ToolCall(call_id, name, arguments)`` for an id and name already known to be
    ``str`` (checked by :func:`field`), without the validators: the converters' hot path."""
    call = object.__new__(ToolCall)
    set_id, set_name, set_arguments = _CALL_SLOTS
    set_id(call, call_id)
    set_name(call, name)
    set_arguments(call, arguments)
    return call


def field(data: Mapping[str, Any], key: str, what: str, owner: str | None = None) -> str:
    """The non-empty ``str`` at ``data[key]``, or a ``ValueError`` naming what is missing
    (``what`` as for :func:`plain`)."""
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{_named(what, owner)} has no {key!r} (a non-empty str), got {value!r}")
    return value


def thaw(value: object) -> Any:
    """A plain, mutable deep copy of a JSON value: objects to ``dict``, arrays to ``list``.

    The registry hands out frozen mappings and tuples, which no SDK and no ``json.dumps``
    round trip treats as the caller expects; the output of every converter is thawed.
    """
    return _thaw(value)


def tool_descriptions(registry: ToolRegistry, *, strict: bool) -> list[tuple[str, str, JSONDict]]:
    """``(name, description, parameters)`` for every tool, the schema thawed (and strict).

    Raises:
        ValueError: ``strict`` and a tool's schema has no strict form (the message names
            the tool).
    """
    out: list[tuple[str, str, JSONDict]] = []
    for schema in registry.schemas():
        parameters = cast(JSONDict, thaw(schema.parameters))
        if strict:
            parameters = strict_schema(parameters, tool=schema.name)
        out.append((schema.name, schema.description, parameters))
    return out


# ---------------------------------------------------------------------------------------
# Tool calls in: strict mode's nulls


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"number out of range: {text}")
    return number


def _reject_constant(text: str) -> object:
    raise ValueError(f"{text} is not JSON")


# As the registry parses arguments: integers of any size (past Python's digit limit too).
_DECODER = json.JSONDecoder(
    parse_int=_parse_int, parse_float=_finite_float, parse_constant=_reject_constant
)


def drop_unset_nulls(registry: ToolRegistry | None, name: str, arguments: object) -> object:
    """The arguments without the top-level ``null``\\ s that mean "not given".

    A strict schema makes every optional property required but nullable, so a strict model
    sends ``null`` for each one it leaves out.  A top-level ``null`` is dropped (so that the
    tool's default applies) exactly when the tool's own schema neither requires the
    property nor allows it to be ``null``.  Without ``registry``, for an unknown tool, or
    for arguments that are not a JSON object (text that does not parse included), the
    arguments are returned unchanged; JSON text stays JSON text.
    """
    if registry is None:
        return arguments
    definition = registry.get(name)
    if definition is None:
        return arguments
    parsed: object = arguments
    if isinstance(arguments, str):
        try:
            parsed = _DECODER.decode(arguments)
        except (ValueError, RecursionError):
            return arguments
    if not isinstance(parsed, Mapping):
        return arguments
    values = cast("Mapping[str, object]", parsed)
    schema = definition.parameters
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return arguments
    known = cast("Mapping[str, object]", properties)
    required_keys = schema.get("required")
    required = (
        set(cast("Sequence[str]", required_keys))
        if isinstance(required_keys, list | tuple)
        else set[str]()
    )
    dropped = {
        key
        for key, value in values.items()
        if value is None
        and key not in required
        and key in known
        and not allows_null(known[key], schema)
    }
    if not dropped:
        return arguments
    kept = {key: thaw(value) for key, value in values.items() if key not in dropped}
    return to_compact_json(kept) if isinstance(arguments, str) else kept


# ---------------------------------------------------------------------------------------
# Tool results out


def pair_results(
    calls: Sequence[ToolCall], outcome: BatchOutcome
) -> list[tuple[ToolCall, ToolResult]]:
    """The calls zipped with the outcome's results, checking they belong together.

    Raises:
        TypeError: an item of ``calls`` is not a :class:`~trio_tools.ToolCall`, or
            ``outcome`` is not a :class:`~trio_tools.BatchOutcome`.
        ValueError: the numbers of calls and results differ.
    """
    if not isinstance(outcome, BatchOutcome):
        raise TypeError(f"outcome must be a BatchOutcome, got {outcome!r}")
    calls = tuple(calls)
    for call in calls:
        if not isinstance(call, ToolCall):
            raise TypeError(f"calls must hold ToolCall objects, got {call!r}")
    if len(calls) != len(outcome.results):
        raise ValueError(
            f"{len(calls)} call(s) but {len(outcome.results)} result(s): pass the calls "
            "that were given to run_tool_calls, in the same order"
        )
    return list(zip(calls, outcome.results, strict=True))


def content_parts(result: ToolResult) -> list[TextBlock | ImageBlock]:
    """The result's content with images of unsupported types replaced by a text note."""
    content = result.content
    if len(content) == 1 and type(content[0]) is TextBlock:
        return [content[0]]  # the common case: one text block
    parts: list[TextBlock | ImageBlock] = []
    for block in content:
        if isinstance(block, ImageBlock) and block.media_type not in SUPPORTED_IMAGE_TYPES:
            parts.append(
                TextBlock(f"[image omitted: {block.media_type} is not a supported image type]")
            )
        else:
            parts.append(block)
    return parts


def joined_text(parts: Sequence[TextBlock | ImageBlock]) -> str:
    """The text parts' texts joined with newlines (images left out)."""
    if len(parts) == 1 and type(parts[0]) is TextBlock:
        return parts[0].text
    return "\n".join(part.text for part in parts if isinstance(part, TextBlock))


def data_url(image: ImageBlock) -> str:
    """The image as a ``data:`` URL (its ``data`` is already base64 text)."""
    return f"data:{image.media_type};base64,{image.data}"


def context_text(context: AdditionalContext) -> str:
    """How an additional context reads to the model: its text, tagged with its source."""
    return context.text if context.source is None else f"[{context.source}] {context.text}"


# ---------------------------------------------------------------------------------------
# Stream assembly


class PartialCall:
    """One tool call being assembled from a stream."""

    __slots__ = ("call_id", "final", "initial", "name", "parts")

    def __init__(self, call_id: str | None = None, name: str | None = None) -> None:
        self.call_id = call_id
        self.name = name
        self.parts: list[str] = []
        self.final: str | None = None  # the complete arguments, when the stream said them
        self.initial: object = None  # arguments given up front (Anthropic's ``input``)

    def to_call(self, position: int, registry: ToolRegistry | None) -> ToolCall:
        """The assembled :class:`ToolCall`; cut-off arguments stay as their partial text.

        Raises:
            ValueError: the stream never said the call's id or name.
        """
        if not self.call_id or not self.name:
            raise ValueError(
                f"streamed tool call #{position} is incomplete: id {self.call_id!r}, "
                f"name {self.name!r}"
            )
        if not isinstance(self.call_id, str) or not isinstance(self.name, str):
            raise ValueError(
                f"streamed tool call #{position} has a non-str id {self.call_id!r} or name "
                f"{self.name!r}"
            )
        if self.final is not None:
            arguments: object = self.final
        elif self.parts:
            arguments = "".join(self.parts)
        elif self.initial is not None:
            arguments = thaw(self.initial)
        else:
            arguments = ""
        return make_call(self.call_id, self.name, drop_unset_nulls(registry, self.name, arguments))


def assembled(
    partials: Mapping[int, PartialCall], registry: ToolRegistry | None
) -> tuple[ToolCall, ...]:
    """The calls of a stream, in the order of their position in the message."""
    return tuple(
        partials[index].to_call(position, registry)
        for position, index in enumerate(sorted(partials))
    )
