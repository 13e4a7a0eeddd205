"""A tool call as its caller asks for it, and the identity token each call gets."""

# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from collections.abc import Callable
from typing import final

import attrs

from ._signal import CancelSignal
from ._util import NoPublicConstructor

__all__ = ["ExecutionToken", "ToolExecutionInput"]


@final
class ExecutionToken(metaclass=NoPublicConstructor):
    """The opaque identity of one tool call, fresh per call and compared by identity.

    Pass a running call's ``ctx.token`` as ``parent=`` of a nested call's input.
    """

    __slots__ = ("__weakref__", "_call_id")

    def __init__(self, call_id: str) -> None:
        self._call_id = call_id

    def __repr__(self) -> str:
        return f"<trio_tools.ExecutionToken for call {self._call_id!r} at {id(self):#x}>"


@final
@attrs.frozen(kw_only=True)
class ToolExecutionInput:
    """One tool call as the caller asks for it.

    ``signal`` is required: the caller owns the call's lifetime, and there is no default.
    ``arguments`` is a JSON-like value; the registry takes a frozen snapshot of it at entry
    and never mutates it.  ``agent`` is an opaque owner; ``parent`` is the token of the
    enclosing call for nested dispatch; ``on_progress`` receives ``ctx.report_progress``
    values while the body runs.
    """

    call_id: str
    name: str
    arguments: object
    signal: CancelSignal
    agent: object | None = None
    parent: ExecutionToken | None = None
    on_progress: Callable[[object], None] | None = None

    def __attrs_post_init__(self) -> None:
        # One check function rather than a validator per field: every tool call builds an
        # input, and this keeps construction cheap.  The signal is deliberately not checked
        # at run time: the type checker owns that contract.
        if type(self.call_id) is not str:
            raise TypeError(f"call_id must be a str, got {self.call_id!r}")
        if type(self.name) is not str:
            raise TypeError(f"name must be a str, got {self.name!r}")
        if self.parent is not None and type(self.parent) is not ExecutionToken:
            raise TypeError(f"parent must be an ExecutionToken or None, got {self.parent!r}")
        if self.on_progress is not None and not callable(self.on_progress):
            raise TypeError(f"on_progress must be callable or None, got {self.on_progress!r}")
