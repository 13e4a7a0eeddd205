"""Pure converters between trio_tools values and the MCP SDK's protocol types.

Everything here is a function of plain data: no I/O, no Trio.  The server
(``_server.py``) and the mount (``_mount.py``) are the edges that do the waiting.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final, cast

import mcp.types as types

from .._execution import ToolDefinition
from .._json import FrozenDict, NotJSONError, freeze, thaw, to_compact_json
from .._results import (
    TOOL_FAILED,
    ContentBlock,
    ErrorInfo,
    ImageBlock,
    TextBlock,
    ToolResult,
    make_result,
)
from .._util import logger

__all__ = [
    "MCP_CONNECTION_LOST",
    "RESULT_META_KEY",
    "call_tool_result",
    "mcp_tool",
    "progress_from_mcp",
    "progress_to_mcp",
    "tool_result",
]

RESULT_META_KEY: Final = "trio_tools/result"
"""The ``_meta`` key of a served ``CallToolResult`` that holds the result's wire form."""

MCP_CONNECTION_LOST: Final = "MCP_CONNECTION_LOST"
"""A mounted tool's MCP connection closed before the remote call answered."""

_REMOTE_ERROR_NAME = "MCPToolError"


def mcp_tool(definition: ToolDefinition[Any]) -> types.Tool:
    """The ``tools/list`` entry of a registered tool.

    ``concurrency_safe=True`` is advertised as ``readOnlyHint``: a tool that may run beside
    any other call is one that does not change what the others see.  A callable
    ``concurrency_safe`` decides per call, so it gives no hint.
    """
    annotations = (
        types.ToolAnnotations(read_only_hint=True) if definition.concurrency_safe is True else None
    )
    schema = cast("dict[str, Any]", thaw(definition.parameters))
    return types.Tool(
        name=definition.name,
        description=definition.description or None,
        input_schema=schema,
        annotations=annotations,
    )


def _is_object(value: object) -> bool:
    return isinstance(value, Mapping)


def _wire_block(block: ContentBlock) -> dict[str, str]:
    if type(block) is TextBlock:
        return {"type": "text", "text": block.text}
    assert type(block) is ImageBlock
    return {"type": "image", "data": block.data, "mimeType": block.media_type}


def call_tool_result(result: ToolResult) -> dict[str, Any]:
    """The ``CallToolResult`` of a published result, in its wire (JSON) form.

    Text and image blocks become MCP content, ``isError`` is ``result.is_error``, a
    ``meta`` that is a JSON object becomes ``structuredContent``, and the whole result's
    wire form goes in ``_meta`` under :data:`RESULT_META_KEY`, for a trio_tools client.
    A plain dict rather than the SDK's model: the SDK validates the result against the
    connection's protocol version either way, and building the model first would only
    add to every call.
    """
    reply: dict[str, Any] = {
        "content": [_wire_block(block) for block in result.content],
        "isError": result.is_error,
        "resultType": "complete",
        "_meta": {RESULT_META_KEY: result.to_dict()},
    }
    meta: object = result.meta
    if _is_object(meta):
        reply["structuredContent"] = thaw(meta)
    return reply


def _block(block: types.ContentBlock) -> ContentBlock:
    if isinstance(block, types.TextContent):
        return TextBlock(block.text)
    if isinstance(block, types.ImageContent):
        return ImageBlock(block.mime_type, block.data)
    if isinstance(block, types.EmbeddedResource) and isinstance(
        block.resource, types.TextResourceContents
    ):
        return TextBlock(block.resource.text)
    # Audio, blobs and resource links have no trio_tools block: the model still sees what
    # the server sent, as JSON text.
    return TextBlock(
        json.dumps(
            block.model_dump(by_alias=True, mode="json", exclude_none=True),
            separators=(",", ":"),
            ensure_ascii=False,
        )
    )


def _structured_meta(reply: types.CallToolResult) -> object:
    structured: object = reply.structured_content
    if structured is None:
        return None
    try:
        return freeze(structured)
    except NotJSONError:
        # Not reachable for JSON that came off a wire; a server in the same process may
        # still hand over anything.  The model-visible content is unaffected.
        logger.warning("structuredContent of an MCP tool result is not JSON; dropped")
        return None


def tool_result(reply: types.CallToolResult) -> ToolResult:
    """The trio_tools result for a remote ``CallToolResult``.

    A reply from a trio_tools server carries its result's wire form under
    :data:`RESULT_META_KEY`: that result comes back exactly as the server published it,
    code included.  Any other reply maps field by field: content (text, images, text
    resources; anything else as JSON text), ``structuredContent`` as ``meta``, and
    ``isError`` as an error with code ``TOOL_FAILED`` whose message is the content's text.
    """
    meta = reply.meta or {}
    wire = meta.get(RESULT_META_KEY)
    if wire is not None:
        try:
            return ToolResult.from_dict(wire)
        except ValueError:
            # A newer trio_tools on the other side, or a server that merely reused the key.
            logger.warning("ignoring an unreadable %r in an MCP tool result", RESULT_META_KEY)
    content = tuple(_block(block) for block in reply.content)
    structured = _structured_meta(reply)
    if not reply.is_error:
        return make_result(content, meta=structured)
    text = "\n".join(block.text for block in content if type(block) is TextBlock)
    return make_result(
        content,
        is_error=True,
        error=ErrorInfo(_REMOTE_ERROR_NAME, TOOL_FAILED, text or "the MCP tool reported an error"),
        meta=structured,
    )


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            return None
        return number if math.isfinite(number) else None
    return None


def _mapped_progress(progress: object) -> tuple[float, float | None, str | None] | None:
    if not _is_object(progress):
        return None
    fields = cast("Mapping[str, object]", progress)
    value = _number(fields.get("progress"))
    if value is None:
        return None
    message = fields.get("message")
    return value, _number(fields.get("total")), message if type(message) is str else None


def progress_to_mcp(progress: object, count: int) -> tuple[float, float | None, str | None]:
    """``(progress, total, message)`` of a ``notifications/progress`` for a body's report.

    A number is the progress itself.  A mapping with a numeric ``"progress"`` gives it,
    with its optional numeric ``"total"`` and text ``"message"`` (the shape a mounted tool
    reports, so progress crosses several hops unchanged).  Anything else is the
    ``count``-th report, with the value as the message (text as is, other values as
    compact JSON).
    """
    number = _number(progress)
    if number is not None:
        return number, None, None
    mapped = _mapped_progress(progress)
    if mapped is not None:
        return mapped
    if type(progress) is str:
        return float(count), None, progress
    try:
        return float(count), None, to_compact_json(freeze(progress))
    except NotJSONError:
        return float(count), None, repr(progress)


def progress_from_mcp(progress: float, total: float | None, message: str | None) -> object:
    """What a mounted tool reports for a remote ``notifications/progress``.

    A frozen mapping ``{"progress": ..., "total": ..., "message": ...}`` without the
    fields the notice left out; :func:`progress_to_mcp` reads it back unchanged.
    """
    fields: dict[str, object] = {"progress": progress}
    if total is not None:
        fields["total"] = total
    if message is not None:
        fields["message"] = message
    return FrozenDict(fields)
