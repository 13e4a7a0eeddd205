"""Tool definitions: the body, its argument type, schema and per-tool policy knobs."""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import inspect
import json
import sys
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast, final, overload

import attrs
import msgspec

from ._execution import ToolExecution, ToolRunContext
from ._json import FrozenDict, NotJSONError, freeze
from ._results import ContentBlock, ToolResult

__all__ = ["ToolDefinition", "ToolSchema", "define_tool"]

ArgsT = TypeVar("ArgsT")
ArgsT_co = TypeVar("ArgsT_co", covariant=True)

ToolBody = Callable[[ArgsT, ToolRunContext], Awaitable[object]]
"""``async def body(args, ctx) -> object``."""

FinalizeContent = Callable[[ToolExecution, ToolResult], Sequence[ContentBlock] | None]
"""``finalize_content(exec, result) -> blocks | None``: synchronous, content-only."""

_RAW_SCHEMA: Mapping[str, object] = FrozenDict({"type": "object"})


def _check_timeout(_instance: object, _attribute: object, value: Any) -> None:
    if value is None:
        return
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


def _check_concurrency_safe(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, bool) and not callable(value):
        raise TypeError(f"concurrency_safe must be a bool or a callable, got {value!r}")


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

    Usually made with :func:`define_tool`.  Constructed directly, ``parameters`` may be a
    hand-written JSON Schema; with ``args=None`` the body receives the frozen raw arguments
    and nothing is validated.

    Raises:
        ValueError: an empty name, or a ``timeout`` that is not a positive finite number.
        TypeError: a non-callable ``execute`` / ``finalize_content``, an unsupported ``args``
            type, or ``parameters`` that are not a JSON object.
    """

    name: str = attrs.field(validator=_check_name)
    execute: ToolBody[ArgsT] = attrs.field(validator=_check_callable)
    description: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    args: type[ArgsT] | None = None
    parameters: Mapping[str, object] = attrs.field(
        default=attrs.Factory(_generated_parameters, takes_self=True), converter=_freeze_schema
    )
    timeout: float | None = attrs.field(default=None, validator=_check_timeout)
    concurrency_safe: bool | Callable[[ArgsT], bool] = attrs.field(
        default=False, validator=_check_concurrency_safe
    )
    finalize_content: FinalizeContent | None = attrs.field(default=None, validator=_check_callable)

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
    return _freeze_schema(schema)


_OBJECT_TYPES = (
    msgspec.inspect.StructType,
    msgspec.inspect.DataclassType,
    msgspec.inspect.TypedDictType,
)
_ARRAY_TYPES = (msgspec.inspect.ListType, msgspec.inspect.VarTupleType)


def _format_error(error: msgspec.ValidationError, path: str) -> str:
    text = str(error)
    message, _, at = text.partition(" - at `")
    relative = at.rstrip("`")[1:] if at else ""
    message = message.replace("`", "")
    missing = "Object missing required field "
    if message.startswith(missing):
        return f"{path}{relative}.{message.removeprefix(missing)}: missing required field"
    return f"{path}{relative}: {message[:1].lower()}{message[1:]}"


def _strip_optional(info: msgspec.inspect.Type, pytype: Any) -> tuple[msgspec.inspect.Type, Any]:
    if isinstance(info, msgspec.inspect.UnionType):
        options = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
        py_options = [t for t in typing.get_args(pytype) if t is not type(None)]
        if len(options) == 1 and len(py_options) == 1:
            return options[0], py_options[0]
    return info, pytype


def _collect(
    value: object, info: msgspec.inspect.Type, pytype: Any, path: str, out: list[str]
) -> None:
    try:
        msgspec.convert(value, pytype)
        return
    except msgspec.ValidationError as exc:
        error = exc
    info, pytype = _strip_optional(info, pytype)
    before = len(out)
    if isinstance(info, _OBJECT_TYPES) and isinstance(value, dict):
        fields = cast("dict[str, object]", value)
        hints = typing.get_type_hints(info.cls, include_extras=True)
        for field in info.fields:
            key = field.encode_name
            if key not in fields:
                if field.required:
                    out.append(f"{path}.{key}: missing required field")
            else:
                _collect(fields[key], field.type, hints[field.name], f"{path}.{key}", out)
    elif isinstance(info, _ARRAY_TYPES) and isinstance(value, list | tuple):
        item_type = typing.get_args(pytype)[0]
        for index, item in enumerate(cast("Sequence[object]", value)):
            _collect(item, info.item_type, item_type, f"{path}[{index}]", out)
    if len(out) == before:
        out.append(_format_error(error, path))


def argument_violations(arguments: object, args: type[Any]) -> list[str]:
    """Every violation of ``arguments`` against ``args``, each prefixed by its JSON path."""
    out: list[str] = []
    _collect(arguments, msgspec.inspect.type_info(args), args, "$", out)
    return out


def parse_arguments(definition: ToolDefinition[Any], arguments: object) -> tuple[Any, list[str]]:
    """Parse the frozen arguments for ``definition``: ``(value, [])`` or ``(None, violations)``.

    Validation is fast (one ``msgspec.convert``); only when it fails is the full list of
    violations computed.
    """
    args = definition.args
    if args is None:
        return arguments, []
    try:
        return msgspec.convert(arguments, args), []
    except msgspec.ValidationError:
        return None, argument_violations(arguments, args)


# ---------------------------------------------------------------------------------------
# define_tool


class _ToolDecorator(Protocol):
    def __call__(self, fn: ToolBody[ArgsT], /) -> ToolDefinition[ArgsT]: ...


def _infer_args(fn: Callable[..., object]) -> type[Any] | None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # a builtin or other callable without a signature: raw arguments
    params = list(signature.parameters.values())
    if not params:
        raise TypeError(f"tool body {fn!r} must take (args, ctx)")
    try:
        # eval_str resolves string annotations (``from __future__ import annotations``),
        # also through functools.partial and callable objects.
        first = next(iter(inspect.signature(fn, eval_str=True).parameters.values()))
    except Exception as exc:
        raise TypeError(f"cannot resolve the annotations of {fn!r}: {exc}") from None
    annotation: Any = first.annotation
    if annotation is inspect.Parameter.empty or annotation is object or annotation is Any:
        return None
    return cast("type[Any]", annotation)


@overload
def define_tool(
    fn: ToolBody[ArgsT],
    *,
    name: str | None = None,
    description: str | None = None,
    args: type[ArgsT] | None = None,
    timeout: float | None = None,
    concurrency_safe: bool | Callable[[ArgsT], bool] = False,
    finalize_content: FinalizeContent | None = None,
) -> ToolDefinition[ArgsT]: ...


@overload
def define_tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    args: type[Any] | None = None,
    timeout: float | None = None,
    concurrency_safe: bool | Callable[[Any], bool] = False,
    finalize_content: FinalizeContent | None = None,
) -> _ToolDecorator: ...


def define_tool(
    fn: ToolBody[Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    args: type[Any] | None = None,
    timeout: float | None = None,
    concurrency_safe: bool | Callable[[Any], bool] = False,
    finalize_content: FinalizeContent | None = None,
) -> ToolDefinition[Any] | _ToolDecorator:
    """Define a tool from ``async def body(args, ctx)``; usable as a decorator.

    The name defaults to the function's name, the description to its docstring and the
    argument type to the first parameter's annotation (an attrs class, dataclass,
    ``TypedDict`` or ``msgspec.Struct``); the JSON Schema ``parameters`` are generated from
    it.  Without an argument type (no annotation, or ``object``) the body receives the frozen
    raw arguments and nothing is validated.

    Raises:
        ValueError: ``timeout`` is not a positive finite number (or ``None``).
        TypeError: the argument type has no JSON Schema, or the body takes no parameters.
    """

    def build(body: ToolBody[Any]) -> ToolDefinition[Any]:
        if not callable(body):
            raise TypeError(f"define_tool() needs an async function, got {body!r}")
        arg_type = args if args is not None else _infer_args(body)
        doc = description if description is not None else inspect.getdoc(body)
        tool_name = name if name is not None else getattr(body, "__name__", None)
        if tool_name is None:
            raise ValueError(f"define_tool() needs name= for {body!r}, which has no __name__")
        return ToolDefinition(
            name=tool_name,
            description=doc or "",
            execute=body,
            args=arg_type,
            timeout=timeout,
            concurrency_safe=concurrency_safe,
            finalize_content=finalize_content,
        )

    if fn is None:
        return build
    return build(fn)
