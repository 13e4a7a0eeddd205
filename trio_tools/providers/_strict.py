"""Rewrite a tool's JSON Schema into the strict subset that OpenAI's strict mode accepts.

Strict mode (``"strict": true``) makes the model's arguments always match the schema, but
only for a subset of JSON Schema: every object schema lists all of its properties in
``required`` and has ``additionalProperties: false``.  So each property that was optional
becomes required but nullable (the model sends ``null`` for "not given", which
the tool calls' null-dropping takes away again), and ``default``
(not part of the subset) is dropped.  Free-form objects (``dict[str, int]``, a raw tool's
``{"type": "object"}``) and tuples have no strict form: they raise ``ValueError``.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from ._schema import allows_null

__all__ = ["strict_schema"]

JSONDict = dict[str, Any]

# Annotations with no meaning for validation that the strict subset does not accept.
_DROPPED = ("default", "discriminator")
_SCHEMA_LISTS = ("anyOf", "allOf")
_DEFINITIONS = ("$defs", "definitions")


class _NotStrict(Exception):
    def __init__(self, why: str, path: str) -> None:
        super().__init__(f"{why} at {path}")


def strict_schema(parameters: Mapping[str, Any], *, tool: str) -> JSONDict:
    """A strict copy of the (thawed) ``parameters`` of ``tool``.

    Raises:
        ValueError: the schema has no strict form; the message names the tool, the reason
            and where in the schema it is.
    """
    try:
        if parameters.get("type") != "object":
            raise _NotStrict("the arguments are not a JSON object", "#")
        return _rewrite(parameters, parameters, "#")
    except _NotStrict as exc:
        raise ValueError(f"tool {tool!r} cannot be made strict: {exc}") from None


def _rewrite(node: object, root: Mapping[str, Any], path: str) -> JSONDict:
    if not isinstance(node, Mapping):
        raise _NotStrict(f"{node!r} is not a schema object", path)
    schema = {
        key: value for key, value in cast("Mapping[str, Any]", node).items() if key not in _DROPPED
    }
    if "oneOf" in schema:
        # Exactly-one-of is not in the subset; any-of accepts the same arguments for the
        # unions Python types describe (their options do not overlap).
        schema["anyOf"] = schema.pop("oneOf")
    for key in ("not", "prefixItems", "patternProperties", "if", "dependentSchemas"):
        if key in schema:
            raise _NotStrict(f"{key!r} is not supported in strict mode", path)
    for key in _DEFINITIONS:
        if key in schema:
            definitions = cast("Mapping[str, object]", schema[key])
            schema[key] = {
                name: _rewrite(sub, root, f"{path}/{key}/{name}")
                for name, sub in definitions.items()
            }
    for key in _SCHEMA_LISTS:
        if key in schema:
            options = cast("Sequence[object]", schema[key])
            schema[key] = [
                _rewrite(option, root, f"{path}/{key}/{index}")
                for index, option in enumerate(options)
            ]
    if isinstance(schema.get("items"), Mapping):
        schema["items"] = _rewrite(schema["items"], root, f"{path}/items")
    kind = schema.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in schema:
        _rewrite_object(schema, root, path)
    return schema


def _rewrite_object(schema: JSONDict, root: Mapping[str, Any], path: str) -> None:
    if schema.get("additionalProperties", False) is not False:
        raise _NotStrict(
            "an object with 'additionalProperties' (e.g. a dict[str, ...]) has no strict form",
            path,
        )
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        raise _NotStrict("a free-form object (no 'properties') has no strict form", path)
    required = set(cast("Sequence[str]", schema.get("required", ())))
    rewritten: JSONDict = {}
    for name, sub in cast("Mapping[str, object]", properties).items():
        strict = _rewrite(sub, root, f"{path}/properties/{name}")
        rewritten[name] = strict if name in required else _nullable(strict, root)
    schema["properties"] = rewritten
    schema["required"] = list(rewritten)
    schema["additionalProperties"] = False


def _nullable(schema: JSONDict, root: Mapping[str, Any]) -> JSONDict:
    """``schema`` that also accepts ``null``, in a form the strict subset accepts."""
    if allows_null(schema, root):
        return schema
    if "$ref" in schema or "const" in schema or "allOf" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    if "anyOf" in schema:
        return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}
    nullable = dict(schema)
    kind = schema.get("type")
    if isinstance(kind, str):
        nullable["type"] = [kind, "null"]
    elif isinstance(kind, list):
        nullable["type"] = [*cast("list[object]", kind), "null"]
    if isinstance(schema.get("enum"), list):
        nullable["enum"] = [*schema["enum"], None]
    return nullable
