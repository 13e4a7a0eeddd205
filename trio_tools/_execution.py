"""A tool's definition, the private state of one call to it, and the views each stage gets.

The registry keeps one private, mutable :class:`_Run` per call.  Each pipeline stage gets a
view of it that exposes only the mutability that stage needs: :class:`ToolExecution` is
read-only, :class:`ToolDispatchExecution` (around-execute wrappers only) can replace the
signal, and :class:`ToolRunContext` (the body) adds the body's own capabilities.

:class:`ToolDefinition` lives here too because it and the views refer to each other: a body
takes a ``ToolRunContext``, and every view exposes the call's ``ToolDefinition``.  Defining
a tool (``define_tool``) and parsing its arguments live in modules above and below.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar, final

import attrs
import trio

from ._arguments import ArgumentParser, argument_parser, freeze_schema, schema_for
from ._body import SIGNATURE_CONTEXT, check_class_body, is_async_body, keyword_call
from ._failures import stray_or_raise
from ._input import ExecutionToken
from ._late_nursery import CLOSED, open_late
from ._results import AdditionalContext, ContentBlock, Halt, ToolResult
from ._signal import CancelSignal
from ._util import NoPublicConstructor, check_timeout_value, logger

__all__ = [
    "FinalizeContent",
    "Timeout",
    "ToolBody",
    "ToolDefinition",
    "ToolDispatchExecution",
    "ToolExecution",
    "ToolRunContext",
    "ToolSchema",
]

ArgsT = TypeVar("ArgsT")


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
        # A result no later stage may change, if any: a materialisation failure, or while
        # ambient cancellation re-raises, the ABORTED* that replaces the call's success (by
        # the caller's signal's rule, keeping its contexts and halt) for `abandon`.
        self.decided: ToolResult | None = None
        # The stage callables captured at entry (see ``_pipeline.enter``).
        self.stages: Any = None
        # The batch scheduler's private per-call hooks (``_stages.CallHooks``), if any.
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

    # ``_nursery``: the manager of the call's nursery once opened (on the first
    # ``start_soon``, see _late_nursery); ``_scope``: the body's cancel scope, which the
    # nursery goes right inside, until the body settles (then ``None``: closed to new
    # arrivals); ``_task``: the body's task, which the nursery belongs to.
    __slots__ = ("_nursery", "_scope", "_signal", "_task")

    def __init__(self, run: _Run, signal: CancelSignal, scope: trio.CancelScope) -> None:
        self._run = run
        self._signal = signal
        self._nursery: Any = None
        self._scope: trio.CancelScope | None = scope
        self._task: trio.lowlevel.Task | None = trio.lowlevel.current_task()

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
        manager = self._nursery
        if manager is None:
            if self._scope is None:  # the body has settled
                raise RuntimeError(CLOSED)
            manager = open_late(self)
        manager._nursery.start_soon(_run_guarded, fn, args, name=fn)

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


# ---------------------------------------------------------------------------------------
# The tool definition

ToolBody = Callable[[ArgsT, ToolRunContext], object]
"""A class-style body, ``async def body(args, ctx)`` or ``def body(args, ctx)``."""

Timeout = float | Callable[[ArgsT], float | None] | None
"""Seconds, or a callable of the parsed arguments giving seconds (or ``None``)."""

FinalizeContent = Callable[[ToolExecution, ToolResult], Sequence[ContentBlock] | None]
"""``finalize_content(exec, result) -> blocks | None``: synchronous, content-only."""


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


def _generated_parameters(self: Any) -> Mapping[str, object]:
    # attrs sets fields in order, so ``args`` is already set.
    return schema_for(self.args)


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
        default=attrs.Factory(_generated_parameters, takes_self=True), converter=freeze_schema
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
    _parse: ArgumentParser = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        fn: Callable[..., object] = self.execute
        sync = not is_async_body(fn)
        args = self.args
        context = None if args is None else getattr(args, SIGNATURE_CONTEXT, None)
        if args is not None and isinstance(context, str):
            call = keyword_call(fn, args, context)
        else:
            check_class_body(fn, self.name)
            call = fn
        object.__setattr__(self, "_call", call)
        object.__setattr__(self, "_sync", sync)
        object.__setattr__(self, "_parse", argument_parser(args))

    def schema(self) -> ToolSchema:
        """The model-facing schema (never callbacks, timeout or concurrency flags)."""
        return ToolSchema(name=self.name, description=self.description, parameters=self.parameters)
