"""How the registry calls a tool body: in the Trio task or a worker thread, and with what.

A body is called either *class style*, ``body(args, ctx)``, or, for a signature tool, with
the fields of its generated ``Struct`` as keyword arguments.  What is decided here is
decided once, when the tool is defined, so that no call pays for it.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

import functools
import inspect
import keyword
from collections.abc import Callable
from typing import Any, TypeGuard

import msgspec
import trio

__all__ = [
    "SIGNATURE_CONTEXT",
    "check_class_body",
    "check_class_style",
    "in_worker_thread",
    "is_async_body",
    "is_partial",
    "keyword_call",
    "run_sync_body",
]

SIGNATURE_CONTEXT = "__trio_tools_context__"
"""Class attribute of a generated signature ``Struct``: the name of the body's context
parameter, or ``""`` when it takes none.  Its presence marks a signature tool."""


def is_partial(fn: object) -> TypeGuard[functools.partial[Any]]:
    """Whether ``fn`` is a ``functools.partial`` (typed for its ``func`` and ``keywords``)."""
    return isinstance(fn, functools.partial)


def is_async_body(fn: Callable[..., object]) -> bool:
    """Whether calling ``fn`` gives a coroutine: an ``async def`` function, also through
    ``functools.partial``, bound methods and callable objects with ``async def __call__``.

    Raises:
        TypeError: ``fn`` is an async generator function (it cannot be awaited).
    """
    target: object = fn
    while is_partial(target):
        target = target.func
    if inspect.isasyncgenfunction(target):
        raise TypeError(f"a tool body cannot be an async generator function: {fn!r}")
    if inspect.iscoroutinefunction(target):
        return True
    if inspect.isfunction(target) or inspect.ismethod(target) or inspect.isbuiltin(target):
        return False
    call = getattr(type(target), "__call__", None)  # noqa: B004 - the class's, not the object's
    if inspect.isasyncgenfunction(call):
        raise TypeError(f"a tool body cannot be an async generator function: {fn!r}")
    return inspect.iscoroutinefunction(call)


def check_class_body(fn: Callable[..., object], tool: str) -> None:
    """Check at definition that a class-style body can be called as ``fn(args, ctx)``.

    Raises:
        TypeError: it cannot (the message names the tool).
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or other callable without a signature: nothing to check
    check_class_style(signature, tool)


def check_class_style(signature: inspect.Signature, tool: str) -> None:
    """Check that a body of this signature can be called as ``body(args, ctx)``.

    Raises:
        TypeError: it cannot (the message names the tool and the signature).
    """
    try:
        signature.bind(None, None)
    except TypeError as exc:
        raise TypeError(
            f"tool {tool!r}: a body with an argument type must take (args, ctx): "
            f"{signature} cannot ({exc})"
        ) from None


def keyword_call(
    fn: Callable[..., object], struct: type[Any], context: str
) -> Callable[[Any, object], object]:
    """Call a signature tool's body with the fields of its parsed ``struct`` as keywords,
    and the context as keyword ``context`` (none when ``context`` is ``""``).

    The caller is generated once per tool, the way attrs and dataclasses generate
    ``__init__``: ``fn(path=_0, max_bytes=_1, ctx=ctx)`` with literal keywords is one plain
    call, where ``fn(**asdict(args))`` builds a dict and unpacks it again (about twice the
    cost, on every call).  The keywords, their order and values are the same.
    """
    fields: tuple[str, ...] = struct.__struct_fields__
    names = (*fields, context) if context else fields
    if not all(name.isidentifier() and not keyword.iskeyword(name) for name in names):
        raise TypeError(f"cannot call a body with the keywords {names!r}")
    keywords = [f"{name}=_{index}" for index, name in enumerate(fields)]
    if context:
        keywords.append(f"{context}=ctx")
    lines = ["def call(args, ctx):"]
    if fields:
        lines.append(f"    {''.join(f'_{index}, ' for index in range(len(fields)))}= astuple(args)")
    lines.append(f"    return fn({', '.join(keywords)})")
    namespace: dict[str, Any] = {"fn": fn, "astuple": msgspec.structs.astuple}
    exec("\n".join(lines), namespace)  # only identifiers (checked above) go into the source
    call: Callable[[Any, object], object] = namespace["call"]
    return call


async def in_worker_thread(run: Any, args: Any, ctx: Any) -> object:
    """The sync body of ``run`` (an ``_execution._Run``, which imports this module), run in
    a worker thread of the call's thread limiter: its value, or what it raised, raised here.

    Never abandoned: the call stays pending until the thread returns (it sees cancellation
    through ``ctx.check_cancelled()``).  The body counts as invoked only once its thread
    calls it: cancelled while waiting for the limiter, it never ran
    (``ABORTED_BEFORE_DISPATCH``).
    """
    definition = run.definition
    run.body_invoked = False  # set by the worker thread, right before it calls the body
    outcome = await trio.to_thread.run_sync(
        run_sync_body,
        definition._call,
        definition.name,
        args,
        ctx,
        abandon_on_cancel=False,
        limiter=run.stages.thread_limiter,
    )
    if len(outcome) == 1:
        return outcome[0]
    # What the body raised.  The worker thread's frames, which its traceback holds, still
    # hold this list: emptied, it closes no reference cycle through them.
    failure = outcome.pop()
    # Raised from a temporary pair while the local is cleared: the traceback holds this
    # frame too, which must not keep the exception either.
    raise (failure, failure := None)[0]


def run_sync_body(call: Callable[[Any, Any], object], name: str, args: Any, ctx: Any) -> list[Any]:
    """A sync body ``call(args, ctx)`` of the tool ``name``, in its worker thread:
    ``[value]``, or ``[None, exception]`` for what it raised (also a ``Cancelled`` from
    ``ctx.check_cancelled()``).

    Not raised through ``trio.to_thread.run_sync``: Trio's way back from the thread keeps
    a raised exception in a reference cycle (a closure over the outcome, which the
    exception's traceback holds) that only the cyclic garbage collector would free.
    """
    try:
        # Trio waits for this thread before the call goes on: no task reads the flag while
        # it is written.
        ctx._run.body_invoked = True
        value = call(args, ctx)
        if inspect.isawaitable(value):
            close = getattr(value, "close", None)
            if callable(close):
                close()  # a coroutine nobody will await: no "never awaited" warning
            raise TypeError(
                f"tool {name!r} is a plain function that returned an awaitable "
                f"({type(value).__name__}); define it with `async def` to run it in Trio"
            )
    except BaseException as exc:
        return [None, exc]
    return [value]
