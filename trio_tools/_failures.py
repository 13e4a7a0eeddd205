"""A stage's failure as an error result: the exception's name, message and code.

Every stage that raises (a hook, a guard, a wrapper, the body, ``finalize_content``) becomes
an error result here, and nothing here raises because of the exception it formats.  A
``trio.Cancelled`` that no cancelled scope owns is a failure too, reported as
:class:`StrayCancelled`.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ._results import WRAPPER_FAILED, ToolResult, error_result
from ._util import cancelled_here, type_name

__all__ = [
    "StrayCancelled",
    "exception_code",
    "exception_message",
    "exception_name",
    "exception_result",
    "failures_result",
    "stray_or_raise",
]


class StrayCancelled(Exception):
    """Stands in for a ``trio.Cancelled`` that no cancelled scope owns.

    Code that raises ``trio.Cancelled`` while nothing around it was cancelled (re-raising a
    stored one, or making one) has a bug: the registry reports it as that stage's failure,
    named ``Cancelled``, rather than letting a scope that does not own it absorb it.
    """

    def __str__(self) -> str:
        return "trio.Cancelled raised outside any cancelled scope"


def stray_or_raise(exc: trio.Cancelled) -> StrayCancelled:
    """Classify a ``trio.Cancelled`` escaping a stage: re-raised when an enclosing scope is
    cancelled (ambient cancellation, not ours), else a stray one to report as the stage's
    failure."""
    if cancelled_here():
        try:
            raise exc
        finally:
            del exc  # this frame is in exc's traceback: no reference cycle through it
    return StrayCancelled()


def exception_name(exc: BaseException) -> str:
    """``error.name`` for ``exc``: its type's name (``Cancelled`` for a stray one)."""
    if type(exc) is StrayCancelled:
        return "Cancelled"
    return type_name(exc)


def exception_message(exc: BaseException) -> str:
    """The message of a registry-made error for ``exc``: its text, or its type's name.

    Never raises for an ordinary exception's own faults: a ``__str__`` that raises, returns
    a non-``str`` or an empty text gives the type's name.
    """
    try:
        # ``str()`` may return a str subclass with its own behaviour: keep only the text.
        text = str.__str__(str(exc))
    except Exception:
        text = ""
    return text if text else exception_name(exc)


def exception_code(exc: BaseException, default_code: str) -> str:
    """``exc.code`` when it is a ``str``; ``default_code`` when it is anything else, is
    missing, or reading it raises."""
    try:
        code: object = getattr(exc, "code", None)
    except Exception:
        return default_code
    return str.__str__(code) if isinstance(code, str) else default_code


def exception_result(exc: BaseException, default_code: str) -> ToolResult:
    """The error for a raising stage: ``exc.code`` when it is a ``str``, else the default.

    The one place a stage's exception is turned into an error: it never raises because of
    the exception (see :func:`exception_message` and :func:`exception_code`).
    """
    return error_result(
        exception_name(exc), exception_code(exc, default_code), exception_message(exc)
    )


def failures_result(failures: Sequence[BaseException], default_code: str) -> ToolResult:
    """The error for a stage whose work failed in one or several places at once.

    Several failures (an ``ExceptionGroup``, or several failing tasks of one call) are
    reported together: their common ``str`` code if they all share one, else the default.
    """
    if len(failures) == 1:
        return exception_result(failures[0], default_code)
    # No single failure is "the" failure, so report them all.
    codes = {exception_code(f, "") for f in failures}
    code = codes.pop() if len(codes) == 1 else ""
    message = "; ".join(f"{exception_name(f)}: {exception_message(f)}" for f in failures)
    return error_result(
        "ExceptionGroup", code or default_code, f"{len(failures)} failures: {message}"
    )


def wrapper_failure(exc: Exception | trio.Cancelled) -> ToolResult:
    """``WRAPPER_FAILED`` for what an around-execute wrapper raised, a stray ``Cancelled``
    included; an ambient one (an enclosing scope is cancelled) is re-raised instead."""
    try:
        if isinstance(exc, trio.Cancelled):
            return exception_result(stray_or_raise(exc), WRAPPER_FAILED)
        return exception_result(exc, WRAPPER_FAILED)
    finally:
        del exc  # a re-raised exception's traceback holds this frame: no cycle through it
