"""The tool registry and the pipeline every call goes through.

:meth:`ToolRegistry.execute` is the whole contract in one function, read top to bottom:
entry, pre-aborted check, resolution, the gate (pre-execute, guards, approval) under the
caller's signal, the around-execute chain ending in dispatch (the body under the fused
signal, in its own nursery), post-execute, then finish and publish.  Each stage is a method
named for it.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Literal, Protocol, Self, TypeVar, cast, final, overload

import trio

from ._decisions import (
    Accept,
    Allow,
    ApprovalAnswer,
    ApprovalRequest,
    Ask,
    Block,
    Deny,
    PostDecision,
    PreDecision,
)
from ._execution import (
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    ToolRunContext,
    _Run,
)
from ._instrument import Instrument, Instruments, check_instrument
from ._json import JSONText, NestingTooDeepError, NotJSONError, freeze, to_compact_json
from ._results import (
    BLOCKED,
    DENIED,
    FINALIZE_FAILED,
    INVALID_ARGS,
    NOT_JSON,
    POST_EXECUTE_FAILED,
    PRE_EXECUTE_FAILED,
    TOOL_FAILED,
    UNKNOWN_TOOL,
    WRAPPER_FAILED,
    ContentBlock,
    ErrorInfo,
    ImageBlock,
    StrayCancelled,
    TextBlock,
    ToolOutput,
    ToolResult,
    _content,
    aborted,
    error_result,
    exception_result,
    failures_result,
    make_result,
    replace_result,
    stray_or_raise,
    text_block,
)
from ._signal import _Link
from ._timeout import TimeoutPolicy, is_timeout_policy
from ._tool import (
    FinalizeContent,
    JSONFirstBody,
    RawBody,
    Timeout,
    ToolBody,
    ToolDefinition,
    ToolSchema,
    _ToolDecorator,
    define_tool,
    parse_arguments,
)
from ._util import NoPublicConstructor, leaf_exceptions, logger, safe_repr

__all__ = [
    "Approver",
    "AroundWrapper",
    "Guard",
    "PostExecuteHook",
    "PreExecuteHook",
    "Registration",
    "ResultObserver",
    "ToolRegistry",
]

ArgsT = TypeVar("ArgsT")

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

_ALLOW = Allow()
_ASK = Ask()
_NOT_STARTED = object()  # the instruments' state until they have started
_ACCEPT = Accept()
# The timeout policy a registry that enforces timeouts applies innermost.
_ENFORCED_TIMEOUTS = TimeoutPolicy()


class _FinalResult(Exception):
    """Raised inside the pipeline for results that skip every later stage."""

    def __init__(self, result: ToolResult) -> None:
        self.result = result


class _CallHooks(Protocol):
    """What the batch scheduler (``_scheduler.py``) hears of one call it runs."""

    def gate_passed(self) -> None:
        """The gate allowed the call; called right before the around-execute chain.

        The scheduler starts the next call only then (or once this call settled), so gates
        run one at a time in model order while each call dispatches right after its gate.
        """

    async def dispatching(self) -> bool:
        """The body is about to be invoked: the last step before it, awaited.

        The scheduler writes its write-ahead dispatch marker here.  ``False`` means the
        write failed (the scheduler has recorded that internal failure): the body is not
        invoked and the call ends ``ABORTED_BEFORE_DISPATCH``.  The signal is checked again
        afterwards: if it fired meanwhile, the body is not invoked either.
        """
        ...

    def dispatch_settled(self) -> None:
        """The around-execute chain (and so the body) settled, before post-execute: this
        frees the call's pool slot."""

    def published(self, result: ToolResult) -> None:
        """The call's one final result, also when ``execute`` is about to raise (ambient
        cancellation, ``KeyboardInterrupt``): the scheduler can still commit it."""


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


class _Stages:
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
        "post",
        "pre",
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
        instruments: Instruments | None = None,
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
        self.instruments = instruments


class _Stage:
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


class _Chain:
    """Whether a middleware chain is still running: its ``call_next`` callables work only then.

    A stage may keep its ``call_next`` and call it after it returned; once the chain has
    returned, that would run the rest of the chain (for around-execute: the tool body)
    outside any call, after its result was decided.
    """

    __slots__ = ("open",)

    def __init__(self) -> None:
        self.open = True

    def check(self) -> None:
        if not self.open:
            raise RuntimeError("call_next() called after the tool call's chain had returned")


class _Once:
    """``call_next`` of the around-execute chain: at most once, while the chain runs."""

    __slots__ = ("_chain", "_index", "_step")

    def __init__(self, step: Callable[[int], Awaitable[Any]], chain: _Chain, index: int) -> None:
        self._step: Callable[[int], Awaitable[Any]] | None = step
        self._chain = chain
        self._index = index

    def __call__(self) -> Awaitable[Any]:
        self._chain.check()
        step, self._step = self._step, None
        if step is None:
            raise RuntimeError("call_next() may be called only once")
        return step(self._index)


def _split_failure(exc: BaseException) -> tuple[list[Exception], list[BaseException]]:
    """Split an exception (group) into ordinary failures and everything else."""
    failures: list[Exception] = []
    others: list[BaseException] = []
    for leaf in leaf_exceptions(exc):
        if isinstance(leaf, Exception):
            failures.append(leaf)
        else:
            others.append(leaf)
    return failures, others


def _denied(reason: str, halt: Any = None) -> ToolResult:
    return error_result("ToolDeniedError", DENIED, reason, halt=halt)


def _not_json_result(what: str, exc: NotJSONError | None = None) -> ToolResult:
    message = f"tool {what} must be losslessly JSON-serializable"
    if isinstance(exc, NestingTooDeepError):
        message = f"{message}: {exc}"
    return error_result("TypeError", NOT_JSON, message)


def _materialise(arguments: object) -> tuple[object, str | None]:
    """The frozen arguments, or ``(raw text, violation)`` for JSON text that does not parse.

    Raises:
        NotJSONError: not lossless JSON (for text: nested too deep).
    """
    if type(arguments) is JSONText:
        return arguments.parse()
    return freeze(arguments), None


def _content_of(value: object) -> tuple[ContentBlock, ...] | None:
    """Content for a body's return value, or ``None`` when it is plain JSON data."""
    if type(value) is str:
        return (text_block(value),)
    if isinstance(value, TextBlock | ImageBlock):
        return (value,)
    if isinstance(value, list | tuple):
        items = cast("Sequence[object]", value)
        if not items:
            return ()
        blocks = tuple(item for item in items if isinstance(item, TextBlock | ImageBlock))
        if len(blocks) == len(items):
            return blocks
    return None


def _body_result(value: object) -> ToolResult:
    """Turn what a body returned into a candidate result."""
    content = _content_of(value)
    if content is not None:
        return make_result(content)
    meta: object = None
    if isinstance(value, ToolOutput):
        meta = value.meta
        content = _content_of(value.content)
        if content is None:
            raise TypeError(
                "ToolOutput.content must be a str or content blocks, "
                f"got {safe_repr(value.content)}"
            )
        return make_result(content, meta=meta)
    try:
        text = to_compact_json(freeze(value))
    except NotJSONError as exc:
        return _not_json_result("result", exc)
    return make_result((TextBlock(text),))


@final
class ToolRegistry:
    """Tools and the policy stages around them; :meth:`execute` runs one call.

    Middleware (pre-execute, around-execute, post-execute) runs in registration order, the
    first registered outermost.  Every registration method returns a :class:`Registration`
    that undoes it.

    Args:
        thread_limiter: bounds the worker threads of sync tool bodies (bodies that are not
            coroutine functions run in ``trio.to_thread.run_sync(..., limiter=...,
            abandon_on_cancel=False)``); ``None`` uses Trio's default limiter.
        enforce_timeouts: apply each tool's ``timeout`` with :func:`timeout_policy` as the
            innermost around-execute step, right before dispatch, unless a
            ``timeout_policy()`` was added explicitly (then at that position, once).
            ``False``: without an explicit policy, ``timeout`` is only metadata.

    Raises:
        TypeError: ``thread_limiter`` is not a ``trio.CapacityLimiter`` or ``None``, or
            ``enforce_timeouts`` is not a ``bool``.
    """

    def __init__(
        self,
        *,
        thread_limiter: trio.CapacityLimiter | None = None,
        enforce_timeouts: bool = True,
    ) -> None:
        if thread_limiter is not None and not isinstance(thread_limiter, trio.CapacityLimiter):
            raise TypeError(
                f"thread_limiter must be a trio.CapacityLimiter or None, got {thread_limiter!r}"
            )
        if not isinstance(enforce_timeouts, bool):
            raise TypeError(f"enforce_timeouts must be a bool, got {enforce_timeouts!r}")
        self._thread_limiter = thread_limiter
        self._enforce_timeouts = enforce_timeouts
        self._tools: dict[str, ToolDefinition[Any]] = {}
        self._pre = _Stage("a pre-execute hook", self._snapshot)
        self._around = _Stage("an around-execute wrapper", self._snapshot)
        self._post = _Stage("a post-execute hook", self._snapshot)
        self._observers = _Stage("a result observer", self._snapshot)
        self._guards = _Stage("a guard", self._snapshot)
        self._instruments = _Stage("an instrument", self._snapshot)
        self._approver: Approver | None = None
        self._snapshot()

    def _snapshot(self) -> None:
        around: tuple[AroundWrapper, ...] = self._around.fns
        timed = around
        if self._enforce_timeouts and not any(is_timeout_policy(fn) for fn in around):
            timed = (*around, _ENFORCED_TIMEOUTS)
        self._stages = _Stages(
            self._pre.fns,
            self._guards.fns,
            self._approver,
            around,
            self._post.fns,
            self._observers.fns,
            timed,
            Instruments(self._instruments.fns) if self._instruments.fns else None,
        )

    def __repr__(self) -> str:
        return f"<trio_tools.ToolRegistry with {len(self._tools)} tool(s)>"

    # -- tools ---------------------------------------------------------------------------

    def register(self, definition: ToolDefinition[Any]) -> Registration:
        """Register a tool.

        Raises:
            ValueError: a tool of that name is already registered.
            TypeError: ``definition`` is not a :class:`ToolDefinition`.
        """
        if not isinstance(definition, ToolDefinition):
            raise TypeError(f"register() takes a ToolDefinition, got {definition!r}")
        name = definition.name
        if name in self._tools:
            raise ValueError(f"a tool named {name!r} is already registered")
        self._tools[name] = definition

        def remove() -> None:
            if self._tools.get(name) is definition:
                del self._tools[name]

        return Registration._create(remove)

    @overload
    def tool(
        self,
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
    def tool(
        self,
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
    def tool(
        self,
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
    def tool(
        self,
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
    def tool(
        self,
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

    def tool(
        self,
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
        """Decorator: :func:`define_tool` with the same options, then :meth:`register`."""

        def build(body: Callable[..., object]) -> ToolDefinition[Any]:
            definition = define_tool(
                body,
                name=name,
                description=description,
                args=args,
                timeout=timeout,
                concurrency_safe=concurrency_safe,
                requires_approval=requires_approval,
                finalize_content=finalize_content,
            )
            self.register(definition)
            return definition

        if fn is None:
            return build
        return build(fn)

    def get(self, name: str) -> ToolDefinition[Any] | None:
        """The registered definition called ``name``, or ``None``."""
        return self._tools.get(name)

    def schemas(self) -> tuple[ToolSchema, ...]:
        """The model-facing schemas of every tool, in registration order."""
        return tuple(definition.schema() for definition in self._tools.values())

    def execution_mode(self, input: ToolExecutionInput) -> Literal["parallel", "exclusive"]:
        """Whether ``input`` may run beside other calls: ``"parallel"`` only when the tool's
        ``concurrency_safe`` is exactly ``True`` (or its callable returns exactly ``True``
        for the parsed arguments); unknown tools, invalid arguments and a raising callable
        give ``"exclusive"``."""
        definition = self._tools.get(input.name)
        if definition is None:
            return "exclusive"
        flag = definition.concurrency_safe
        if flag is True or flag is False:
            return "parallel" if flag else "exclusive"
        try:
            arguments, text_error = _materialise(input.arguments)
            if text_error is not None:
                return "exclusive"
            value, violations = parse_arguments(definition, arguments)
            if violations:
                return "exclusive"
            return "parallel" if flag(value) is True else "exclusive"
        except NotJSONError:
            return "exclusive"  # the call will be NOT_JSON
        except Exception:
            logger.exception(
                "concurrency_safe of tool %r raised; running it exclusively", input.name
            )
            return "exclusive"

    # -- stages --------------------------------------------------------------------------

    def add_pre_execute(self, hook: PreExecuteHook) -> Registration:
        """Add ``async hook(exec, call_next) -> PreDecision`` to the pre-execute chain."""
        return self._pre.add(hook)

    def add_around_execute(self, wrapper: AroundWrapper) -> Registration:
        """Add ``async wrapper(exec, call_next) -> ToolResult`` to the around-execute chain."""
        return self._around.add(wrapper)

    def add_post_execute(self, hook: PostExecuteHook) -> Registration:
        """Add ``async hook(exec, result, call_next) -> PostDecision`` to post-execute."""
        return self._post.add(hook)

    def add_observer(self, observer: ResultObserver) -> Registration:
        """Add a result observer: ``observer(exec, result)``, sync or async."""
        return self._observers.add(observer)

    def add_guard(self, guard: Guard) -> Registration:
        """Add a synchronous ``guard(exec) -> reason | None``; runs after an ``Allow``."""
        return self._guards.add(guard)

    def add_instrument(self, instrument: Instrument) -> Registration:
        """Add an :class:`Instrument`: ``call_started(exec)`` and ``call_finished(exec,
        result)`` for every call, including those that end before any stage runs and the
        batch scheduler's synthetic results.

        Raises:
            TypeError: ``instrument`` lacks a callable ``call_started`` or ``call_finished``.
        """
        check_instrument(instrument)
        return self._instruments.add_checked(instrument)

    def set_approver(self, approver: Approver | None) -> Registration:
        """Replace the approver (``None`` removes it); the registration restores nothing but
        removes this approver if it is still the current one."""
        if approver is not None and not callable(approver):
            raise TypeError(f"an approver must be callable, got {approver!r}")
        self._approver = approver
        self._snapshot()

        def remove() -> None:
            if self._approver is approver:
                self._approver = None
                self._snapshot()

        return Registration._create(remove)

    # -- the pipeline --------------------------------------------------------------------

    async def execute(self, input: ToolExecutionInput) -> ToolResult:
        """Run one tool call through the pipeline and return its one frozen result.

        The same result object is published to every result observer first.  Cancellation
        of ``input.signal`` never raises: it becomes ``ABORTED`` (the body was invoked) or
        ``ABORTED_BEFORE_DISPATCH``.  Started work is always awaited: a body that ignores
        its signal keeps this call pending.

        Raises:
            trio.Cancelled: an enclosing Trio scope (not the signal) was cancelled; the
                result was published before re-raising.
            BaseException: ``KeyboardInterrupt`` and similar propagate likewise, after
                publication.
        """
        return await self._execute(input, None)

    async def _execute(self, input: ToolExecutionInput, hooks: _CallHooks | None) -> ToolResult:
        """:meth:`execute`, plus the batch scheduler's private hooks (see :class:`_CallHooks`).

        ``execute`` passes ``None``: one check per hook point.
        """
        # 1. Entry (synchronous): token, fields read once, definition, materialisation.
        run, finalize = self._enter(input)
        run.hooks = hooks
        stages: _Stages = run.stages
        instruments = stages.instruments
        view: ToolExecution | None = None  # set when the call has instruments
        started: object = _NOT_STARTED
        try:
            if instruments is not None:
                view = run.execution()
                try:
                    started = instruments.start(view)
                except Exception:
                    started = instruments.start_failed()
                if started is not None:
                    started = instruments.enter(started)
            try:
                await trio.lowlevel.checkpoint_if_cancelled()
                # 1-2. Materialisation failure, then a pre-aborted caller: final, no stage
                # runs (not even post-execute).
                if run.decided is not None:
                    raise _FinalResult(run.decided)
                if run.caller_signal.cancelled:
                    raise _FinalResult(aborted(body_invoked=False))
                # 3. Unknown tool / invalid arguments skip straight to post-execute.
                args, result = self._resolve(run)
                # Resolved whenever ``result`` is None (no run-time cast on this path).
                definition: Any = run.definition
                # 4. The gate: pre-execute chain, guards, approval, under the caller's signal.
                if result is None and (
                    stages.pre or stages.guards or definition.requires_approval is not False
                ):
                    result = await self._gate(run)
                # 5. The around-execute chain, ending in dispatch of the body.
                if result is None:
                    if hooks is not None:
                        hooks.gate_passed()
                    wrappers = stages.around if definition.timeout is None else stages.around_timed
                    try:
                        if wrappers:
                            result = await self._around_execute(run, args, wrappers)
                        else:
                            result = await self._dispatch(run, args)
                    finally:
                        if hooks is not None:
                            hooks.dispatch_settled()
                    result = await self._cancellation_overrides(run, result)
                # 6. Post-execute, then cancellation that arrived while it waited.
                if stages.post:
                    result = await self._cancellation_overrides(
                        run, await self._post_execute(run, result)
                    )
                candidate = result
            except _FinalResult as final:
                candidate = final.result
            if not run.body_invoked:
                # The body's nursery was the schedule point on the dispatch path; every
                # other path still owes the caller one.
                await trio.lowlevel.cancel_shielded_checkpoint()
            # 7. Finish: snapshot, finalize_content (called once: it is consumed here, so a
            # BaseException it raises leads to a fallback without a second call), freeze.
            finalize_once, finalize = finalize, None
            result = self._finish(run, candidate, finalize_once)
        except BaseException:
            # Ambient cancellation or KeyboardInterrupt: the call still gets its one result.
            fallback = run.decided or aborted(
                body_invoked=run.body_invoked,
                additional_contexts=run.body_contexts,
                halt=run.halt,
            )
            fallback = self._finish(run, fallback, finalize)
            if hooks is not None:
                hooks.published(fallback)
            if view is not None and started is not _NOT_STARTED:
                assert instruments is not None  # the view is made only for instruments
                instruments.finish(started, view, fallback)
            if stages.observers:
                await self._publish(run, fallback)
            run._execution = None  # see below
            raise
        # Publish the same object that is returned.
        if hooks is not None:
            hooks.published(result)
        if view is not None:
            assert instruments is not None  # the view is made only for instruments
            if started is None:  # one instrument, no context manager: the usual case
                try:
                    instruments.finished(view, result)
                except Exception:
                    instruments.finish_failed()
            else:
                instruments.finish(started, view, result)
        if stages.observers:
            await self._publish(run, result)
        # The call is over: drop the run's view, which refers back to the run, so that
        # reference counting frees the call's objects now rather than the cyclic GC later.
        run._execution = None
        return result

    def _report_synthetic(self, input: ToolExecutionInput, result: ToolResult) -> None:
        """Give the instruments a result the batch scheduler made for a call it never
        started, with the view the call would have had."""
        instruments = self._stages.instruments
        if instruments is not None:
            instruments.report(self._enter(input)[0].execution(), result)

    def _enter(self, input: ToolExecutionInput) -> tuple[_Run, FinalizeContent | None]:
        """Entry: read each field once, resolve the definition, materialise the arguments.

        The token and the read-only view are created on first use: both are per call and
        compared by identity, so creating them lazily is unobservable.
        """
        name = input.name
        definition = self._tools.get(name)
        run = _Run(
            input.call_id,
            name,
            input.signal,
            input.agent,
            input.parent,
            input.on_progress,
            definition,
        )
        run.stages = self._stages
        try:
            run.arguments, run.arguments_error = _materialise(input.arguments)
        except NotJSONError as exc:
            run.decided = _not_json_result("execution arguments", exc)
        return run, definition.finalize_content if definition is not None else None

    def _resolve(self, run: _Run) -> tuple[Any, ToolResult | None]:
        definition = run.definition
        if definition is None:
            return None, error_result(
                "ToolNotFoundError", UNKNOWN_TOOL, f'unknown tool "{run.name}"'
            )
        if run.arguments_error is not None and definition.args is not None:
            # JSON text that did not parse; a raw tool (no argument type) gets the text.
            return None, error_result(
                "ToolArgsError", INVALID_ARGS, f"invalid arguments: {run.arguments_error}"
            )
        args, violations = parse_arguments(definition, run.arguments)
        if violations:
            return None, error_result(
                "ToolArgsError", INVALID_ARGS, f"invalid arguments: {'; '.join(violations)}"
            )
        run.parsed = args
        return args, None

    async def _gate(self, run: _Run) -> ToolResult | None:
        """Pre-execute, guards and approval under the caller's signal.

        Returns ``None`` to proceed, or the denial / before-dispatch abort that goes on to
        post-execute.  A raising stage is final (``PRE_EXECUTE_FAILED``).
        """
        stages: _Stages = run.stages
        hooks, guards, approver = stages.pre, stages.guards, stages.approver
        decided = False
        outcome: ToolResult | None = None
        try:
            with run.caller_signal.open_scope():
                outcome = await self._decide(run, run.execution(), hooks, guards, approver)
                decided = True
        except Exception as exc:  # also a group left once the scope took its Cancelled
            raise _FinalResult(exception_result(exc, PRE_EXECUTE_FAILED)) from None
        except trio.Cancelled as exc:
            stray = stray_or_raise(exc)
            raise _FinalResult(exception_result(stray, PRE_EXECUTE_FAILED)) from None
        if not decided or (outcome is None and run.caller_signal.cancelled):
            # Interrupted, or allowed only after the caller had cancelled: never dispatched.
            return aborted(body_invoked=False)
        return outcome

    async def _decide(
        self,
        run: _Run,
        execution: ToolExecution,
        hooks: tuple[PreExecuteHook, ...],
        guards: tuple[Guard, ...],
        approver: Approver | None,
    ) -> ToolResult | None:
        definition = run.definition
        assert definition is not None
        end = _allowed if definition.requires_approval is False else _ApprovalEnd(run)
        decision: object = await _pre_chain(hooks, execution, end) if hooks else await end()
        if isinstance(decision, Allow):
            for guard in guards:
                reason = guard(execution)
                if reason is not None:
                    if not isinstance(reason, str):
                        raise TypeError(
                            f"guard {safe_repr(guard)} returned {safe_repr(reason)}, "
                            "not a str or None"
                        )
                    return _denied(reason)
            return None
        if isinstance(decision, Deny):
            return _denied(decision.reason, decision.halt)
        if not isinstance(decision, Ask):
            raise TypeError(
                f"pre-execute chain returned {safe_repr(decision)}; "
                "expected Allow(), Deny() or Ask()"
            )
        name = run.name
        if approver is None:
            return _denied(f'tool "{name}" requires approval, but no approver is configured')
        answer: object = await approver(ApprovalRequest(execution, decision.reason))
        if type(answer) is str:  # a str subclass or another type may compare as it likes
            if answer == "granted":
                return None
            if answer == "rejected":
                return _denied(f'the user rejected tool "{name}"')
            if answer == "cancelled":
                if run.caller_signal.cancelled:
                    return aborted(body_invoked=False)
                return _denied(f'approval for tool "{name}" was cancelled')
        raise TypeError(
            f"approver returned {safe_repr(answer)}; expected 'granted', 'rejected' or 'cancelled'"
        )

    async def _around_execute(
        self, run: _Run, args: Any, wrappers: tuple[AroundWrapper, ...]
    ) -> ToolResult:
        """The around-execute chain; its end is dispatch.  A raising wrapper is final."""
        try:
            result = await _around_chain(
                wrappers, ToolDispatchExecution._create(run), run, self._dispatch, args
            )
        except Exception as exc:
            raise _FinalResult(exception_result(exc, WRAPPER_FAILED)) from None
        except trio.Cancelled as exc:
            stray = stray_or_raise(exc)
            raise _FinalResult(exception_result(stray, WRAPPER_FAILED)) from None
        finally:
            run.dispatch_signal = run.caller_signal
        return _with_body_contexts(run, result)

    async def _dispatch(self, run: _Run, args: Any) -> ToolResult:
        """The end of the around-execute chain: run the body to quiescence.

        Fuses the caller's signal (captured at entry) with the wrapper's current
        ``exec.signal`` (the same object: no fusion), runs the body in a per-call nursery
        inside the fused signal's scope, removes the fusion's listeners and restores
        ``exec.signal`` to the wrapper's value.
        """
        definition = run.definition
        assert definition is not None
        wrapper_signal = run.dispatch_signal
        link = (
            None
            if wrapper_signal is run.caller_signal
            else _Link((run.caller_signal, wrapper_signal))
        )
        fused = wrapper_signal if link is None else link.signal
        failure: BaseException | None = None
        value: object = None
        key = -1
        try:
            if fused.cancelled:
                return aborted(body_invoked=False)
            hooks: _CallHooks | None = run.hooks
            # Write-ahead: the scheduler's dispatch marker is durable before the body runs.
            if hooks is not None and (not await hooks.dispatching() or fused.cancelled):
                return aborted(body_invoked=False)
            run.body_invoked = True
            # The per-call nursery's own cancel scope is the scope bound to the fused
            # signal (one scope fewer than `with fused.open_scope(): async with nursery`,
            # same behaviour): the body and everything it started stop at their next
            # checkpoint, and the nursery absorbs its own Cancelled.
            async with trio.open_nursery() as nursery:
                key = fused._bind(nursery.cancel_scope)
                try:
                    ctx = ToolRunContext._create(run, fused, nursery)
                    if definition._sync:
                        # Never abandoned: the call stays pending until the thread returns
                        # (it sees cancellation through ctx.check_cancelled()).
                        value = await trio.to_thread.run_sync(
                            _run_sync_body,
                            definition,
                            args,
                            ctx,
                            abandon_on_cancel=False,
                            limiter=self._thread_limiter,
                        )
                    else:
                        value = await cast("Awaitable[object]", definition._call(args, ctx))
                except trio.Cancelled as exc:
                    # The nursery's own scope would catch this (it is the innermost
                    # cancelled one); catching it here saves building an exception group.
                    # An enclosing scope's cancellation is level-triggered: it comes back at
                    # the checkpoint on the aborted path below.  A Cancelled nobody's scope
                    # owns is the body's failure.
                    if not nursery.cancel_scope.cancel_called:
                        raise stray_or_raise(exc) from exc
        except BaseException as exc:
            failure = exc
        finally:
            # Only now: work the body started may outlive it inside the nursery, and must
            # still hear the signal until the nursery is done.
            fused._listeners.pop(key, None)
            run.settled = True
            if link is not None:
                link.detach()
            run.dispatch_signal = wrapper_signal
        contexts = run.body_contexts
        if failure is not None:
            failures, others = _split_failure(failure)
            if others:
                # Not ours to turn into a result: ambient cancellation, KeyboardInterrupt...
                # The per-call nursery is ours: callers get a lone exception unwrapped, and
                # ambient cancellation as a bare trio.Cancelled (several Cancelled are
                # interchangeable: the cancelled scope catches any of them).
                if not failures and (
                    len(others) == 1 or all(isinstance(o, trio.Cancelled) for o in others)
                ):
                    raise others[0] from None
                raise failure
            return replace_result(
                failures_result(failures, TOOL_FAILED), additional_contexts=contexts
            )
        # The scope is cancelled only by the fused signal, so this also covers a body that
        # was interrupted by it (and one that returned after it fired).
        if fused.cancelled:
            await trio.lowlevel.checkpoint_if_cancelled()
            return aborted(body_invoked=True, additional_contexts=contexts)
        try:
            result = _body_result(value)
        except Exception as exc:
            result = exception_result(exc, TOOL_FAILED)
        if contexts:
            result = replace_result(result, additional_contexts=contexts)
        return result

    async def _post_execute(self, run: _Run, result: ToolResult) -> ToolResult:
        """The post-execute chain: ``Accept`` amends the result, ``Block`` replaces it."""
        hooks: tuple[PostExecuteHook, ...] = run.stages.post
        try:
            decision: object = await _post_chain(hooks, run.execution(), result)
            if not isinstance(decision, (Accept, Block)):  # a tuple: cheaper than a union
                raise TypeError(
                    f"post-execute chain returned {safe_repr(decision)}; "
                    "expected Accept() or Block()"
                )
        except Exception as exc:
            raise _FinalResult(exception_result(exc, POST_EXECUTE_FAILED)) from None
        except trio.Cancelled as exc:
            stray = stray_or_raise(exc)
            raise _FinalResult(exception_result(stray, POST_EXECUTE_FAILED)) from None
        halt = result.halt if result.halt is not None else decision.halt
        if isinstance(decision, Block):
            feedback = decision.feedback
            if isinstance(feedback, str):
                content: tuple[ContentBlock, ...] = (TextBlock(feedback),)
                message = feedback
            else:
                content = feedback
                message = "\n".join(b.text for b in feedback if isinstance(b, TextBlock))
            return make_result(
                content,
                is_error=True,
                error=ErrorInfo(
                    "ToolBlockedError",
                    BLOCKED,
                    message or "tool result blocked by post-execute policy",
                ),
                additional_contexts=decision.additional_contexts,
                halt=halt,
            )
        if decision.content is None and not decision.additional_contexts and halt is result.halt:
            return result
        return replace_result(
            result,
            content=result.content if decision.content is None else decision.content,
            additional_contexts=result.additional_contexts + decision.additional_contexts,
            halt=halt,
        )

    @staticmethod
    async def _cancellation_overrides(run: _Run, result: ToolResult) -> ToolResult:
        """Cancellation replaces only a non-error result, keeping its contexts and halt.

        Ambient cancellation too: a success returned from under a cancelled enclosing scope
        (a wrapper or hook swallowed that scope's ``trio.Cancelled``) re-raises
        ``trio.Cancelled`` here, so ``execute`` publishes ``ABORTED*`` and propagates it.
        """
        if result.is_error:
            return result
        await trio.lowlevel.checkpoint_if_cancelled()
        if not run.caller_signal.cancelled:
            return result
        return aborted(
            body_invoked=run.body_invoked,
            additional_contexts=result.additional_contexts,
            halt=result.halt,
        )

    @staticmethod
    def _finish(run: _Run, result: ToolResult, finalize: FinalizeContent | None) -> ToolResult:
        """Snapshot the candidate losslessly, apply halt and conclusion, finalize content."""
        halt = run.halt if run.halt is not None else result.halt
        concludes = (run.concludes or result.concludes_turn) and not result.is_error
        meta = result.meta
        try:
            meta = freeze(meta)
        except NotJSONError as exc:
            result = replace_result(
                _not_json_result("result", exc), additional_contexts=result.additional_contexts
            )
            meta, concludes = None, False
        if (
            halt is not result.halt
            or concludes is not result.concludes_turn
            or meta is not result.meta
        ):
            result = replace_result(result, halt=halt, concludes_turn=concludes, meta=meta)
        if finalize is None:
            return result
        try:
            content = finalize(run.execution(), result)
            if content is None:
                return result
            return replace_result(result, content=_content(content))
        except (Exception, trio.Cancelled) as exc:
            # A synchronous callback reaches no checkpoint: a Cancelled from it is stray.
            failure = StrayCancelled() if isinstance(exc, trio.Cancelled) else exc
            return replace_result(
                exception_result(failure, FINALIZE_FAILED),
                additional_contexts=result.additional_contexts,
                halt=halt,
            )

    @staticmethod
    async def _publish(run: _Run, result: ToolResult) -> None:
        """Give the one final result to every observer.

        An observer's ``Exception`` (or stray ``trio.Cancelled``: observers run shielded or
        synchronously, so none is ever legitimate) is logged.  A ``KeyboardInterrupt`` or
        other ``BaseException`` does not stop the later observers from seeing the result:
        the first one is re-raised once every observer ran.
        """
        observers: tuple[ResultObserver, ...] = run.stages.observers
        execution = run.execution()
        fatal: BaseException | None = None
        for observer in observers:
            try:
                outcome = observer(execution, result)
                if outcome is not None and inspect.isawaitable(outcome):
                    # Observers are bookkeeping, not work: a cancelled caller must still
                    # record the one authoritative result.  (A synchronous observer cannot
                    # be interrupted, so only an awaitable needs the shield.)
                    with trio.CancelScope(shield=True):
                        await outcome
            except (Exception, trio.Cancelled):
                logger.exception("result observer %s raised", safe_repr(observer))
            except BaseException as exc:
                if fatal is None:
                    fatal = exc
        if fatal is not None:
            raise fatal


def _with_body_contexts(run: _Run, result: ToolResult) -> ToolResult:
    """Contexts deferred by the body always survive and come first, each once.

    A wrapper may pass them on in any position (``(mine, *r.additional_contexts)``): the
    body's own objects (by identity) are moved to the front, not repeated.
    """
    body = run.body_contexts
    if not body:
        return result
    have = result.additional_contexts
    if len(have) >= len(body) and all(a is b for a, b in zip(body, have, strict=False)):
        return result
    ids = {id(ctx) for ctx in body}
    rest = tuple(ctx for ctx in have if id(ctx) not in ids)
    return replace_result(result, additional_contexts=(*body, *rest))


class _Next:
    """``call_next`` of the pre- or post-execute chain: the next hook's coroutine, once.

    ``args`` are what every hook of the chain receives before ``call_next``; past the last
    hook, ``end()`` gives the chain's default decision.
    """

    __slots__ = ("_args", "_chain", "_end", "_hooks", "_index")

    def __init__(
        self,
        hooks: Sequence[Callable[..., Awaitable[Any]]],
        args: tuple[object, ...],
        end: Callable[[], Awaitable[Any]],
        chain: _Chain,
        index: int,
    ) -> None:
        self._hooks = hooks
        self._args = args
        self._end = end
        self._chain = chain
        self._index = index

    def __call__(self) -> Awaitable[Any]:
        self._chain.check()
        index, self._index = self._index, -1
        if index < 0:
            raise RuntimeError("call_next() may be called only once")
        hooks = self._hooks
        if index == len(hooks):
            return self._end()
        following = _Next(hooks, self._args, self._end, self._chain, index + 1)
        return hooks[index](*self._args, following)


async def _allowed() -> PreDecision:
    return _ALLOW


class _ApprovalEnd:
    """The end of the pre-execute chain of a tool with ``requires_approval``: ``Ask()`` when
    it holds for the parsed arguments (a raising or non-bool callable counts as holding)."""

    __slots__ = ("_run",)

    def __init__(self, run: _Run) -> None:
        self._run = run

    async def __call__(self) -> PreDecision:
        run = self._run
        definition = run.definition
        assert definition is not None
        flag = definition.requires_approval
        if flag is True or flag is False:
            return _ASK if flag else _ALLOW
        try:
            holds = flag(run.parsed)
        except Exception:
            logger.exception(
                "requires_approval of tool %r raised; asking for approval", definition.name
            )
            return _ASK
        return _ALLOW if holds is False else _ASK


def _run_sync_body(definition: ToolDefinition[Any], args: Any, ctx: ToolRunContext) -> object:
    """A sync body, in its worker thread."""
    value = definition._call(args, ctx)
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()  # a coroutine nobody will await: no "never awaited" warning
        raise TypeError(
            f"tool {definition.name!r} is a plain function that returned an awaitable "
            f"({type(value).__name__}); define it with `async def` to run it in Trio"
        )
    return value


async def _accepted() -> PostDecision:
    return _ACCEPT


async def _run_chain(
    hooks: Sequence[Callable[..., Awaitable[Any]]],
    args: tuple[object, ...],
    end: Callable[[], Awaitable[Any]],
) -> object:
    chain = _Chain()
    try:
        return await _Next(hooks, args, end, chain, 0)()
    finally:
        chain.open = False


async def _pre_chain(
    hooks: Sequence[PreExecuteHook],
    execution: ToolExecution,
    end: Callable[[], Awaitable[PreDecision]],
) -> object:
    return await _run_chain(hooks, (execution,), end)


async def _post_chain(
    hooks: Sequence[PostExecuteHook], execution: ToolExecution, result: ToolResult
) -> object:
    return await _run_chain(hooks, (execution, result), _accepted)


async def _around_chain(
    wrappers: Sequence[AroundWrapper],
    view: ToolDispatchExecution,
    run: _Run,
    dispatch: Callable[[_Run, Any], Awaitable[ToolResult]],
    args: Any,
) -> ToolResult:
    async def step(index: int) -> ToolResult:
        # What the calling wrapper set for the span of its call_next(): restored when that
        # call_next() returns, so each wrapper sees its own signal again.
        signal = run.dispatch_signal
        try:
            if index == len(wrappers):
                return await dispatch(run, args)
            result = await wrappers[index](view, _Once(step, chain, index + 1))
            if not isinstance(result, ToolResult):
                raise TypeError(
                    f"around-execute wrapper returned {safe_repr(result)}, not a ToolResult"
                )
            return result
        finally:
            run.dispatch_signal = signal

    chain = _Chain()
    try:
        return await step(0)
    finally:
        chain.open = False
