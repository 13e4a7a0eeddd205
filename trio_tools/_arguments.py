"""A tool's arguments: the JSON Schema of their type, and their validation against it.

Validation is one ``msgspec.convert`` into the argument type; only when that fails is every
violation collected, each prefixed by its JSON path (``$.items[2].name: ...``), so that the
model can fix all of them at once.  :func:`argument_parser` gives each definition its parser
once: for a class of scalar fields, the same validation through a decoder made for it.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, cast

import msgspec

from ._body import SIGNATURE_CONTEXT
from ._failures import exception_message
from ._json import FrozenDict, NotJSONError, freeze

__all__ = [
    "RAW_SCHEMA",
    "ArgumentParser",
    "argument_parser",
    "argument_violations",
    "freeze_schema",
    "parse_arguments",
    "schema_for",
]

RAW_SCHEMA: Mapping[str, object] = FrozenDict({"type": "object"})
"""The schema of raw arguments (no argument type): any JSON object."""


def freeze_schema(value: Mapping[str, object]) -> Mapping[str, object]:
    """``value`` as a frozen JSON object schema.

    Raises:
        TypeError: ``value`` is not a JSON object.
    """
    try:
        frozen = freeze(dict(value) if type(value) is not FrozenDict else value)
    except (NotJSONError, TypeError) as exc:
        raise TypeError(f"parameters must be a JSON object schema: {exc}") from None
    assert isinstance(frozen, FrozenDict)
    return frozen


def schema_for(args: type[Any] | None) -> Mapping[str, object]:
    """The JSON Schema of argument type ``args`` (``None``: any JSON object).

    Raises:
        TypeError: msgspec cannot derive a schema from ``args``.
    """
    if args is None:
        return RAW_SCHEMA
    try:
        (schema,), components = msgspec.json.schema_components(
            [args], ref_template="#/$defs/{name}"
        )
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot derive a JSON Schema from argument type {args!r}: {exc}") from None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if json.dumps(components).count(f'"{ref}"') == 0:
            schema = dict(components.pop(name))
        else:
            # A recursive type: its definition stays in ``$defs`` for the references inside
            # it, and is the root too, which every model API requires to be an object.
            schema = dict(components[name])
        if components:
            schema = {**schema, "$defs": components}
    if isinstance(getattr(args, SIGNATURE_CONTEXT, None), str):
        # A signature tool's generated Struct is no name the model needs to see.
        schema = {key: value for key, value in schema.items() if key != "title"}
    return freeze_schema(schema)


_OBJECT_TYPES = (
    msgspec.inspect.StructType,
    msgspec.inspect.DataclassType,
    msgspec.inspect.TypedDictType,
)
_ARRAY_TYPES = (
    msgspec.inspect.ListType,
    msgspec.inspect.VarTupleType,
    msgspec.inspect.SetType,
    msgspec.inspect.FrozenSetType,
)
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _key_path(path: str, key: str) -> str:
    """The JSON path of member ``key`` of the object at ``path``."""
    return f"{path}.{key}" if _KEY.match(key) else f"{path}[{json.dumps(key)}]"


def _format_error(error: msgspec.ValidationError, path: str) -> str:
    text = str(error)
    message, _, at = text.partition(" - at `")
    relative = at.rstrip("`")[1:] if at else ""
    message = message.replace("`", "")
    missing = "Object missing required field "
    if message.startswith(missing):
        return f"{path}{relative}.{message.removeprefix(missing)}: missing required field"
    return f"{path}{relative}: {message[:1].lower()}{message[1:]}"


def _unwrap(info: msgspec.inspect.Type, pytype: Any) -> tuple[msgspec.inspect.Type, Any]:
    """Strip ``Annotated`` metadata and an ``Optional`` around a single type."""
    while isinstance(info, msgspec.inspect.Metadata):
        info = info.type
    while typing.get_origin(pytype) is Annotated:
        pytype = typing.get_args(pytype)[0]
    if isinstance(info, msgspec.inspect.UnionType):
        options = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
        py_options = [t for t in typing.get_args(pytype) if t is not type(None)]
        if len(options) == 1 and len(py_options) == 1:
            return _unwrap(options[0], py_options[0])
    return info, pytype


def _collect(
    value: object, info: msgspec.inspect.Type, pytype: Any, path: str, out: list[str]
) -> None:
    try:
        msgspec.convert(value, pytype)
        return
    except Exception as exc:
        # Not only ValidationError: an argument class's constructor (``__post_init__``, a
        # validator) may raise anything, and that too is the model's invalid input.  Only
        # its message is kept: the exception's traceback holds this frame, and a local
        # holding the exception would be a reference cycle.
        message = (
            _format_error(exc, path)
            if isinstance(exc, msgspec.ValidationError)
            else f"{path}: {_describe(exc)}"
        )
    info, pytype = _unwrap(info, pytype)
    before = len(out)
    if isinstance(info, _OBJECT_TYPES) and isinstance(value, dict):
        fields = cast("dict[str, object]", value)
        hints = typing.get_type_hints(info.cls, include_extras=True)
        for field in info.fields:
            key = field.encode_name
            if key not in fields:
                if field.required:
                    out.append(f"{_key_path(path, key)}: missing required field")
            else:
                _collect(fields[key], field.type, hints[field.name], _key_path(path, key), out)
    elif isinstance(info, _ARRAY_TYPES) and isinstance(value, list | tuple):
        item_type = typing.get_args(pytype)[0]
        for index, item in enumerate(cast("Sequence[object]", value)):
            _collect(item, info.item_type, item_type, f"{path}[{index}]", out)
    elif isinstance(info, msgspec.inspect.TupleType) and isinstance(value, list | tuple):
        items = cast("Sequence[object]", value)
        item_types = typing.get_args(pytype)
        if len(items) == len(info.item_types) == len(item_types):
            for index, (item, item_info, item_type) in enumerate(
                zip(items, info.item_types, item_types, strict=True)
            ):
                _collect(item, item_info, item_type, f"{path}[{index}]", out)
    elif isinstance(info, msgspec.inspect.DictType) and isinstance(value, dict):
        entries = cast("dict[str, object]", value)
        key_type, value_type = typing.get_args(pytype) or (Any, Any)
        for key, item in entries.items():
            item_path = _key_path(path, key)
            try:
                msgspec.convert(key, key_type)
            except Exception as exc:
                out.append(f"{item_path}: invalid key: {_describe(exc)}")
            _collect(item, info.value_type, value_type, item_path, out)
    if len(out) == before:
        out.append(message)


def _describe(exc: Exception) -> str:
    if isinstance(exc, msgspec.ValidationError):
        return _format_error(exc, "$").partition(": ")[2]
    return exception_message(exc)


def argument_violations(
    arguments: object, args: type[Any], info: msgspec.inspect.Type | None = None
) -> list[str]:
    """Every violation of ``arguments`` against ``args``, each prefixed by its JSON path.

    ``info`` is ``msgspec.inspect.type_info(args)`` if the caller has it: a definition's
    parser computes it once, as inspecting a class each time leaves a reference cycle
    behind (msgspec builds a recursive closure for it).
    """
    out: list[str] = []
    _collect(arguments, msgspec.inspect.type_info(args) if info is None else info, args, "$", out)
    return out


def parse_arguments(
    args: type[Any] | None, arguments: object, info: msgspec.inspect.Type | None = None
) -> tuple[Any, list[str]]:
    """Parse the frozen arguments into ``args``: ``(value, [])`` or ``(None, violations)``.

    ``args`` is a definition's argument type; ``None`` takes the raw arguments as they are.
    Validation is fast (one ``msgspec.convert``); only when it fails is the full list of
    violations computed (``info``: as for :func:`argument_violations`).  Whatever the
    argument class's constructor raises is a violation, never an exception.
    """
    if args is None:
        return arguments, []
    try:
        return msgspec.convert(arguments, args), []
    except Exception:
        return None, argument_violations(arguments, args, info)


ArgumentParser = Callable[[object], tuple[Any, list[str]]]
"""``parse(frozen_arguments) -> (value, [])`` or ``(None, violations)``: one definition's."""

# Field types on which msgpack decoding and ``msgspec.convert`` agree for frozen JSON input,
# constraints included (tests/test_fast_paths.py compares the two over generated inputs).
_SCALAR_TYPES = (
    msgspec.inspect.IntType,
    msgspec.inspect.FloatType,
    msgspec.inspect.StrType,
    msgspec.inspect.BoolType,
    msgspec.inspect.NoneType,
)
_encode = msgspec.msgpack.Encoder().encode


def _is_scalar(info: msgspec.inspect.Type) -> bool:
    while isinstance(info, msgspec.inspect.Metadata):
        info = info.type
    if isinstance(info, msgspec.inspect.UnionType):
        return all(_is_scalar(option) for option in info.types)
    return isinstance(info, _SCALAR_TYPES)


def _scalar_fields(info: msgspec.inspect.Type) -> bool:
    """Whether ``info`` is a dataclass, attrs class or plain Struct of scalar fields."""
    if isinstance(info, msgspec.inspect.StructType):
        if info.array_like or info.tag_field is not None:
            return False
    elif not isinstance(info, msgspec.inspect.DataclassType):  # attrs classes too
        return False
    return all(_is_scalar(field.type) for field in info.fields)


def argument_parser(args: type[Any] | None) -> ArgumentParser:
    """The parser of one definition's arguments: ``parse_arguments`` for ``args``, exactly.

    ``msgspec.convert`` works out how to build ``args`` on every call; for a class of scalar
    fields (numbers, strings, booleans, ``None``, unions of them, with or without
    constraints), a msgpack decoder made for it once builds the same value from the
    arguments' msgpack encoding in a third of the time.  Arguments it cannot encode (an
    integer beyond 64 bits, a lone surrogate) take the general path; invalid ones get the
    same violations, collected the same way.
    """
    if args is None:
        return lambda arguments: parse_arguments(None, arguments)
    try:
        info: msgspec.inspect.Type | None = msgspec.inspect.type_info(args)
    except Exception:
        info = None  # what convert makes of it is every call's answer
    if info is None or not _scalar_fields(info):
        return lambda arguments: parse_arguments(args, arguments, info)
    try:
        decode = msgspec.msgpack.Decoder(args).decode
    except Exception:
        return lambda arguments: parse_arguments(args, arguments, info)

    def parse(arguments: object) -> tuple[Any, list[str]]:
        try:
            data = _encode(arguments)
        except Exception:
            return parse_arguments(args, arguments, info)
        try:
            return decode(data), []
        except Exception:
            # Exactly where `convert` fails (the class's own constructor code included).
            return None, argument_violations(arguments, args, info)

    return parse
