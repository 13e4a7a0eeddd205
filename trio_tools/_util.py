"""Small internal helpers shared by the package's modules."""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from collections.abc import Iterable
from typing import Any, NoReturn, TypeVar, cast

import trio

T = TypeVar("T")

logger = logging.getLogger("trio_tools")


class NoPublicConstructor(type):
    """Metaclass for objects only the library creates (signals, views, tokens).

    ``Cls(...)`` raises ``TypeError``; the library builds instances with ``Cls._create(...)``.
    """

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} cannot be constructed directly; "
            "the library creates it"
        )

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        # type.__call__ directly: this is on the per-call hot path, and super() costs.
        # typeshed types type.__call__ as returning Any; it returns a ``cls`` instance.
        return cast(T, type.__call__(cls, *args, **kwargs))


def fix_module(namespace: dict[str, object], names: Iterable[str]) -> None:
    """Make reprs and tracebacks say ``<package>.X`` for a package's public names.

    The package is the namespace's ``__name__``; only objects defined in its private
    (``_``) modules are renamed, so re-exports from elsewhere keep their own module.
    """
    package = cast(str, namespace["__name__"])
    for name in names:
        obj = namespace[name]
        module = getattr(obj, "__module__", None)
        if isinstance(module, str) and module.startswith(f"{package}._"):
            with contextlib.suppress(AttributeError, TypeError):
                obj.__module__ = package


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc`` with every (nested) group flattened, in order."""
    leaves: list[BaseException] = []
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if isinstance(current, BaseExceptionGroup):
            group = cast("BaseExceptionGroup[BaseException]", current)
            stack.extend(reversed(group.exceptions))
        else:
            leaves.append(current)
    return leaves


# The real name of a class, even when a metaclass overrides ``__name__``: reading the slot
# of ``type`` itself cannot run user code.
_type_name: Any = type.__dict__["__name__"].__get__


def type_name(value: object) -> str:
    """The name of ``value``'s class, without running any code of that class."""
    return cast(str, _type_name(type(value)))


def safe_repr(value: object) -> str:
    """``repr(value)``, or a placeholder naming its type when ``__repr__`` fails.

    For error messages about values from user code: formatting the error must never raise
    a second, unrelated error.
    """
    try:
        text = repr(value)
    except Exception:
        return f"<{type_name(value)} object (repr failed)>"
    return str.__str__(text)  # repr() may return a str subclass: keep only the text


def cancelled_here() -> bool:
    """Whether the current task is inside an (unshielded) cancelled scope right now.

    A ``trio.Cancelled`` raised while this is false belongs to no scope: it is stray.
    """
    # The task's cancel status says so directly when it is true, the usual case (every call
    # cancelled by an enclosing scope asks); only otherwise the effective deadline, which
    # walks the enclosing scopes, is read (it is also -inf for a scope whose deadline of
    # -inf the run loop has not processed yet).
    try:
        status = trio.lowlevel.current_task()._cancel_status  # pyright: ignore[reportPrivateUsage]
        if status.effectively_cancelled:
            return True
    except AttributeError:  # a Trio without this internal: the public answer alone
        pass
    return trio.current_effective_deadline() == -math.inf


def cancel_called(scope: trio.CancelScope) -> bool:
    """``scope.cancel_called``, for a scope that has no deadline, without the clock read.

    The property first cancels a scope whose deadline has passed, reading the clock to
    know; with no deadline there is nothing to check, and Trio's flag is the answer.
    """
    try:
        return scope._cancel_called  # pyright: ignore[reportPrivateUsage]
    except AttributeError:  # a Trio without this internal: the public answer
        return scope.cancel_called


def has_children(nursery: trio.Nursery) -> bool:
    """Whether ``nursery`` still has child tasks (``child_tasks``, without its frozenset)."""
    try:
        return bool(nursery._children)  # pyright: ignore[reportPrivateUsage]
    except AttributeError:  # a Trio without this internal: the public answer
        return bool(nursery.child_tasks)


def checkpoint_due() -> bool:
    """Whether ``await trio.lowlevel.checkpoint_if_cancelled()`` would raise right now.

    Trio's own test, read without a coroutine: the task is in an (unshielded) cancelled
    scope, or it is the main task and a ``KeyboardInterrupt`` waits for its next
    checkpoint.  ``if checkpoint_due(): await checkpoint_if_cancelled()`` raises exactly
    when the bare await would; it only leaves Trio's count of cancel points alone (which
    ``trio.testing.assert_checkpoints`` reads), so a call keeps one unconditional await.

    It reads two of Trio's internals (stable since Trio 0.12); should a Trio lack them, it
    says "due" every time, which is the plain await's behaviour at its old cost.
    """
    task = trio.lowlevel.current_task()
    try:
        runner = task._runner  # pyright: ignore[reportPrivateUsage]
        return task._cancel_status.effectively_cancelled or (  # pyright: ignore[reportPrivateUsage]
            task is runner.main_task and runner.ki_pending
        )
    except AttributeError:  # a Trio whose internals differ: always take the real checkpoint
        return True


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
