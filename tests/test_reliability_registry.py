"""Hostile stages and stray cancellation: each call still gets exactly one result.

Samples of every class of misbehaviour a tool author or a broken integration can produce:
exceptions that cannot be formatted, a ``trio.Cancelled`` that belongs to no scope, raising
observers, a ``call_next`` used after its call settled, a wrapper that swallows someone
else's cancellation, and wrappers that reorder the body's contexts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing
from helpers_registry import (
    TOOL,
    AroundNext,
    Fatal,
    Harness,
    PostNext,
    PreNext,
    a_stray_cancelled,
    aborted,
    aborted_before_dispatch,
    error,
    note,
    ok,
    pass_around,
    pass_post,
    pass_pre,
)

from trio_tools import (
    Accept,
    AdditionalContext,
    Allow,
    Ask,
    Halt,
    ToolCall,
    ToolDispatchExecution,
    ToolExecution,
    ToolResult,
    ToolRunContext,
    define_tool,
    run_tool_calls,
)

# -- hostile exceptions ----------------------------------------------------------------


class StrRaises(Exception):
    def __str__(self) -> str:
        raise ValueError("str() of this exception fails")


class StrNotText(Exception):
    def __str__(self) -> Any:
        return 42


class StrEmptySubclass(Exception):
    def __str__(self) -> str:
        class Sneaky(str):
            def __bool__(self) -> bool:
                raise ValueError("truth of the message fails")

        return Sneaky("")


class CodeRaises(Exception):
    @property
    def code(self) -> str:
        raise RuntimeError("reading code fails")


class CodeIsADict(Exception):
    def __init__(self) -> None:
        super().__init__("coded with a dict")
        self.code: Any = {"not": "hashable"}


HOSTILE = [StrRaises, StrNotText, StrEmptySubclass, CodeRaises, CodeIsADict]


def hostile_error(kind: type[Exception], code: str) -> ToolResult:
    """What the registry reports for ``kind()``: the stage's code, the type's name, and a
    message falling back to the type's name."""
    message = "coded with a dict" if kind is CodeIsADict else kind.__name__
    return error(kind.__name__, code, message)


def install_raiser(h: Harness, stage: str, exc: BaseException) -> None:
    """Register a tool on ``h`` and make ``stage`` raise ``exc``."""
    registry = h.registry

    async def body(args: object, ctx: ToolRunContext) -> str:
        if stage == "body":
            raise exc
        return "done"

    def finalize(execution: ToolExecution, result: ToolResult) -> None:
        raise exc

    registry.register(
        define_tool(body, name=TOOL, finalize_content=finalize if stage == "finalize" else None)
    )
    if stage == "pre":

        async def pre(execution: ToolExecution, call_next: PreNext) -> Any:
            raise exc

        registry.add_pre_execute(pre)
    elif stage == "guard":

        def guard(execution: ToolExecution) -> str | None:
            raise exc

        registry.add_guard(guard)
    elif stage == "approver":

        async def ask(execution: ToolExecution, call_next: PreNext) -> Any:
            return Ask("please")

        async def approver(request: object) -> Any:
            raise exc

        registry.add_pre_execute(ask)
        registry.set_approver(approver)
    elif stage == "wrapper":

        async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
            raise exc

        registry.add_around_execute(wrapper)
    elif stage == "post":

        async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
            raise exc

        registry.add_post_execute(post)


STAGE_CODES = {
    "body": "TOOL_FAILED",
    "pre": "PRE_EXECUTE_FAILED",
    "guard": "PRE_EXECUTE_FAILED",
    "approver": "PRE_EXECUTE_FAILED",
    "wrapper": "WRAPPER_FAILED",
    "post": "POST_EXECUTE_FAILED",
    "finalize": "FINALIZE_FAILED",
}


@pytest.mark.parametrize("stage", list(STAGE_CODES))
@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
async def test_a_hostile_exception_is_the_stages_error(stage: str, kind: type[Exception]) -> None:
    """``str(exc)`` raising or not a ``str``, a raising or non-``str`` ``code``: the
    stage's own code, ``error.name`` the type's name, the message falls back to it."""
    h = Harness()
    install_raiser(h, stage, kind())
    assert hostile_error(kind, STAGE_CODES[stage]) == await h.execute()


@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
async def test_a_hostile_body_error_behind_a_wrapper_stays_a_tool_failure(
    kind: type[Exception],
) -> None:
    h = Harness()
    install_raiser(h, "body", kind())

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        return await call_next()

    h.registry.add_around_execute(wrapper)
    assert hostile_error(kind, "TOOL_FAILED") == await h.execute()


def two_failures(first: type[Exception], second: type[Exception]) -> ToolResult:
    def part(kind: type[Exception]) -> str:
        text = "coded with a dict" if kind is CodeIsADict else kind.__name__
        return f"{kind.__name__}: {text}"

    return error("ExceptionGroup", "TOOL_FAILED", f"2 failures: {part(first)}; {part(second)}")


@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
async def test_a_group_of_hostile_exceptions_is_one_tool_failure(kind: type[Exception]) -> None:
    """Two failures of one call with unhashable codes (an ``ExceptionGroup``)."""
    h = Harness()
    install_raiser(h, "body", ExceptionGroup("two", [kind(), CodeIsADict()]))
    assert two_failures(kind, CodeIsADict) == await h.execute()


@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
async def test_two_hostile_start_soon_failures_are_one_tool_failure(
    kind: type[Exception],
) -> None:
    h = Harness()

    async def fail(exc: Exception, started: trio.Event) -> None:
        started.set()
        raise exc

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        first, second = trio.Event(), trio.Event()
        ctx.start_soon(fail, kind(), first)
        ctx.start_soon(fail, CodeIsADict(), second)
        await trio.sleep_forever()

    result = await h.execute()
    assert ("ExceptionGroup", "TOOL_FAILED") == (result.error and result.error.name, result.code)
    assert result.error is not None
    assert result.error.message.startswith("2 failures: ")


@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
async def test_a_hostile_body_error_in_a_batch_is_its_result(kind: type[Exception]) -> None:
    h = Harness()
    install_raiser(h, "body", kind())
    outcome = await run_tool_calls(h.registry, [ToolCall("c1", TOOL, {})], signal=h.signal)
    assert (hostile_error(kind, "TOOL_FAILED"),) == outcome.results


async def test_a_hostile_repr_in_a_wrong_return_value_is_the_stages_error() -> None:
    class BadRepr:
        def __repr__(self) -> str:
            raise ValueError("repr fails")

    h = Harness()

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        return "done"

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> Any:
        return BadRepr()

    h.registry.add_around_execute(wrapper)
    result = await h.execute()
    assert ("TypeError", "WRAPPER_FAILED") == (result.error and result.error.name, result.code)
    assert result.error is not None
    assert "(repr failed)" in result.error.message


# -- stray trio.Cancelled -----------------------------------------------------------------

STRAY = "trio.Cancelled raised outside any cancelled scope"


async def returned(call: Awaitable[ToolResult]) -> ToolResult:
    """``await call``, which must return: a stray ``Cancelled`` escaping it would otherwise
    be absorbed by the test's own nursery, and the test would pass without its asserts."""
    try:
        return await call
    except trio.Cancelled as exc:
        raise AssertionError("execute raised trio.Cancelled; nobody cancelled it") from exc


@pytest.mark.parametrize("source", ["body", "start_soon", "receiver", "receiver_in_task"])
async def test_a_stray_cancelled_from_the_body_side_is_a_tool_failure(source: str) -> None:
    """Never a success: the per-call nursery must not absorb a Cancelled nobody owns."""
    h = Harness()
    stray = await a_stray_cancelled()

    async def task() -> None:
        await trio.lowlevel.checkpoint()
        raise stray

    def receiver(progress: object) -> None:
        raise stray

    async def report(ctx: ToolRunContext) -> None:
        await trio.lowlevel.checkpoint()
        ctx.report_progress("half way")

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        if source == "body":
            raise stray
        if source == "start_soon":
            ctx.start_soon(task)
        elif source == "receiver":
            ctx.report_progress("half way")
        else:
            ctx.start_soon(report, ctx)
        await trio.sleep(1)
        return "done"

    result = await returned(h.execute(on_progress=receiver))
    assert error("Cancelled", "TOOL_FAILED", STRAY) == result


@pytest.mark.parametrize("stage", ["pre", "guard", "wrapper", "post", "finalize"])
async def test_a_stray_cancelled_from_a_stage_is_that_stages_failure(stage: str) -> None:
    h = Harness()
    install_raiser(h, stage, await a_stray_cancelled())
    assert error("Cancelled", STAGE_CODES[stage], STRAY) == await returned(h.execute())


async def test_a_stray_cancelled_from_an_observer_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness()
    stray = await a_stray_cancelled()
    seen: list[ToolResult] = []

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        return "done"

    def observer(execution: ToolExecution, result: ToolResult) -> None:
        raise stray

    h.registry.add_observer(observer)
    h.registry.add_observer(lambda execution, result: seen.append(result))
    result = await returned(h.execute())
    assert ok("done") == result
    assert [result] == seen
    assert "result observer" in caplog.text


async def test_real_cancellation_of_the_call_is_still_aborted_not_stray() -> None:
    """The caller's signal cancels a ctx.start_soon task: that Cancelled is owned."""
    h = Harness()

    async def task() -> None:
        await trio.sleep_forever()

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.start_soon(task)
        h.source.cancel()
        await trio.sleep(1)
        return "done"

    assert aborted() == await returned(h.execute())


# -- observers raising BaseException --------------------------------------------------------


@pytest.mark.parametrize("fatal", [KeyboardInterrupt, SystemExit, Fatal])
async def test_every_observer_sees_the_result_before_an_interrupt_propagates(
    fatal: type[BaseException],
) -> None:
    h = Harness()
    later: list[ToolResult] = []

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        return "done"

    def interrupting(execution: ToolExecution, result: ToolResult) -> None:
        raise fatal

    async def async_later(execution: ToolExecution, result: ToolResult) -> None:
        await trio.lowlevel.checkpoint()
        later.append(result)

    h.registry.add_observer(interrupting)
    h.registry.add_observer(interrupting)
    h.registry.add_observer(async_later)
    with pytest.raises(fatal):
        await h.registry.execute(h.input())
    assert [ok("done")] == h.published
    assert [h.published[0]] == later
    assert later[0] is h.published[0]


@pytest.mark.parametrize("ambient", [False, True], ids=["returned", "ambient cancellation"])
async def test_an_async_observers_interrupt_still_reaches_the_sync_and_async_ones_after_it(
    ambient: bool,
) -> None:
    """Synchronous observers are called without a coroutine of the registry's; one that
    returns an awaitable hands the rest of the publication to one: the order, the shield
    and the interrupt raised last hold across the switch."""
    h = Harness()
    seen: list[str] = []

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        if ambient:
            scope.cancel()
            await trio.sleep_forever()
        return "done"

    async def interrupting(execution: ToolExecution, result: ToolResult) -> None:
        await trio.lowlevel.checkpoint()  # shielded: runs even under the cancelled scope
        seen.append("async, interrupting")
        raise Fatal

    async def async_later(execution: ToolExecution, result: ToolResult) -> None:
        await trio.lowlevel.checkpoint()
        seen.append("async, later")

    h.registry.add_observer(lambda execution, result: seen.append("sync, first"))
    h.registry.add_observer(interrupting)
    h.registry.add_observer(lambda execution, result: seen.append("sync, later"))
    h.registry.add_observer(async_later)
    with trio.CancelScope() as scope, pytest.raises(Fatal):
        await h.registry.execute(h.input())
    assert ["sync, first", "async, interrupting", "sync, later", "async, later"] == seen
    assert [aborted() if ambient else ok("done")] == h.published


async def test_an_observer_interrupt_during_ambient_cancellation_still_reaches_the_rest() -> None:
    h = Harness()
    later: list[ToolResult] = []

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        scope.cancel()
        await trio.sleep_forever()

    def interrupting(execution: ToolExecution, result: ToolResult) -> None:
        raise Fatal

    h.registry.add_observer(interrupting)
    h.registry.add_observer(lambda execution, result: later.append(result))
    with trio.CancelScope() as scope, pytest.raises(Fatal):
        await h.registry.execute(h.input())
    assert [aborted()] == h.published == later


# -- a call_next kept past its call ------------------------------------------------------------


async def test_a_late_around_call_next_raises_and_never_runs_the_body() -> None:
    h = Harness()
    kept: list[AroundNext] = []
    bodies: list[str] = []

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        bodies.append("ran")
        return "done"

    async def keeper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        kept.append(call_next)
        return ok("short-circuit")

    h.registry.add_around_execute(keeper)
    assert ok("short-circuit") == await h.execute()
    with pytest.raises(RuntimeError, match="after the tool call's chain had returned"):
        await kept[0]()
    assert [] == bodies
    assert [ok("short-circuit")] == h.published


async def test_a_late_pre_and_post_call_next_raise() -> None:
    h = Harness()
    kept: list[Callable[[], Awaitable[object]]] = []
    approvals: list[object] = []

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        return "done"

    async def pre(execution: ToolExecution, call_next: PreNext) -> Any:
        kept.append(call_next)
        return Allow()

    async def asking(execution: ToolExecution, call_next: PreNext) -> Any:
        return Ask("again?")

    async def approver(request: object) -> Any:
        approvals.append(request)
        return "granted"

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        kept.append(call_next)
        return Accept()

    h.registry.add_pre_execute(pre)
    h.registry.add_pre_execute(asking)
    h.registry.set_approver(approver)
    h.registry.add_post_execute(post)
    assert ok("done") == await h.execute()
    for call_next in kept:
        with pytest.raises(RuntimeError, match="after the tool call's chain had returned"):
            await call_next()
    assert [] == approvals


async def test_a_late_call_next_of_a_later_stage_raises() -> None:
    """Each stage behind the first keeps its ``call_next``: it refuses to run afterwards."""
    h = Harness()
    kept: list[Callable[[], Awaitable[object]]] = []
    bodies: list[str] = []

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        bodies.append("ran")
        return "done"

    async def late_pre(execution: ToolExecution, call_next: PreNext) -> Any:
        kept.append(call_next)
        return await call_next()

    async def late_wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        kept.append(call_next)
        return ok("short-circuit")

    async def late_post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        kept.append(call_next)
        return Accept()

    for stage in (pass_pre, late_pre):
        h.registry.add_pre_execute(stage)
    for wrap in (pass_around, late_wrapper):
        h.registry.add_around_execute(wrap)
    for hook in (pass_post, late_post):
        h.registry.add_post_execute(hook)
    assert ok("short-circuit") == await h.execute()
    assert 3 == len(kept)
    for call_next in kept:
        with pytest.raises(RuntimeError, match="after the tool call's chain had returned"):
            await call_next()
    assert [] == bodies


# -- a wrapper swallowing ambient cancellation ---------------------------------------------


@pytest.mark.parametrize("where", ["wrapper", "post", "body"])
async def test_a_success_under_ambient_cancellation_is_aborted_and_reraised(where: str) -> None:
    """A stage swallows an enclosing scope's ``Cancelled`` and returns a success.  Like a
    success after the caller's signal fired: ``ABORTED`` is published, and
    ``trio.Cancelled`` propagates to the scope that owns it."""
    h = Harness()
    raised: list[str] = []

    async def swallow_a_cancellation() -> None:
        scope.cancel()
        with contextlib.suppress(trio.Cancelled):
            await trio.sleep(1)

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        if where == "body":
            await swallow_a_cancellation()
        elif where == "wrapper":
            scope.cancel()
            await trio.sleep(1)
        return "done"

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        try:
            return await call_next()
        except trio.Cancelled:
            return ok("swallowed by the wrapper")

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        await swallow_a_cancellation()
        return Accept()

    if where == "wrapper":
        h.registry.add_around_execute(wrapper)
    if where == "post":
        h.registry.add_post_execute(post)
    with trio.CancelScope() as scope:
        try:
            await h.registry.execute(h.input())
        except trio.Cancelled:
            raised.append("Cancelled")
            raise
    assert scope.cancelled_caught
    assert ["Cancelled"] == raised
    assert [aborted()] == h.published


@pytest.mark.parametrize("ambient", [False, True], ids=["signal", "ambient"])
@pytest.mark.parametrize("where", ["wrapper", "post"])
async def test_a_success_replaced_by_ambient_cancellation_keeps_its_contexts_and_halt(
    where: str, ambient: bool
) -> None:
    """The caller's signal's rule: the ``ABORTED*`` that replaces a success keeps the
    contexts and halt that success carried (a wrapper's short-circuit, a post-execute
    hook's ``Accept``), whether the signal fired or an enclosing scope was cancelled."""
    h = Harness()
    mine = (note("body"), note(where))
    halt = Halt(where)

    async def interrupted() -> None:
        """Wait until the caller's signal fires or the enclosing scope is cancelled."""
        (scope if ambient else h.source).cancel()
        with h.signal.open_scope(), contextlib.suppress(trio.Cancelled):
            await trio.sleep_forever()

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(mine[0])
        return "done"

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        await interrupted()
        return ok("short-circuit", contexts=mine[1:], halt=halt)

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        await call_next()
        await interrupted()
        return Accept(additional_contexts=mine[1:], halt=halt)

    if where == "wrapper":
        h.registry.add_around_execute(wrapper)
        expected = aborted_before_dispatch(contexts=mine[1:], halt=halt)
    else:
        h.registry.add_post_execute(post)
        expected = aborted(contexts=mine, halt=halt)
    with trio.CancelScope() as scope:
        call = h.registry.execute(h.input())
        await (call if ambient else returned(call))  # ambient: trio.Cancelled re-raised

    assert [expected] == h.published
    assert ambient == scope.cancelled_caught


async def test_an_error_under_ambient_cancellation_stands() -> None:
    """The same rule as the signal: cancellation replaces only a non-error result."""
    h = Harness()

    with trio.CancelScope() as scope:

        @h.registry.tool(name=TOOL)
        async def body(args: object, ctx: ToolRunContext) -> str:
            scope.cancel()
            raise OSError("disk full")

        result = await returned(h.registry.execute(h.input()))
    assert error("OSError", "TOOL_FAILED", "disk full") == result
    assert [result] == h.published


# -- context order ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arrange",
    [
        lambda mine, have: (mine, *have),
        lambda mine, have: (*have, mine),
        lambda mine, have: (mine,),
        lambda mine, have: (mine, *have, *have),
    ],
    ids=["mine_first", "mine_last", "dropped", "duplicated"],
)
async def test_body_contexts_come_first_once_wherever_a_wrapper_puts_them(
    arrange: Callable[[AdditionalContext, tuple[AdditionalContext, ...]], Any],
) -> None:
    h = Harness()
    body_note, mine = note("from the body"), note("from the wrapper")

    @h.registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(body_note)
        return "done"

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        result = await call_next()
        return ToolResult(
            content=result.content,
            additional_contexts=arrange(mine, result.additional_contexts),
        )

    h.registry.add_around_execute(wrapper)
    assert ok("done", contexts=(body_note, mine)) == await h.execute()
