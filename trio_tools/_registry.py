"""The tool registry: its tools and the stages registered around them.

Registration only: :class:`ToolRegistry` keeps the tools and one list per stage, and after
every change a fresh snapshot of the stages (``_stages.py``).  What a call goes through is
the pipeline (``_pipeline.py``): :meth:`ToolRegistry.execute` runs it.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, final, overload

import trio

from ._execution import FinalizeContent, Timeout, ToolBody, ToolDefinition, ToolSchema
from ._input import ToolExecutionInput
from ._instrument import Instrument, Instruments, check_instrument
from ._json import NotJSONError
from ._outcomes import materialise
from ._pipeline import report_synthetic, run_call
from ._results import ToolResult
from ._stages import (
    Approver,
    AroundWrapper,
    CallHooks,
    CallInput,
    Guard,
    PostExecuteHook,
    PreExecuteHook,
    Registration,
    ResultObserver,
    Stage,
    Stages,
)
from ._timeout import TimeoutPolicy, is_timeout_policy
from ._tool import JSONFirstBody, RawBody, _ToolDecorator, define_tool
from ._util import logger

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

# The timeout policy a registry that enforces timeouts applies innermost.
_ENFORCED_TIMEOUTS = TimeoutPolicy()


def as_method(entry: Callable[..., Any], method: Callable[..., Any]) -> Callable[..., Any]:
    """``entry``'s code under ``method``'s name, documentation and signature: the method is
    the function itself, with no coroutine layer of its own, and shows only its public
    parameters (``help()``, ``inspect.signature``)."""
    function = types.FunctionType(
        entry.__code__, entry.__globals__, method.__name__, entry.__defaults__, entry.__closure__
    )
    function.__qualname__ = method.__qualname__
    function.__module__ = method.__module__
    function.__doc__ = method.__doc__
    function.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    return function


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
        self._pre = Stage("a pre-execute hook", self._snapshot)
        self._around = Stage("an around-execute wrapper", self._snapshot)
        self._post = Stage("a post-execute hook", self._snapshot)
        self._observers = Stage("a result observer", self._snapshot)
        self._guards = Stage("a guard", self._snapshot)
        self._instruments = Stage("an instrument", self._snapshot)
        self._approver: Approver | None = None
        self._snapshot()

    def _snapshot(self) -> None:
        around: tuple[AroundWrapper, ...] = self._around.fns
        timed = around
        if self._enforce_timeouts and not any(is_timeout_policy(fn) for fn in around):
            timed = (*around, _ENFORCED_TIMEOUTS)
        # The timeout policy alone (``around`` itself when it was added explicitly): the
        # pipeline runs no chain for it.
        alone = timed if len(timed) == 1 and is_timeout_policy(timed[0]) else None
        self._stages = Stages(
            self._pre.fns,
            self._guards.fns,
            self._approver,
            around,
            self._post.fns,
            self._observers.fns,
            timed,
            Instruments(self._instruments.fns) if self._instruments.fns else None,
            self._thread_limiter,
            alone,
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
        return self._execution_mode(input)

    def _execution_mode(self, input: CallInput) -> Literal["parallel", "exclusive"]:
        """:meth:`execution_mode` of any call input, the batch scheduler's own included."""
        definition = self._tools.get(input.name)
        if definition is None:
            return "exclusive"
        flag = definition.concurrency_safe
        if flag is True or flag is False:
            return "parallel" if flag else "exclusive"
        try:
            arguments, text_error = materialise(input.arguments)
            if text_error is not None:
                return "exclusive"
            value, violations = definition._parse(arguments)
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

        The same result object is published to every result observer first.
        Cancellation of ``input.signal`` never raises: it becomes ``ABORTED`` (the body
        was invoked) or ``ABORTED_BEFORE_DISPATCH``.  Started work is always awaited: a
        body that ignores its signal keeps this call pending.

        Raises:
            trio.Cancelled: an enclosing Trio scope (not the signal) was cancelled; the
                result was published before re-raising.
            BaseException: ``KeyboardInterrupt`` and similar propagate likewise, after
                publication.
        """
        raise NotImplementedError  # pragma: no cover - replaced just below

    # ``execute`` runs the pipeline's entry itself, not a method that awaits it: one
    # coroutine layer fewer on every call.  ``_execute`` is the same function, called by the
    # batch scheduler with its private per-call hooks.
    if TYPE_CHECKING:

        async def _execute(self, input: CallInput, hooks: CallHooks | None) -> ToolResult:
            """:meth:`execute`, plus the batch scheduler's private hooks."""
            ...

    else:
        execute = as_method(run_call, execute)
        _execute = run_call

    def _report_synthetic(self, input: CallInput, result: ToolResult) -> None:
        """Give the instruments a result the batch scheduler made for a call it never
        started, with the view the call would have had."""
        report_synthetic(self._tools, self._stages, input, result)
