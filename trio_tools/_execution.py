"""A call's input, its identity token, and the stage-specific views of the running call.

The registry keeps one private, mutable :class:`_Run` per call.  Each pipeline stage gets a
view of it that exposes only the mutability that stage needs: :class:`ToolExecution` is
read-only, :class:`ToolDispatchExecution` (around-execute wrappers only) can replace the
signal, and :class:`ToolRunContext` (the body) adds the body's own capabilities.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from ._results import AdditionalContext, Halt, ToolResult, stray_or_raise
from ._signal import CancelSignal
from ._util import NoPublicConstructor, logger

if TYPE_CHECKING:
    from ._tool import ToolDefinition

__all__ = [
    "ExecutionToken",
    "ToolDispatchExecution",
    "ToolExecution",
    "ToolExecutionInput",
    "ToolRunContext",
]


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


class _Run:
    """The registry's private, mutable state of one call; stages see it through views."""

    __slots__ = (
        "_execution",
        "_token",
        "agent",
        "arguments",
        "arguments_error",
        "body_contexts",
        "body_invoked",
        "call_id",
        "caller_signal",
        "concludes",
        "decided",
        "definition",
        "dispatch_signal",
        "halt",
        "hooks",
        "name",
        "on_progress",
        "parent",
        "parsed",
        "settled",
        "stages",
    )

    def __init__(
        self,
        call_id: str,
        name: str,
        signal: CancelSignal,
        agent: object,
        parent: ExecutionToken | None,
        on_progress: Callable[[object], None] | None,
        definition: ToolDefinition[Any] | None,
    ) -> None:
        self.call_id = call_id
        self.name = name
        self.caller_signal = signal
        self.dispatch_signal = signal
        self.agent = agent
        self.parent = parent
        self.on_progress = on_progress
        self.definition = definition
        self._token: ExecutionToken | None = None
        self._execution: ToolExecution | None = None
        self.arguments: object = None
        # Why JSON text of the arguments did not parse (an INVALID_ARGS violation), if so.
        self.arguments_error: str | None = None
        # The arguments parsed for the definition, once validated.
        self.parsed: object = None
        self.body_invoked = False
        self.settled = False
        self.body_contexts: tuple[AdditionalContext, ...] = ()
        self.halt: Halt | None = None
        self.concludes = False
        # A result no later stage may change (materialisation failure), if any.
        self.decided: ToolResult | None = None
        # The stage callables captured at entry (see ToolRegistry._enter).
        self.stages: Any = None
        # The batch scheduler's private per-call hooks (``_registry._CallHooks``), if any.
        self.hooks: Any = None

    @property
    def token(self) -> ExecutionToken:
        """The call's token, minted on first use (identity is all it has)."""
        token = self._token
        if token is None:
            token = self._token = ExecutionToken._create(self.call_id)
        return token

    def execution(self) -> ToolExecution:
        """The call's one read-only view, shared by every stage that gets one."""
        view = self._execution
        if view is None:
            # What ``ToolExecution._create(self)`` does, without the metaclass call: every
            # instrumented call makes this view, and this halves its cost.
            view = self._execution = object.__new__(ToolExecution)
            view._run = self
        return view


class _View:
    """The read-only fields every view shares."""

    __slots__ = ("_run",)

    _run: _Run

    def __init__(self, run: _Run) -> None:
        self._run = run

    def __repr__(self) -> str:
        return f"<trio_tools.{type(self).__name__} {self._run.name!r} call {self._run.call_id!r}>"

    @property
    def call_id(self) -> str:
        """The call's id, as the model gave it."""
        return self._run.call_id

    @property
    def name(self) -> str:
        """The requested tool name."""
        return self._run.name

    @property
    def arguments(self) -> object:
        """The frozen snapshot of the arguments, or ``None`` when materialisation failed."""
        return self._run.arguments

    @property
    def token(self) -> ExecutionToken:
        """This call's identity, fresh per call."""
        return self._run.token

    @property
    def parent(self) -> ExecutionToken | None:
        """The token of the enclosing call, for nested dispatch."""
        return self._run.parent

    @property
    def agent(self) -> object | None:
        """The opaque owner the caller passed (e.g. the agent)."""
        return self._run.agent

    @property
    def definition(self) -> ToolDefinition[Any] | None:
        """The tool definition resolved at entry, or ``None`` for an unknown tool."""
        return self._run.definition


@final
class ToolExecution(_View, metaclass=NoPublicConstructor):
    """Read-only view of a call, for pre-execute hooks, guards, the approver, post-execute
    hooks, result observers and ``finalize_content``.

    ``signal`` is the caller's signal: it cannot be replaced from here.
    """

    __slots__ = ()

    @property
    def signal(self) -> CancelSignal:
        """The caller's signal."""
        return self._run.caller_signal


@final
class ToolDispatchExecution(_View, metaclass=NoPublicConstructor):
    """The view given only to around-execute wrappers: ``signal`` can be replaced.

    Assign a narrowed signal (e.g. from ``open_signal(exec.signal, timeout=...)``) for the
    span of ``call_next()``; the registry fuses it with the caller's signal before the body
    runs, so a wrapper can narrow the lifetime but never detach from the caller.  The signal
    cannot be deleted or set to ``None``; after the chain the caller's signal is restored.
    """

    __slots__ = ()

    @property
    def signal(self) -> CancelSignal:
        """The signal the next stage will see (the caller's, unless a wrapper replaced it)."""
        return self._run.dispatch_signal

    @signal.setter
    def signal(self, value: CancelSignal) -> None:
        if not isinstance(value, CancelSignal):
            raise TypeError(f"signal must be a CancelSignal, got {value!r}")
        self._run.dispatch_signal = value


@final
class ToolRunContext(_View, metaclass=NoPublicConstructor):
    """What the tool body receives: the call's read-only fields plus the body's capabilities.

    ``signal`` is the fused signal: it fires when the caller's signal or any wrapper's
    narrowed signal fires.  The body already runs inside a cancel scope bound to it, so
    cooperative Trio code needs no extra effort; pass it on to nested calls and threads.

    Every method also works from a worker thread started by Trio (a sync tool's thread, or
    ``trio.to_thread.run_sync`` in an async body): it hops to the Trio thread with
    ``trio.from_thread.run_sync`` and runs there.  :meth:`check_cancelled` is for such
    threads only.
    """

    __slots__ = ("_nursery", "_signal")

    def __init__(self, run: _Run, signal: CancelSignal, nursery: trio.Nursery) -> None:
        self._run = run
        self._signal = signal
        self._nursery = nursery

    @property
    def signal(self) -> CancelSignal:
        """The fused signal of this call's body."""
        return self._signal

    def check_cancelled(self) -> None:
        """In a sync tool's worker thread: raise ``trio.Cancelled`` once the call's signal
        has fired (``trio.from_thread.check_cancelled()``).

        A sync body is never abandoned: calling this between steps is how it stops early.
        Letting the ``Cancelled`` propagate makes the call ``ABORTED`` (or ``TOOL_TIMEOUT``
        past the tool's deadline).

        Raises:
            trio.Cancelled: the call was cancelled.
            RuntimeError: called from the Trio thread (an async body observes cancellation
                at its checkpoints), or from a thread Trio did not start.
        """
        if trio.lowlevel.in_trio_run():
            raise RuntimeError(
                "ctx.check_cancelled() is for sync tools, in their worker thread; an async "
                "body is cancelled at its next checkpoint"
            )
        trio.from_thread.check_cancelled()

    def start_soon(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Start ``fn(*args)`` in the call's own nursery.

        The work belongs to this call: it runs under the call's cancel scope, the registry
        awaits it before the result is published, and an exception from it is the tool's
        failure (so is a ``trio.Cancelled`` it raises while no scope around it was
        cancelled).
        """
        if not trio.lowlevel.in_trio_run():
            trio.from_thread.run_sync(self._start_soon, fn, args)
            return
        self._start_soon(fn, args)

    def _start_soon(self, fn: Callable[..., Awaitable[object]], args: tuple[object, ...]) -> None:
        self._nursery.start_soon(_run_guarded, fn, args, name=fn)

    def defer_context(self, ctx: AdditionalContext) -> None:
        """Attach ``ctx`` to this call's result (kept also when the call is cancelled).

        Raises:
            TypeError: ``ctx`` is not an :class:`AdditionalContext`.
            RuntimeError: the call has already settled.
        """
        if not isinstance(ctx, AdditionalContext):
            raise TypeError(f"defer_context() takes an AdditionalContext, got {ctx!r}")
        if not trio.lowlevel.in_trio_run():
            trio.from_thread.run_sync(self.defer_context, ctx)
            return
        run = self._run
        if run.settled:
            raise RuntimeError("defer_context() called after the tool call settled")
        run.body_contexts += (ctx,)

    def report_progress(self, progress: object) -> None:
        """Pass ``progress`` to the caller's ``on_progress`` while the body runs.

        Reports after the body settled are dropped; a raising receiver is logged.  The
        receiver always runs in the Trio thread: called from a worker thread, this hops
        there (and returns once the receiver has run).
        """
        run = self._run
        receiver = run.on_progress
        # Only while the body runs: invoked, and its dispatch not yet settled.
        if receiver is None or not run.body_invoked or run.settled:
            return
        if not trio.lowlevel.in_trio_run():
            trio.from_thread.run_sync(self.report_progress, progress)
            return
        try:
            receiver(progress)
        except Exception:
            logger.exception("on_progress receiver %r raised", receiver)

    def conclude_turn(self) -> None:
        """Mark the result as concluding the agent's turn (kept on a successful result only)."""
        if not trio.lowlevel.in_trio_run():
            trio.from_thread.run_sync(self.conclude_turn)
            return
        self._run.concludes = True

    def halt_turn(self, reason: str) -> None:
        """Put ``Halt(reason)`` on this call's result; the first halt of the call wins."""
        if not isinstance(reason, str):
            raise TypeError(f"halt_turn() takes a str reason, got {reason!r}")
        if not trio.lowlevel.in_trio_run():
            trio.from_thread.run_sync(self.halt_turn, reason)
            return
        run = self._run
        if run.halt is None:
            run.halt = Halt(reason)


async def _run_guarded(fn: Callable[..., Awaitable[object]], args: tuple[object, ...]) -> None:
    """A ``ctx.start_soon`` task: a stray ``trio.Cancelled`` becomes its failure.

    Left alone, the call's nursery would absorb it (a failing child cancels the nursery's
    own scope, which then takes every ``Cancelled``), and the call would look successful.
    """
    try:
        await fn(*args)
    except trio.Cancelled as exc:
        raise stray_or_raise(exc) from exc
