"""Tool results: content blocks, the frozen :class:`ToolResult`, and the error codes."""

# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, cast, final

import attrs

from ._frozen import check_fields_base
from ._json import NotJSONError, freeze
from ._wire import WIRE_VERSION, WireReader, json_to_wire

__all__ = [
    "BLOCKED",
    "DENIED",
    "FINALIZE_FAILED",
    "INVALID_ARGS",
    "NOT_JSON",
    "POST_EXECUTE_FAILED",
    "PRE_EXECUTE_FAILED",
    "TOOL_ABORTED",
    "TOOL_ABORTED_BEFORE_DISPATCH",
    "TOOL_FAILED",
    "TOOL_TIMEOUT",
    "UNKNOWN_TOOL",
    "WRAPPER_FAILED",
    "AdditionalContext",
    "ContentBlock",
    "ErrorInfo",
    "Halt",
    "ImageBlock",
    "TextBlock",
    "ToolOutput",
    "ToolResult",
]

TOOL_ABORTED: Final = "ABORTED"
"""Cancelled after the tool body was invoked: side effects were possible."""
TOOL_ABORTED_BEFORE_DISPATCH: Final = "ABORTED_BEFORE_DISPATCH"
"""Cancelled before the tool body was invoked: no side effects of the body."""
TOOL_TIMEOUT: Final = "TOOL_TIMEOUT"
"""The timeout policy's own deadline fired first."""
UNKNOWN_TOOL: Final = "UNKNOWN_TOOL"
"""No tool of that name was registered when the call entered."""
INVALID_ARGS: Final = "INVALID_ARGS"
"""The arguments did not validate against the tool's argument type."""
NOT_JSON: Final = "NOT_JSON"
"""Arguments or result were not losslessly JSON-serializable."""
DENIED: Final = "DENIED"
"""A pre-execute hook, a guard or the approval step denied the call."""
BLOCKED: Final = "BLOCKED"
"""A post-execute hook blocked the result."""
TOOL_FAILED: Final = "TOOL_FAILED"
"""The tool body (or work it started) raised."""
PRE_EXECUTE_FAILED: Final = "PRE_EXECUTE_FAILED"
"""A pre-execute hook, guard or the approver raised."""
WRAPPER_FAILED: Final = "WRAPPER_FAILED"
"""An around-execute wrapper raised or returned something that is not a ToolResult."""
POST_EXECUTE_FAILED: Final = "POST_EXECUTE_FAILED"
"""A post-execute hook raised."""
FINALIZE_FAILED: Final = "FINALIZE_FAILED"
"""The tool's ``finalize_content`` callback raised or returned something invalid."""

_str = attrs.validators.instance_of(str)


class _TextFields:
    """``TextBlock``'s slots, mutable: the library builds its blocks as one (see ``_frozen``)."""

    __slots__ = ("__weakref__", "text")


@final
@attrs.frozen
class TextBlock(_TextFields):
    """A block of text for the model."""

    text: str = attrs.field(validator=_str)


@final
@attrs.frozen
class ImageBlock:
    """An image for the model: ``data`` is base64 text of the ``media_type`` bytes."""

    media_type: str = attrs.field(validator=_str)
    data: str = attrs.field(validator=_str)


ContentBlock = TextBlock | ImageBlock
"""One block of a tool result's model-visible content."""

_BLOCK_TYPES = (TextBlock, ImageBlock)


def _tuple_of(
    field: str, value: object, kinds: type | tuple[type, ...], what: str
) -> tuple[object, ...]:
    """``value`` (a sequence, not a ``str``) as a tuple whose items are all ``kinds``."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"{field} must be a sequence of {what}, got {value!r}")
    items = tuple(cast("Sequence[object]", value))
    for item in items:
        if not isinstance(item, kinds):
            raise TypeError(f"{field} holds {item!r}, which is not {what}")
    return items


def _content(value: Sequence[ContentBlock]) -> tuple[ContentBlock, ...]:
    blocks = _tuple_of("content", value, _BLOCK_TYPES, "a TextBlock or ImageBlock")
    return cast("tuple[ContentBlock, ...]", blocks)


@final
@attrs.frozen
class AdditionalContext:
    """Extra context for the model's next turn, e.g. a reminder deferred by a tool."""

    text: str = attrs.field(validator=_str)
    source: str | None = attrs.field(default=None, validator=attrs.validators.optional(_str))


def _contexts(value: Sequence[AdditionalContext]) -> tuple[AdditionalContext, ...]:
    contexts = _tuple_of("additional_contexts", value, AdditionalContext, "an AdditionalContext")
    return cast("tuple[AdditionalContext, ...]", contexts)


@final
@attrs.frozen
class Halt:
    """A request to end the agent's turn after this step, with a reason."""

    reason: str = attrs.field(validator=_str)


@final
@attrs.frozen
class ErrorInfo:
    """What went wrong: an exception-style ``name``, a ``code`` and a ``message``."""

    name: str = attrs.field(validator=_str)
    code: str = attrs.field(validator=_str)
    message: str = attrs.field(validator=_str)


@final
@attrs.frozen(kw_only=True)
class ToolOutput:
    """What a tool body may return to attach ``meta`` (frozen JSON) to its content.

    ``content`` is anything a body may return as content: a ``str``, a content block, or a
    sequence of blocks.
    """

    content: str | ContentBlock | Sequence[ContentBlock] = ()
    meta: object = None


def _frozen_meta(value: object) -> object:
    """``meta`` as the frozen JSON a result holds, so that every result's wire form gives it
    back equal; a value that is not JSON is kept as given, for the registry to report as
    ``NOT_JSON`` (and for ``to_dict`` to refuse)."""
    if value is None:
        return None
    try:
        return freeze(value)
    except NotJSONError:
        return value


def _error_matches_flag(instance: Any, _attribute: object, error: ErrorInfo | None) -> None:
    if error is not None and not instance.is_error:
        raise ValueError("a result with error info must have is_error=True")


class _ResultFields:
    """``ToolResult``'s slots, mutable: the library builds its results as one (see
    ``_frozen``)."""

    __slots__ = (
        "__weakref__",
        "additional_contexts",
        "concludes_turn",
        "content",
        "error",
        "halt",
        "is_error",
        "meta",
        "synthetic",
    )


@final
@attrs.frozen(kw_only=True)
class ToolResult(_ResultFields):
    """The one frozen, authoritative result of a tool call.

    ``error.code`` says what happened; for cancellation ``ABORTED`` means the body was
    invoked (side effects were possible) and ``ABORTED_BEFORE_DISPATCH`` that it never was.
    ``synthetic`` marks results made by the scheduler, never by a tool body.
    """

    content: tuple[ContentBlock, ...] = attrs.field(converter=_content)
    is_error: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    error: ErrorInfo | None = attrs.field(
        default=None,
        validator=[
            attrs.validators.optional(attrs.validators.instance_of(ErrorInfo)),
            _error_matches_flag,
        ],
    )
    additional_contexts: tuple[AdditionalContext, ...] = attrs.field(
        default=(), converter=_contexts
    )
    meta: object = attrs.field(default=None, converter=_frozen_meta)
    concludes_turn: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    halt: Halt | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(Halt))
    )
    synthetic: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

    @property
    def code(self) -> str | None:
        """Shorthand for ``error.code``, or ``None`` for a successful result."""
        return None if self.error is None else self.error.code

    @property
    def text(self) -> str:
        """The texts of the content's text blocks joined with ``"\\n"`` (image blocks are
        skipped; ``""`` when there is none)."""
        return "\n".join(block.text for block in self.content if type(block) is TextBlock)

    def to_dict(self) -> dict[str, Any]:
        """The result's wire form: a fresh ``dict`` of plain JSON values, versioned.

        Every field is kept (``synthetic``, ``halt``, contexts, ``meta`` and image blocks
        included), so ``ToolResult.from_dict(result.to_dict()) == result`` for every result
        whose ``meta`` is lossless JSON (a result freezes the ``meta`` it is built with, as
        the registry's results hold it).  The form is ``{"v": 1, "content": [...], "is_error": ...,
        "error": {"name", "code", "message"} | None, "additional_contexts": [{"text",
        "source"}], "meta": ..., "concludes_turn": ..., "halt": {"reason"} | None,
        "synthetic": ...}``; a content block is ``{"type": "text", "text": ...}`` or
        ``{"type": "image", "media_type": ..., "data": ...}``.  Integers of any size stay
        ``int``: encode the dict with an encoder that accepts them.

        Raises:
            ValueError: ``meta`` is not losslessly JSON-serializable (only possible for a
                result built by hand; the registry freezes ``meta``).
        """
        error = self.error
        halt = self.halt
        return {
            "v": WIRE_VERSION,
            "content": [_block_to_dict(block) for block in self.content],
            "is_error": self.is_error,
            "error": None
            if error is None
            else {"name": error.name, "code": error.code, "message": error.message},
            "additional_contexts": [
                {"text": context.text, "source": context.source}
                for context in self.additional_contexts
            ],
            "meta": json_to_wire("ToolResult", "meta", self.meta),
            "concludes_turn": self.concludes_turn,
            "halt": None if halt is None else {"reason": halt.reason},
            "synthetic": self.synthetic,
        }

    @classmethod
    def from_dict(cls, data: object) -> ToolResult:
        """The result whose wire form (see :meth:`to_dict`) is ``data``.

        ``"v"`` and ``"content"`` are required; an absent optional field takes its default.
        ``meta`` comes back frozen (arrays as ``tuple``, objects as the library's immutable
        mapping), as the registry makes it.

        Raises:
            ValueError: ``data`` is not a wire form of this version: the message names the
                first bad field (``content[1].media_type: expected str, got 3``), also an
                unknown one.
        """
        reader = WireReader("ToolResult", "", data)
        reader.only(_RESULT_KEYS)
        reader.version()
        reader.get("content")
        content = tuple(_block_from_dict(block) for block in reader.items("content"))
        is_error = reader.typed("is_error", bool, False, required=False)
        error = None
        error_reader = reader.child("error")
        if error_reader is not None:
            error_reader.only(("name", "code", "message"))
            error = ErrorInfo(
                error_reader.typed("name", str),
                error_reader.typed("code", str),
                error_reader.typed("message", str),
            )
            if not is_error:
                reader.fail("error", "a result with error info must have is_error true")
        contexts: list[AdditionalContext] = []
        for context in reader.items("additional_contexts"):
            context.only(("text", "source"))
            contexts.append(
                AdditionalContext(context.typed("text", str), context.optional_str("source"))
            )
        halt = None
        halt_reader = reader.child("halt")
        if halt_reader is not None:
            halt_reader.only(("reason",))
            halt = Halt(halt_reader.typed("reason", str))
        return make_result(
            content,
            is_error=is_error,
            error=error,
            additional_contexts=tuple(contexts),
            meta=reader.frozen_json("meta"),
            concludes_turn=reader.typed("concludes_turn", bool, False, required=False),
            halt=halt,
            synthetic=reader.typed("synthetic", bool, False, required=False),
        )


_RESULT_KEYS = (
    "v",
    "content",
    "is_error",
    "error",
    "additional_contexts",
    "meta",
    "concludes_turn",
    "halt",
    "synthetic",
)


def _block_to_dict(block: ContentBlock) -> dict[str, Any]:
    if type(block) is TextBlock:
        return {"type": "text", "text": block.text}
    return {"type": "image", "media_type": block.media_type, "data": block.data}


def _block_from_dict(reader: WireReader) -> ContentBlock:
    kind = reader.get("type")
    if kind == "text":
        reader.only(("type", "text"))
        return TextBlock(reader.typed("text", str))
    if kind == "image":
        reader.only(("type", "media_type", "data"))
        return ImageBlock(reader.typed("media_type", str), reader.typed("data", str))
    reader.fail("type", f"expected 'text' or 'image', got {kind!r}")


_FIELDS = tuple(a.name for a in attrs.fields(ToolResult))
# The library's own results are built as their slots' base, then given their frozen class
# (see ``_frozen``): a plain store per field instead of a descriptor call.
check_fields_base(ToolResult)
check_fields_base(TextBlock)
_new = object.__new__


def make_result(
    content: tuple[ContentBlock, ...],
    *,
    is_error: bool = False,
    error: ErrorInfo | None = None,
    additional_contexts: tuple[AdditionalContext, ...] = (),
    meta: object = None,
    concludes_turn: bool = False,
    halt: Halt | None = None,
    synthetic: bool = False,
) -> ToolResult:
    """Build a :class:`ToolResult` from values the library already knows are valid.

    The public constructor validates and converts every field; this is the registry's hot
    path, where every value was made or validated by the library itself.
    """
    result: Any = _new(_ResultFields)
    result.content = content
    result.is_error = is_error
    result.error = error
    result.additional_contexts = additional_contexts
    result.meta = meta
    result.concludes_turn = concludes_turn
    result.halt = halt
    result.synthetic = synthetic
    result.__class__ = ToolResult
    made: ToolResult = result  # the base's stores are untyped: the return is typed here
    return made


def text_result(text: str) -> ToolResult:
    """``make_result((text_block(text),))``: a body's usual success, one text block, built
    with no argument handling (every call that returns a ``str`` makes one)."""
    block: Any = _new(_TextFields)
    block.text = text
    block.__class__ = TextBlock
    result: Any = _new(_ResultFields)
    result.content = (block,)
    result.is_error = False
    result.error = None
    result.additional_contexts = ()
    result.meta = None
    result.concludes_turn = False
    result.halt = None
    result.synthetic = False
    result.__class__ = ToolResult
    made: ToolResult = result  # (see make_result)
    return made


def text_block(text: str) -> TextBlock:
    """``TextBlock(text)`` for a ``text`` already known to be a ``str``, without validation."""
    block: Any = _new(_TextFields)
    block.text = text
    block.__class__ = TextBlock
    made: TextBlock = block  # (see make_result)
    return made


def replace_result(result: ToolResult, **changes: Any) -> ToolResult:
    """``attrs.evolve`` without re-validation, for values the library made or validated."""
    copy: Any = _new(_ResultFields)
    for name in _FIELDS:
        setattr(copy, name, changes[name] if name in changes else getattr(result, name))
    copy.__class__ = ToolResult
    made: ToolResult = copy  # (see make_result)
    return made


def error_result(
    name: str,
    code: str,
    message: str,
    *,
    additional_contexts: tuple[AdditionalContext, ...] = (),
    halt: Halt | None = None,
    synthetic: bool = False,
) -> ToolResult:
    """A registry-made error: the model text is ``Error: {message}``."""
    return make_result(
        (text_block(f"Error: {message}"),),
        is_error=True,
        error=ErrorInfo(name, code, message),
        additional_contexts=additional_contexts,
        halt=halt,
        synthetic=synthetic,
    )


def aborted(
    *,
    body_invoked: bool,
    additional_contexts: tuple[AdditionalContext, ...] = (),
    halt: Halt | None = None,
    synthetic: bool = False,
) -> ToolResult:
    """The cancellation result: ``ABORTED`` if the body was invoked, else before dispatch.

    Results are frozen: when nothing varies, every call shares one of two results.
    """
    if not additional_contexts and halt is None and not synthetic:
        return _ABORTED if body_invoked else _ABORTED_BEFORE_DISPATCH
    return _aborted(body_invoked, additional_contexts, halt, synthetic)


def _aborted(
    body_invoked: bool,
    additional_contexts: tuple[AdditionalContext, ...],
    halt: Halt | None,
    synthetic: bool,
) -> ToolResult:
    if body_invoked:
        code, message = TOOL_ABORTED, "tool call aborted"
    else:
        code, message = TOOL_ABORTED_BEFORE_DISPATCH, "tool call aborted before dispatch"
    return error_result(
        "AbortError",
        code,
        message,
        additional_contexts=additional_contexts,
        halt=halt,
        synthetic=synthetic,
    )


_ABORTED = _aborted(True, (), None, False)
_ABORTED_BEFORE_DISPATCH = _aborted(False, (), None, False)
