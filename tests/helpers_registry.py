"""Shared helpers for the registry pipeline tests (DESIGN.md §2-§6).

Expected results are spelled out here from the §5 table, independently of the package's
own constructors, so the tests compare whole frozen values against the contract.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from trio_tools import (
    Accept,
    AdditionalContext,
    Allow,
    CancelSignal,
    CancelSource,
    ContentBlock,
    ErrorInfo,
    Halt,
    PostDecision,
    PreDecision,
    TextBlock,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
)

# The call_next of each middleware stage, for annotating test hooks.
PreNext = Callable[[], Awaitable[PreDecision]]
AroundNext = Callable[[], Awaitable[ToolResult]]
PostNext = Callable[[], Awaitable[PostDecision]]


async def pass_pre(exec: ToolExecution, call_next: PreNext) -> PreDecision:
    """A pre-execute hook that only calls on."""
    return await call_next()


async def pass_around(exec: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
    """An around-execute wrapper that only calls on."""
    return await call_next()


async def pass_post(exec: ToolExecution, result: ToolResult, call_next: PostNext) -> PostDecision:
    """A post-execute hook that only calls on."""
    return await call_next()


def add_passthrough_stages(registry: ToolRegistry) -> None:
    """One pre-execute hook, around-execute wrapper and post-execute hook, each only
    calling on: every chain runs, nothing changes the call."""
    registry.add_pre_execute(pass_pre)
    registry.add_around_execute(pass_around)
    registry.add_post_execute(pass_post)


TOOL = "tool"
"""The name every single-tool test registers its tool under."""


class Fatal(BaseException):
    """A non-``Exception`` error, standing in for ``SystemExit``-like interruptions."""


class CodedError(Exception):
    """An exception carrying its own ``code``: a ``str`` code wins over the stage default."""

    def __init__(self, message: str, code: object) -> None:
        super().__init__(message)
        self.code = code


def ok(text: str, *, contexts: Sequence[AdditionalContext] = (), **fields: Any) -> ToolResult:
    """A successful result holding one text block."""
    return ToolResult(content=(TextBlock(text),), additional_contexts=contexts, **fields)


def error(
    name: str,
    code: str,
    message: str,
    *,
    content: Sequence[ContentBlock] | None = None,
    contexts: Sequence[AdditionalContext] = (),
    halt: Halt | None = None,
) -> ToolResult:
    """A registry-made error: the model text is ``Error: {message}`` unless ``content``."""
    return ToolResult(
        content=(TextBlock(f"Error: {message}"),) if content is None else content,
        is_error=True,
        error=ErrorInfo(name, code, message),
        additional_contexts=contexts,
        halt=halt,
    )


def aborted(*, contexts: Sequence[AdditionalContext] = (), halt: Halt | None = None) -> ToolResult:
    """``ABORTED``: cancelled after the body was invoked."""
    return error("AbortError", "ABORTED", "tool call aborted", contexts=contexts, halt=halt)


def aborted_before_dispatch(
    *, contexts: Sequence[AdditionalContext] = (), halt: Halt | None = None
) -> ToolResult:
    """``ABORTED_BEFORE_DISPATCH``: cancelled, the body never invoked."""
    return error(
        "AbortError",
        "ABORTED_BEFORE_DISPATCH",
        "tool call aborted before dispatch",
        contexts=contexts,
        halt=halt,
    )


def denied(reason: str, *, halt: Halt | None = None) -> ToolResult:
    return error("ToolDeniedError", "DENIED", reason, halt=halt)


def not_json_arguments() -> ToolResult:
    return error(
        "TypeError", "NOT_JSON", "tool execution arguments must be losslessly JSON-serializable"
    )


def too_deep(what: str) -> ToolResult:
    """``NOT_JSON`` for ``what`` (``"execution arguments"`` or ``"result"``) nested deeper
    than the 512-level limit."""
    return error(
        "TypeError",
        "NOT_JSON",
        f"tool {what} must be losslessly JSON-serializable: nesting deeper than 512",
    )


def not_json_result(*, contexts: Sequence[AdditionalContext] = ()) -> ToolResult:
    return error(
        "TypeError",
        "NOT_JSON",
        "tool result must be losslessly JSON-serializable",
        contexts=contexts,
    )


def unknown_tool(name: str) -> ToolResult:
    return error("ToolNotFoundError", "UNKNOWN_TOOL", f'unknown tool "{name}"')


def note(text: str) -> AdditionalContext:
    """An additional context, named for the stage that made it."""
    return AdditionalContext(text, source="test")


class Harness:
    """A registry, the caller's cancel source and an observer recording every publication."""

    def __init__(self, registry: ToolRegistry | None = None) -> None:
        self.registry = ToolRegistry() if registry is None else registry
        self.source = CancelSource()
        self.published: list[ToolResult] = []
        self.executions: list[ToolExecution] = []
        self.registry.add_observer(self._observe)

    def _observe(self, execution: ToolExecution, result: ToolResult) -> None:
        self.executions.append(execution)
        self.published.append(result)

    @property
    def signal(self) -> CancelSignal:
        return self.source.signal

    def input(
        self,
        name: str = TOOL,
        arguments: object = None,
        *,
        call_id: str = "call-1",
        signal: CancelSignal | None = None,
        **kwargs: Any,
    ) -> ToolExecutionInput:
        return ToolExecutionInput(
            call_id=call_id,
            name=name,
            arguments={} if arguments is None else arguments,
            signal=self.source.signal if signal is None else signal,
            **kwargs,
        )

    async def execute(
        self, name: str = TOOL, arguments: object = None, **kwargs: Any
    ) -> ToolResult:
        """Execute one call; check it published exactly one result, the returned object."""
        before = len(self.published)
        result = await self.registry.execute(self.input(name, arguments, **kwargs))
        assert 1 == len(self.published) - before
        assert self.published[-1] is result
        return result

    def start_execute(
        self, nursery: trio.Nursery, name: str = TOOL, arguments: object = None, **kwargs: Any
    ) -> Pending:
        """Start ``execute`` in ``nursery``; the returned handle holds the result when done."""
        pending = Pending()

        async def run() -> None:
            pending.result = await self.execute(name, arguments, **kwargs)
            pending.done = True

        nursery.start_soon(run)
        return pending


class Pending:
    """A started ``execute``: ``done`` and ``result`` are set when it returns."""

    def __init__(self) -> None:
        self.done = False
        self.result: ToolResult | None = None


class StageLog:
    """Installs recording pre-execute hook, guard, approver, wrapper, post-execute hook and
    tool body on a harness; ``calls`` lists the stages that ran, in order."""

    def __init__(self, harness: Harness, *, decision: Any = None) -> None:
        self.calls: list[str] = []
        self.finalized: list[ToolResult] = []
        registry = harness.registry
        decision = Allow() if decision is None else decision

        async def pre(execution: Any, call_next: Any) -> Any:
            self.calls.append("pre")
            await call_next()
            return decision

        def guard(execution: Any) -> None:
            self.calls.append("guard")

        async def approver(request: Any) -> str:
            self.calls.append("approver")
            return "granted"

        async def wrapper(execution: Any, call_next: Any) -> ToolResult:
            self.calls.append("wrapper")
            return await call_next()

        async def post(execution: Any, result: ToolResult, call_next: Any) -> Any:
            self.calls.append("post")
            await call_next()
            return Accept()

        async def body(args: object, run_ctx: Any) -> str:
            self.calls.append("body")
            return "done"

        def finalize(execution: Any, result: ToolResult) -> None:
            self.finalized.append(result)

        registry.add_pre_execute(pre)
        registry.add_guard(guard)
        registry.set_approver(approver)
        registry.add_around_execute(wrapper)
        registry.add_post_execute(post)
        registry.tool(body, name=TOOL, finalize_content=finalize)


async def a_stray_cancelled() -> trio.Cancelled:
    """A real ``trio.Cancelled``, caught from a scope that is gone: raising it again later
    belongs to no scope."""
    caught: list[trio.Cancelled] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as exc:
            caught.append(exc)
            raise
    return caught[0]
