"""``define_tool``: a tool definition from a function, its arguments read off its signature."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, overload

from ._body import is_partial
from ._execution import FinalizeContent, Timeout, ToolBody, ToolDefinition, ToolRunContext
from ._signature import analyse_body, split_docstring

__all__ = ["JSONFirstBody", "RawBody", "define_tool"]

ArgsT = TypeVar("ArgsT")

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
