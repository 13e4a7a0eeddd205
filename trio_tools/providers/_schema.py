"""JSON Schema questions the provider formats ask: does ``null`` satisfy this schema?"""

# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

__all__ = ["allows_null"]


def _resolve(schema: object, root: Mapping[str, Any]) -> object:
    """Follow local ``$ref``\\ s (``#/$defs/X``, ``#/definitions/X``); unknown refs: ``{}``."""
    for _ in range(64):  # a bound, against refs that point at each other
        if not isinstance(schema, Mapping):
            return schema
        node = cast("Mapping[str, object]", schema)
        ref = node.get("$ref")
        if ref is None:
            return node
        target: object = root
        if isinstance(ref, str) and ref.startswith("#/"):
            for part in ref[2:].split("/"):
                target = (
                    cast("Mapping[str, object]", target).get(part)
                    if isinstance(target, Mapping)
                    else None
                )
        else:
            target = None
        if target is None:
            return {}  # unknown: anything, null included
        schema = target
    return {}


def allows_null(schema: object, root: Mapping[str, Any]) -> bool:
    """Whether JSON ``null`` may satisfy ``schema`` (conservatively ``True`` when unsure)."""
    schema = _resolve(schema, root)
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, Mapping):
        return True
    node = cast("Mapping[str, object]", schema)
    kind = node.get("type")
    if isinstance(kind, str) and kind != "null":
        return False
    if isinstance(kind, list | tuple) and "null" not in cast("Sequence[object]", kind):
        return False
    enum = node.get("enum")
    if isinstance(enum, list | tuple) and None not in cast("Sequence[object]", enum):
        return False
    if "const" in node and node["const"] is not None:
        return False
    for key in ("anyOf", "oneOf"):
        options = node.get(key)
        if isinstance(options, list | tuple) and not any(
            allows_null(option, root) for option in cast("Sequence[object]", options)
        ):
            return False
    options = node.get("allOf")
    return not (
        isinstance(options, list | tuple)
        and not all(allows_null(option, root) for option in cast("Sequence[object]", options))
    )
