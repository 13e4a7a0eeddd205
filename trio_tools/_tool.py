"""Tool definitions: the body, its argument type, schema and per-tool policy knobs."""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import inspect
import json
import re
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Generic, Protocol, TypeVar, cast, final, overload

import attrs
import msgspec

from ._execution import ToolExecution, ToolRunContext
from ._json import FrozenDict, NotJSONError, freeze
from ._results import ContentBlock, ToolResult, exception_message
from ._signature import (
    SIGNATURE_CONTEXT,
    analyse_body,
    check_class_body,
    is_async_body,
    is_partial,
    split_docstring,
)

__all__ = ["ToolDefinition", "ToolSchema", "define_tool"]

ArgsT = TypeVar("ArgsT")

ToolBody = Callable[[ArgsT, ToolRunContext], object]
"""A class-style body, ``async def body(args, ctx)`` or ``def body(args, ctx)``."""

RawBody = Callable[[object, ToolRunContext], object]
"""A class-style body taking the raw arguments: ``body(args: object, ctx)``."""

JSONFirstBody = (
    Callable[[str, ToolRunContext], object]
    | Callable[[int, ToolRunContext], object]
    | Callable[[float, ToolRunContext], object]
    | Callable[[bool, ToolRunContext], object]
    | Callable[[list[Any], ToolRunContext], object]
    | Callable[[dict[str, Any], ToolRunContext], object]
)
"""A signature tool whose first argument is a JSON value and whose second positional
parameter is the context, ``body(path: str, ctx)``: for the type checkers, it must not look
like class style with an argument type of ``str``."""

Timeout = float | Callable[[ArgsT], float | None] | None
"""Seconds, or a callable of the parsed arguments giving seconds (or ``None``)."""

FinalizeContent = Callable[[ToolExecution, ToolResult], Sequence[ContentBlock] | None]
"""``finalize_content(exec, result) -> blocks | None``: synchronous, content-only."""

_RAW_SCHEMA: Mapping[str, object] = FrozenDict({"type": "object"})


def check_timeout_value(value: object) -> float | None:
    """``value`` if it is ``None`` or a positive finite number of seconds.

    Raises:
        ValueError: anything else (also ``bool``, NaN, infinities).
    """
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        # rejects NaN, inf and ints too large for a float (math.isfinite raises on those)
        or not value <= sys.float_info.max
        or value <= 0
    ):
        raise ValueError(
            f"timeout must be a positive, finite number of seconds or None, got {value!r}"
        )
    return value


def _check_timeout(_instance: object, _attribute: object, value: Any) -> None:
    if not callable(value):
        check_timeout_value(value)


def _check_flag(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool) and not callable(value):
        raise TypeError(f"{attribute.name} must be a bool or a callable, got {value!r}")


def _check_name(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"a tool name must be a non-empty str, got {value!r}")


def _check_callable(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{attribute.name} must be callable, got {value!r}")


def _freeze_schema(value: Mapping[str, object]) -> Mapping[str, object]:
    try:
        frozen = freeze(dict(value) if type(value) is not FrozenDict else value)
    except (NotJSONError, TypeError) as exc:
        raise TypeError(f"parameters must be a JSON object schema: {exc}") from None
    assert isinstance(frozen, FrozenDict)
    return frozen


def _generated_parameters(self: Any) -> Mapping[str, object]:
    # attrs sets fields in order, so ``args`` is already set.
    return _schema_for(self.args)


def _keyword_call(
    fn: Callable[..., object], context: str
) -> Callable[[Any, ToolRunContext], object]:
    """Call a signature tool's body with the fields of its parsed ``Struct`` as keywords."""
    asdict = msgspec.structs.asdict
    if not context:

        def call(args: Any, ctx: ToolRunContext) -> object:
            return fn(**asdict(args))

    else:

        def call(args: Any, ctx: ToolRunContext) -> object:
            keywords = asdict(args)
            keywords[context] = ctx
            return fn(**keywords)

    return call


@final
@attrs.frozen(kw_only=True)
class ToolSchema:
    """What the model sees of a tool: ``name``, ``description`` and ``parameters``."""

    name: str
    description: str
    parameters: Mapping[str, object]


@final
@attrs.frozen(kw_only=True)
class ToolDefinition(Generic[ArgsT]):
    """A tool: its name, description, argument type and schema, body and policy knobs.

    Usually made with :func:`define_tool`.  Constructed directly, the body is called as
    ``execute(args, ctx)`` with the arguments parsed into ``args`` (``args=None``: the frozen
    raw arguments, nothing validated), and ``parameters`` may be a hand-written JSON Schema.
    A body that is not a coroutine function runs in a worker thread.

    ``timeout`` is seconds or a callable of the parsed arguments; ``requires_approval`` and
    ``concurrency_safe`` are a ``bool`` or a callable of the parsed arguments.

    Raises:
        ValueError: an empty name, or a ``timeout`` that is not a positive finite number.
        TypeError: a non-callable ``execute`` / ``finalize_content``, a body that cannot take
            ``(args, ctx)``, an unsupported ``args`` type, or ``parameters`` that are not a
            JSON object.
    """

    name: str = attrs.field(validator=_check_name)
    execute: ToolBody[ArgsT] = attrs.field(validator=_check_callable)
    description: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    args: type[ArgsT] | None = None
    parameters: Mapping[str, object] = attrs.field(
        default=attrs.Factory(_generated_parameters, takes_self=True), converter=_freeze_schema
    )
    timeout: Timeout[ArgsT] = attrs.field(default=None, validator=_check_timeout)
    concurrency_safe: bool | Callable[[ArgsT], bool] = attrs.field(
        default=False, validator=_check_flag
    )
    requires_approval: bool | Callable[[ArgsT], bool] = attrs.field(
        default=False, validator=_check_flag
    )
    finalize_content: FinalizeContent | None = attrs.field(default=None, validator=_check_callable)
    # Per-definition, so that no call pays for it: how dispatch calls the body.
    _call: Callable[[Any, ToolRunContext], object] = attrs.field(init=False, eq=False, repr=False)
    _sync: bool = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        fn: Callable[..., object] = self.execute
        sync = not is_async_body(fn)
        args = self.args
        context = None if args is None else getattr(args, SIGNATURE_CONTEXT, None)
        if isinstance(context, str):
            call = _keyword_call(fn, context)
        else:
            check_class_body(fn, self.name)
            call = fn
        object.__setattr__(self, "_call", call)
        object.__setattr__(self, "_sync", sync)

    def schema(self) -> ToolSchema:
        """The model-facing schema (never callbacks, timeout or concurrency flags)."""
        return ToolSchema(name=self.name, description=self.description, parameters=self.parameters)


# ---------------------------------------------------------------------------------------
# Argument schema and validation


def _schema_for(args: type[Any] | None) -> Mapping[str, object]:
    if args is None:
        return _RAW_SCHEMA
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
        if components:
            schema = {**schema, "$defs": components}
    if isinstance(getattr(args, SIGNATURE_CONTEXT, None), str):
        # A signature tool's generated Struct is no name the model needs to see.
        schema = {key: value for key, value in schema.items() if key != "title"}
    return _freeze_schema(schema)


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
        # validator) may raise anything, and that too is the model's invalid input.
        error = exc
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
        out.append(
            _format_error(error, path)
            if isinstance(error, msgspec.ValidationError)
            else f"{path}: {_describe(error)}"
        )


def _describe(exc: Exception) -> str:
    if isinstance(exc, msgspec.ValidationError):
        return _format_error(exc, "$").partition(": ")[2]
    return exception_message(exc)


def argument_violations(arguments: object, args: type[Any]) -> list[str]:
    """Every violation of ``arguments`` against ``args``, each prefixed by its JSON path."""
    out: list[str] = []
    _collect(arguments, msgspec.inspect.type_info(args), args, "$", out)
    return out


def parse_arguments(definition: ToolDefinition[Any], arguments: object) -> tuple[Any, list[str]]:
    """Parse the frozen arguments for ``definition``: ``(value, [])`` or ``(None, violations)``.

    Validation is fast (one ``msgspec.convert``); only when it fails is the full list of
    violations computed.  Whatever the argument class's constructor raises is a violation,
    never an exception.
    """
    args = definition.args
    if args is None:
        return arguments, []
    try:
        return msgspec.convert(arguments, args), []
    except Exception:
        return None, argument_violations(arguments, args)


# ---------------------------------------------------------------------------------------
# define_tool


class _ToolDecorator(Protocol):
    @overload
    def __call__(self, fn: RawBody, /) -> ToolDefinition[object]: ...
    @overload
    def __call__(self, fn: JSONFirstBody, /) -> ToolDefinition[Any]: ...
    @overload
    def __call__(self, fn: ToolBody[ArgsT], /) -> ToolDefinition[ArgsT]: ...
    @overload
    def __call__(self, fn: Callable[..., object], /) -> ToolDefinition[Any]: ...


def _unwrapped(fn: object) -> object:
    while is_partial(fn):
        fn = fn.func
    return fn


@overload
def define_tool(
    fn: RawBody,
    *,
    name: str | None = None,
    description: str | None = None,
    args: None = None,
    timeout: Timeout[object] = None,
    concurrency_safe: bool | Callable[[object], bool] = False,
    requires_approval: bool | Callable[[object], bool] = False,
    finalize_content: FinalizeContent | None = None,
) -> ToolDefinition[object]: ...


@overload
def define_tool(
    fn: JSONFirstBody,
    *,
    name: str | None = None,
    description: str | None = None,
    args: None = None,
    timeout: Timeout[Any] = None,
    concurrency_safe: bool | Callable[[Any], bool] = False,
    requires_approval: bool | Callable[[Any], bool] = False,
    finalize_content: FinalizeContent | None = None,
) -> ToolDefinition[Any]: ...


@overload
def define_tool(
    fn: ToolBody[ArgsT],
    *,
    name: str | None = None,
    description: str | None = None,
    args: type[ArgsT] | None = None,
    timeout: Timeout[ArgsT] = None,
    concurrency_safe: bool | Callable[[ArgsT], bool] = False,
    requires_approval: bool | Callable[[ArgsT], bool] = False,
    finalize_content: FinalizeContent | None = None,
) -> ToolDefinition[ArgsT]: ...


@overload
def define_tool(
    fn: Callable[..., object],
    *,
    name: str | None = None,
    description: str | None = None,
    args: None = None,
    timeout: Timeout[Any] = None,
    concurrency_safe: bool | Callable[[Any], bool] = False,
    requires_approval: bool | Callable[[Any], bool] = False,
    finalize_content: FinalizeContent | None = None,
) -> ToolDefinition[Any]: ...


@overload
def define_tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    args: type[Any] | None = None,
    timeout: Timeout[Any] = None,
    concurrency_safe: bool | Callable[[Any], bool] = False,
    requires_approval: bool | Callable[[Any], bool] = False,
    finalize_content: FinalizeContent | None = None,
) -> _ToolDecorator: ...


def define_tool(
    fn: Callable[..., object] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    args: type[Any] | None = None,
    timeout: Timeout[Any] = None,
    concurrency_safe: bool | Callable[[Any], bool] = False,
    requires_approval: bool | Callable[[Any], bool] = False,
    finalize_content: FinalizeContent | None = None,
) -> ToolDefinition[Any] | _ToolDecorator:
    """Define a tool from its body; usable as a decorator.

    Two ways to declare the arguments:

    * **signature tool**: every parameter except the one annotated ``ToolRunContext``
      (optional, any name) is an argument.  Annotations and defaults make the JSON Schema
      (a parameter without a default is required); a description comes from
      ``Annotated[T, msgspec.Meta(description=...)]`` or the docstring's Google-style
      ``Args:`` section, which is removed from the tool's description.  The body is called
      with keyword arguments.
    * **class style**, exactly when the body takes two positional parameters, the first
      annotated with an attrs class, dataclass, ``TypedDict`` or msgspec ``Struct`` (or
      unannotated / ``object``: the raw frozen arguments, nothing validated), the second the
      context: ``body(args, ctx)``.  ``args=`` names the type explicitly.

    The name defaults to the function's name, the description to its docstring.  An
    ``async def`` body runs in the call's Trio task; any other callable runs in a worker
    thread (see :class:`ToolRegistry`).  ``timeout``, ``concurrency_safe`` and
    ``requires_approval`` may be callables of the parsed arguments (for a signature tool,
    an object with one attribute per argument).

    Raises:
        ValueError: ``timeout`` is not a positive finite number, ``None`` or a callable.
        TypeError: the body cannot take the call, or a signature tool has an unannotated
            argument, ``*args`` / ``**kwargs`` or an annotation without a JSON Schema (the
            message names the tool and the parameter).
    """

    def build(body: Callable[..., object]) -> ToolDefinition[Any]:
        if not callable(body):
            raise TypeError(f"define_tool() needs a function, got {body!r}")
        tool_name = name if name is not None else getattr(body, "__name__", None)
        if tool_name is None:
            raise ValueError(f"define_tool() needs name= for {body!r}, which has no __name__")
        doc = inspect.getdoc(_unwrapped(body)) or ""
        summary, descriptions = split_docstring(doc)
        style = analyse_body(body, tool_name, args, descriptions)
        return ToolDefinition(
            name=tool_name,
            description=description
            if description is not None
            else (summary if style.signature else doc),
            execute=body,
            args=style.args,
            timeout=timeout,
            concurrency_safe=concurrency_safe,
            requires_approval=requires_approval,
            finalize_content=finalize_content,
        )

    if fn is None:
        return build
    return build(fn)
