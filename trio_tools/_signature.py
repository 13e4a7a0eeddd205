"""How a tool body declares its arguments: class style or signature style.

Class style is ``body(args, ctx)``: exactly two positional parameters, the first annotated
with an attrs class, dataclass, ``TypedDict`` or msgspec ``Struct`` (or unannotated /
``object`` / ``Any``: the raw frozen arguments), the second the context.  Every other body
is a *signature tool*: each parameter but the one annotated ``ToolRunContext`` is an
argument, and the body is called with keyword arguments.

For a signature tool this module generates a msgspec ``Struct`` with one field per
argument parameter: msgspec validates into a ``Struct`` faster than into any other class,
and its JSON Schema (descriptions included) comes from the same type.  The body never sees
the ``Struct``: it gets the fields as keyword arguments.
"""

# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import copy
import dataclasses
import inspect
import re
import typing
from collections.abc import Callable
from typing import Annotated, Any, cast

import attrs
import msgspec

from ._body import SIGNATURE_CONTEXT, check_class_style, is_partial
from ._execution import ToolRunContext

__all__ = ["Style", "analyse_body", "split_docstring"]

_EMPTY = inspect.Parameter.empty
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_ARGS_HEADER = re.compile(r"^(\s*)(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


@attrs.frozen
class Style:
    """The outcome of :func:`analyse_body`: the argument type and how the body is called.

    ``args`` is the class-style argument type (``None``: raw arguments), or the generated
    ``Struct`` of a signature tool (then ``signature`` is true).
    """

    args: type[Any] | None
    signature: bool


def split_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a (cleaned) docstring into the description without its Google-style ``Args:``
    section, and that section's parameter descriptions."""
    lines = doc.splitlines()
    for start, line in enumerate(lines):
        header = _ARGS_HEADER.match(line)
        if header is None:
            continue
        indent = len(header.group(1))
        end = start + 1
        while end < len(lines):
            text = lines[end]
            if text.strip() and len(text) - len(text.lstrip()) <= indent:
                break
            end += 1
        descriptions = _parse_args_section(lines[start + 1 : end])
        rest = [*lines[:start], *lines[end:]]
        return _tidy("\n".join(rest)), descriptions
    return doc, {}


def _tidy(text: str) -> str:
    """Strip the text and collapse the blank lines a removed section leaves behind."""
    return re.sub(r"\n{3,}", "\n\n", text.strip())


def _parse_args_section(lines: list[str]) -> dict[str, str]:
    body = [line for line in lines if line.strip()]
    if not body:
        return {}
    indent = min(len(line) - len(line.lstrip()) for line in body)
    descriptions: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in body:
        own = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(line.strip()) if own == indent else None
        if match is not None:
            current = descriptions.setdefault(match.group(1), [])
            if match.group(3):
                current.append(match.group(3).strip())
        elif current is not None:
            current.append(line.strip())
    return {name: " ".join(parts) for name, parts in descriptions.items() if parts}


# ---------------------------------------------------------------------------------------
# Class style or signature style


def _is_argument_class(annotation: object) -> bool:
    if not isinstance(annotation, type):
        return False
    annotation = cast("type[Any]", annotation)
    return (
        attrs.has(annotation)
        or dataclasses.is_dataclass(annotation)
        or typing.is_typeddict(annotation)
        or issubclass(annotation, msgspec.Struct)
    )


def _is_raw(annotation: object) -> bool:
    return annotation is _EMPTY or annotation is object or annotation is Any


def _is_context(annotation: object) -> bool:
    return annotation is ToolRunContext or annotation is _EMPTY or annotation is Any


def analyse_body(
    fn: Callable[..., object], tool: str, args: type[Any] | None, descriptions: dict[str, str]
) -> Style:
    """Decide how ``fn`` takes its arguments, and check at definition that it can.

    ``args`` is an explicit argument type (class style is then required).

    Raises:
        TypeError: the body cannot take the call (arity, a missing context parameter), or a
            signature tool has an unannotated argument, ``*args`` / ``**kwargs`` or an
            annotation without a JSON Schema; the message names the tool and the parameter.
    """
    try:
        inspect.signature(fn)
    except (TypeError, ValueError):
        # A builtin or other callable without a signature: class style, raw arguments.
        return Style(args, signature=False)
    try:
        # eval_str resolves string annotations (``from __future__ import annotations``),
        # also through functools.partial and callable objects.
        signature = inspect.signature(fn, eval_str=True)
    except Exception as exc:
        raise TypeError(f"tool {tool!r}: cannot resolve the annotations of {fn!r}: {exc}") from None
    bound = _partial_keywords(fn)
    # Keywords a functools.partial bound are the author's, not the model's to choose.
    params = [p for p in signature.parameters.values() if p.name not in bound]
    positional = [p for p in params if p.kind in _POSITIONAL]
    if args is not None or (
        len(positional) == 2
        and (_is_argument_class(positional[0].annotation) or _is_raw(positional[0].annotation))
        and _is_context(positional[1].annotation)
    ):
        check_class_style(signature, tool)
        if args is None and not _is_raw(positional[0].annotation):
            args = positional[0].annotation
        return Style(args, signature=False)
    return Style(_signature_struct(tool, params, descriptions), signature=True)


def _partial_keywords(fn: object) -> set[str]:
    names: set[str] = set()
    while is_partial(fn):
        names.update(fn.keywords)
        fn = fn.func
    return names


def _signature_struct(
    tool: str, params: list[inspect.Parameter], descriptions: dict[str, str]
) -> type[Any]:
    context = ""
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for param in params:
        where = f"tool {tool!r}, parameter {param.name!r}"
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"{where}: a tool cannot take *{param.name}; declare each argument")
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            raise TypeError(f"{where}: a tool cannot take **{param.name}; declare each argument")
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(f"{where}: is positional-only, but a tool is called with keywords")
        annotation: Any = param.annotation
        if annotation is ToolRunContext:
            if context:
                raise TypeError(f"{where}: only one parameter can be the ToolRunContext")
            context = param.name
            continue
        if annotation is _EMPTY:
            raise TypeError(f"{where}: is not annotated; annotate it with the argument's type")
        if annotation is object:
            annotation = Any
        description = descriptions.get(param.name)
        if description is not None and not _has_description(annotation):
            annotation = Annotated[annotation, msgspec.Meta(description=description)]
        _check_annotation(where, annotation, param.default)
        if param.default is _EMPTY:
            fields.append((param.name, annotation))
        else:
            fields.append((param.name, annotation, _field_default(param.default)))
    try:
        return msgspec.defstruct(
            tool if tool.isidentifier() else "arguments",
            fields,
            kw_only=True,
            namespace={SIGNATURE_CONTEXT: context},
        )
    except Exception as exc:  # e.g. a field name msgspec refuses
        raise TypeError(f"tool {tool!r}: cannot build its arguments: {exc}") from None


def _has_description(annotation: object) -> bool:
    if typing.get_origin(annotation) is not Annotated:
        return False
    return any(
        isinstance(meta, msgspec.Meta) and meta.description is not None
        for meta in typing.get_args(annotation)[1:]
    )


def _check_annotation(where: str, annotation: object, default: object) -> None:
    try:
        msgspec.json.schema(annotation)
    except Exception as exc:
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise TypeError(
            f"{where}: unsupported annotation {annotation!r} (no JSON Schema: {first})"
        ) from None
    if default is not _EMPTY:
        try:
            msgspec.to_builtins(default)
        except Exception as exc:
            raise TypeError(f"{where}: default {default!r} is not JSON: {exc}") from None


def _field_default(default: object) -> object:
    # msgspec refuses non-empty mutable defaults; a factory copies them per call, as the
    # body would otherwise share (and could mutate) one object across calls.
    if type(default) in (list, dict, set, bytearray) and default:
        frozen = copy.deepcopy(default)
        return msgspec.field(default_factory=lambda: copy.deepcopy(frozen))
    return default
