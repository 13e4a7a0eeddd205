"""The stages' callables: their types, their registrations, and the snapshot a call takes.

A registry keeps one :class:`Stage` list per stage.  Whenever a registration changes it
builds a new :class:`Stages` snapshot (copy-on-write), and every call reads that snapshot
once at entry, so (un)registering during a call affects later calls only.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self, final

import trio

from ._decisions import ApprovalAnswer, ApprovalRequest, PostDecision, PreDecision
from ._execution import ToolDispatchExecution, ToolExecution
from ._input import ExecutionToken
from ._instrument import Instruments
from ._results import ToolResult
from ._signal import CancelSignal
from ._util import NoPublicConstructor

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._execution import ToolDefinition

__all__ = [
    "Approver",
    "AroundWrapper",
    "Guard",
    "PostExecuteHook",
    "PreExecuteHook",
    "Registration",
    "ResultObserver",
]

PreExecuteHook = Callable[
    [ToolExecution, Callable[[], Awaitable[PreDecision]]], Awaitable[PreDecision]
]
"""``async hook(exec, call_next) -> Allow() | Deny(...) | Ask(...)``."""
AroundWrapper = Callable[
    [ToolDispatchExecution, Callable[[], Awaitable[ToolResult]]], Awaitable[ToolResult]
]
"""``async wrapper(exec, call_next) -> ToolResult``; may replace ``exec.signal``."""
PostExecuteHook = Callable[
    [ToolExecution, ToolResult, Callable[[], Awaitable[PostDecision]]], Awaitable[PostDecision]
]
"""``async hook(exec, result, call_next) -> Accept(...) | Block(...)``."""
ResultObserver = Callable[[ToolExecution, ToolResult], Awaitable[None] | None]
"""``observer(exec, result)``, sync or async; sees every call's one final result."""
Guard = Callable[[ToolExecution], str | None]
"""``guard(exec) -> reason | None``: synchronous; a reason denies the call."""
Approver = Callable[[ApprovalRequest], Awaitable[ApprovalAnswer]]
"""``async approver(request) -> "granted" | "rejected" | "cancelled"``."""


@final
class Registration(metaclass=NoPublicConstructor):
    """Undoes one registration: call it (idempotent), or use it as a context manager."""

    __slots__ = ("_remove",)

    def __init__(self, remove: Callable[[], None] | None) -> None:
        self._remove = remove

    def __repr__(self) -> str:
        return f"<trio_tools.Registration {'active' if self.active else 'removed'}>"

    @property
    def active(self) -> bool:
        """Whether the registration is still in effect."""
        return self._remove is not None

    def __call__(self) -> None:
        """Remove the registration; later calls do nothing."""
        remove, self._remove = self._remove, None
        if remove is not None:
            remove()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self()


class Stages:
    """A snapshot of every stage's callables, captured by each call at entry.

    The registry builds a new snapshot whenever a registration changes (copy-on-write), so
    (un)registering during a call affects later calls only, and entry costs one load.
    """

    __slots__ = (
        "approver",
        "around",
        "around_timed",
        "guards",
        "instruments",
        "observers",
        "policy_alone",
        "post",
        "pre",
        "thread_limiter",
    )

    def __init__(
        self,
        pre: tuple[PreExecuteHook, ...],
        guards: tuple[Guard, ...],
        approver: Approver | None,
        around: tuple[AroundWrapper, ...],
        post: tuple[PostExecuteHook, ...],
        observers: tuple[ResultObserver, ...],
        around_timed: tuple[AroundWrapper, ...],
        instruments: Instruments | None,
        thread_limiter: trio.CapacityLimiter | None,
        policy_alone: tuple[AroundWrapper, ...] | None = None,
    ) -> None:
        self.pre = pre
        self.guards = guards
        self.approver = approver
        self.around = around
        self.post = post
        self.observers = observers
        # The around chain of a tool with a timeout: ``around`` plus the registry's own
        # timeout policy innermost, unless it does not enforce timeouts or a timeout
        # policy was added explicitly (then ``around`` itself).
        self.around_timed = around_timed
        # ``around_timed`` if it is the timeout policy alone (``around`` is that same tuple
        # when the policy was added explicitly), else ``None``: the pipeline then runs no
        # chain, dispatch applies the policy itself.
        self.policy_alone = policy_alone
        self.instruments = instruments
        # The registry's limiter for sync bodies' worker threads (fixed at construction).
        self.thread_limiter = thread_limiter


class Stage:
    """An ordered list of one stage's callables, in registration order.

    Each registration has its own key: the same function may be added twice.
    """

    __slots__ = ("_entries", "_on_change", "fns", "name")

    def __init__(self, name: str, on_change: Callable[[], None]) -> None:
        self.name = name
        self._on_change = on_change
        self._entries: tuple[tuple[object, Any], ...] = ()
        self.fns: tuple[Any, ...] = ()

    def add(self, fn: object) -> Registration:
        if not callable(fn):
            raise TypeError(f"{self.name} must be callable, got {fn!r}")
        return self.add_checked(fn)

    def add_checked(self, fn: object) -> Registration:
        """:meth:`add` without the ``callable`` check (instruments are objects)."""
        key = object()
        self._set((*self._entries, (key, fn)))

        def remove() -> None:
            self._set(tuple(entry for entry in self._entries if entry[0] is not key))

        return Registration._create(remove)

    def _set(self, entries: tuple[tuple[object, Any], ...]) -> None:
        self._entries = entries
        self.fns = tuple(fn for _, fn in entries)
        self._on_change()


# -- the pipeline's private interfaces -------------------------------------------------


class CallInput(Protocol):
    """What the pipeline reads of a call's input, once, at entry: a
    :class:`~trio_tools.ToolExecutionInput`, or the batch scheduler's own stand-in with the
    same fields (``_batch.BatchCall``)."""

    @property
    def call_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def arguments(self) -> object: ...
    @property
    def signal(self) -> CancelSignal: ...
    @property
    def agent(self) -> object | None: ...
    @property
    def parent(self) -> ExecutionToken | None: ...
    @property
    def on_progress(self) -> Callable[[object], None] | None: ...


class CallHooks(Protocol):
    """What the batch scheduler (``_scheduler.py``) hears of one call it runs."""

    def gate_passed(self) -> None:
        """The gate allowed the call; called right before the around-execute chain.

        The scheduler starts the next call only then (or once this call settled), so gates
        run one at a time in model order while each call dispatches right after its gate.
        """

    marks_dispatch: bool
    """Whether :meth:`dispatching` has anything to do: ``False`` spares the pipeline
    awaiting it (a batch without a durable journal writes no dispatch marker)."""

    async def dispatching(self) -> bool:
        """The body is about to be invoked: the last step before it, awaited.

        The scheduler writes its write-ahead dispatch marker here.  ``False`` means the
        write failed (the scheduler has recorded that internal failure): the body is not
        invoked and the call ends ``ABORTED_BEFORE_DISPATCH``.  The signal is checked again
        afterwards: if it fired meanwhile, the body is not invoked either.
        """
        ...

    holds_slot: bool
    """Whether the call holds a slot of the scheduler's pool: only then is
    :meth:`dispatch_settled` called (a batch with no more calls than slots counts none)."""

    def dispatch_settled(self) -> None:
        """The around-execute chain (and so the body) settled, before post-execute: this
        frees the call's pool slot."""

    published: ToolResult | None
    """The call's one final result, set before it is published, also when ``execute`` is
    about to raise (ambient cancellation, ``KeyboardInterrupt``): the scheduler can still
    commit it.  (An attribute, not a call: every call of a batch sets it.)"""


class Pipelined(Protocol):
    """What the pipeline reads of a registry: its tools and its current stage snapshot."""

    _tools: Mapping[str, ToolDefinition[Any]]
    _stages: Stages
