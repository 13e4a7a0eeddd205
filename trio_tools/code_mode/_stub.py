"""``sdk_stub``: the registry's tools as the Python a program calls, rendered from schemas."""

from __future__ import annotations

import keyword
from collections.abc import Mapping, Sequence
from typing import cast

from .._execution import ToolSchema
from .._registry import ToolRegistry

__all__ = ["sdk_stub"]

_SIMPLE = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
}
_HEADER = '''\
class ToolError(Exception):
    """Raised by a tool call whose result is an error."""

    code: str  # e.g. "DENIED", "INVALID_ARGS", "TOOL_FAILED"
    message: str


class tools:
    """The tools: `await tools.NAME(**arguments)` returns the result's text."""
'''


def sdk_stub(registry: ToolRegistry) -> str:
    """A Python stub of every tool of ``registry``, for a program's author (the model).

    Rendered from ``registry.schemas()`` alone, so every tool style renders alike: one
    ``async def`` per tool in a ``tools`` namespace, keyword-only parameters with their
    JSON Schema types, defaults and (in the docstring) descriptions, returning ``str``;
    plus the ``ToolError`` that failed calls raise.  ``run_code`` tools are left out (they
    cannot be called from a program).  A tool whose name is not a Python identifier is
    shown as ``getattr(tools, "NAME")``; one whose parameters cannot all be keywords takes
    ``**arguments``.
    """
    parts = [_HEADER]
    for schema in registry.schemas():
        definition = registry.get(schema.name)
        if definition is not None and getattr(definition.execute, "is_run_code", False) is True:
            continue
        parts.append(_render_tool(schema))
    return "\n".join(parts)


def _identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _docstring(text: str, indent: str) -> str:
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"').strip()
    if not text:
        return f'{indent}"""(no description)"""\n'
    lines = text.splitlines()
    if len(lines) == 1:
        return f'{indent}"""{lines[0]}"""\n'
    body = "\n".join(f"{indent}{line}" if line.strip() else "" for line in lines[1:])
    return f'{indent}"""{lines[0]}\n{body}\n{indent}"""\n'


def _render_tool(schema: ToolSchema) -> str:
    parameters = schema.parameters
    defs = _mapping(parameters.get("$defs"))
    properties = _mapping(parameters.get("properties"))
    required = parameters.get("required")
    required_names = (
        {str(item) for item in cast("Sequence[object]", required)}
        if isinstance(required, Sequence) and not isinstance(required, str)
        else set[str]()
    )
    params: list[str] = []
    described: list[str] = []
    keywords_only = all(_identifier(name) for name in properties)
    for name, raw in properties.items():
        prop = _mapping(raw)
        annotation = _type(prop, defs, 0)
        if name in required_names:
            rendered = f"{name}: {annotation}"
        elif "default" in prop:
            rendered = f"{name}: {annotation} = {_literal(prop['default'])}"
        else:
            rendered = f"{name}: {annotation} = ..."
        params.append(rendered)
        description = prop.get("description")
        details = f": {description}" if isinstance(description, str) and description else ""
        if not keywords_only:
            described.append(f"    {rendered}{details}")
        elif details:
            described.append(f"    {name}{details}")
    signature = "*, " + ", ".join(params) if keywords_only and params else "**arguments: object"
    doc = schema.description
    if described:
        doc = f"{doc.rstrip()}\n\nArgs:\n" + "\n".join(described)
    if _identifier(schema.name):
        head = f"    @staticmethod\n    async def {schema.name}({signature}) -> str:\n"
    else:
        head = (
            f"    # call as: await getattr(tools, {schema.name!r})(...)\n"
            f"    @staticmethod\n    async def _({signature}) -> str:\n"
        )
    return head + _docstring(doc, "        ")


def _mapping(value: object) -> Mapping[str, object]:
    return cast("Mapping[str, object]", value) if isinstance(value, Mapping) else {}


def _type(schema: Mapping[str, object], defs: Mapping[str, object], depth: int) -> str:
    if depth > 20:
        return "object"
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _type(_mapping(defs.get(ref.removeprefix("#/$defs/"))), defs, depth + 1)
    if "const" in schema:
        return f"Literal[{_literal(schema['const'])}]"
    enum = schema.get("enum")
    if isinstance(enum, Sequence) and not isinstance(enum, str) and enum:
        items = cast("Sequence[object]", enum)
        return f"Literal[{', '.join(_literal(item) for item in items)}]"
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, Sequence) and not isinstance(options, str) and options:
            rendered = [
                _type(_mapping(o), defs, depth + 1) for o in cast("Sequence[object]", options)
            ]
            return " | ".join(dict.fromkeys(rendered))
    kind = schema.get("type")
    if isinstance(kind, Sequence) and not isinstance(kind, str):
        kinds = [
            _type({**schema, "type": k}, defs, depth + 1) for k in cast("Sequence[object]", kind)
        ]
        return " | ".join(dict.fromkeys(kinds))
    if isinstance(kind, str) and kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == "array":
        item_schema = schema.get("items")
        if isinstance(item_schema, Mapping):
            return f"list[{_type(_mapping(cast(object, item_schema)), defs, depth + 1)}]"
        return "list[object]"
    if kind == "object" or "properties" in schema:
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            return f"dict[str, {_type(_mapping(cast(object, extra)), defs, depth + 1)}]"
        return "dict[str, object]"
    return "object"


def _literal(value: object) -> str:
    """A JSON value (frozen or not) as a Python literal."""
    if value is None or isinstance(value, bool | int | float | str):
        return repr(value)
    if isinstance(value, Mapping):
        items = cast("Mapping[object, object]", value).items()
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in items) + "}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(_literal(item) for item in cast("Sequence[object]", value)) + "]"
    return repr(value)
