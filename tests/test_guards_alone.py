"""A call whose gate is only guards: no pre-execute hook, a tool that never requires approval.

Guards are synchronous, so such a gate runs them without the cancel scope that lets the
caller's signal interrupt a waiting pre-execute hook or approver.  Every test here runs
the same guards twice: alone, and behind a pre-execute hook that only calls on (which
takes the gate's scoped path), and the two calls must end the same way, whatever the
guards do: allow, deny, raise, fire the caller's signal, raise ``trio.Cancelled`` by hand,
cancel an enclosing scope or interrupt.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import trio
from helpers_registry import TOOL, AroundNext, Fatal, PostNext, pass_pre

from trio_tools import (
    DENIED,
    PRE_EXECUTE_FAILED,
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    CancelSource,
    Guard,
    PostDecision,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
)

# What each scenario's guards do, given the caller's source and an enclosing scope.
Scenario = Callable[[CancelSource, trio.CancelScope], list[Guard]]


def allows(source: CancelSource, scope: trio.CancelScope) -> list[Guard]:
    return [lambda exec: None, lambda exec: None]


def the_second_denies(source: CancelSource, scope: trio.CancelScope) -> list[Guard]:
    return [lambda exec: None, lambda exec: "no", lambda exec: "never reached"]


def raises(source: CancelSource, scope: trio.CancelScope) -> list[Guard]:
    def guard(exec: ToolExecution) -> str | None:
        raise ValueError("guard broke")

    return [guard]


def returns_a_non_str(source: CancelSource, scope: trio.CancelScope) -> list[Guard]:
    return [lambda exec: 42]  # type: ignore[list-item, return-value]


def fires_the_signal(source: CancelSource, scope: trio.CancelScope) -> list[Guard]:
    return [lambda exec: source.cancel("stop")]


def fires_the_signal_and_denies(source: CancelSource, scope: trio.CancelScope) -> list[Guard]:
    def guard(exec: ToolExecution) -> str:
        source.cancel("stop")
        return "no"

    return [guard]


def raises_cancelled(source: CancelSource, scope: trio.CancelScope) -> list[Guard]:
    def guard(exec: ToolExecution) -> str | None:
        raise trio.Cancelled._create()  # pyright: ignore[reportPrivateUsage]

    return [guard]


def fires_the_signal_and_raises_cancelled(
    source: CancelSource, scope: trio.CancelScope
) -> list[Guard]:
    def guard(exec: ToolExecution) -> str | None:
        source.cancel("stop")
        raise trio.Cancelled._create()  # pyright: ignore[reportPrivateUsage]

    return [guard]


def cancels_the_enclosing_scope(source: CancelSource, scope: trio.CancelScope) -> list[Guard]:
    def guard(exec: ToolExecution) -> None:
        scope.cancel()

    return [guard]


def cancels_the_enclosing_scope_and_raises_cancelled(
    source: CancelSource, scope: trio.CancelScope
) -> list[Guard]:
    def guard(exec: ToolExecution) -> str | None:
        scope.cancel()
        raise trio.Cancelled._create()  # pyright: ignore[reportPrivateUsage]

    return [guard]


def interrupts(source: CancelSource, scope: trio.CancelScope) -> list[Guard]:
    def guard(exec: ToolExecution) -> str | None:
        raise Fatal

    return [guard]


# The code each scenario ends with (None: the body ran and succeeded), and what escapes.
SCENARIOS: list[tuple[Scenario, str | None, type[BaseException] | None]] = [
    (allows, None, None),
    (the_second_denies, DENIED, None),
    (raises, PRE_EXECUTE_FAILED, None),
    (returns_a_non_str, PRE_EXECUTE_FAILED, None),
    (fires_the_signal, TOOL_ABORTED_BEFORE_DISPATCH, None),
    (fires_the_signal_and_denies, DENIED, None),
    (raises_cancelled, PRE_EXECUTE_FAILED, None),
    (fires_the_signal_and_raises_cancelled, TOOL_ABORTED_BEFORE_DISPATCH, None),
    (cancels_the_enclosing_scope, TOOL_ABORTED, trio.Cancelled),
    (
        cancels_the_enclosing_scope_and_raises_cancelled,
        TOOL_ABORTED_BEFORE_DISPATCH,
        trio.Cancelled,
    ),
    (interrupts, TOOL_ABORTED_BEFORE_DISPATCH, Fatal),
]


async def run_scenario(
    scenario: Scenario, *, scoped: bool
) -> tuple[list[ToolResult], list[str], type[BaseException] | None, list[ToolExecution]]:
    """One call through guards from ``scenario``: alone, or (``scoped``) behind a
    pass-through pre-execute hook, with an around-execute wrapper and a post-execute hook
    either way.  Returns what the observer saw, the runs of the wrapper, the body and the
    post-execute hook, the exception that escaped, and the views the stages saw."""
    registry = ToolRegistry()
    source = CancelSource()
    published: list[ToolResult] = []
    ran: list[str] = []
    views: list[ToolExecution] = []

    @registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        ran.append("body")
        await trio.lowlevel.checkpoint()
        return "done"

    async def around(exec: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        ran.append("around")
        return await call_next()

    async def post(exec: ToolExecution, result: ToolResult, call_next: PostNext) -> PostDecision:
        ran.append("post")
        views.append(exec)
        return await call_next()

    def seeing(guard: Guard) -> Guard:
        def seen(exec: ToolExecution) -> str | None:
            views.append(exec)
            return guard(exec)

        return seen

    escaped: type[BaseException] | None = None
    with trio.CancelScope() as scope:
        for guard in scenario(source, scope):
            registry.add_guard(seeing(guard))
        if scoped:
            registry.add_pre_execute(pass_pre)
        registry.add_around_execute(around)
        registry.add_post_execute(post)
        registry.add_observer(lambda exec, result: published.append(result))
        try:
            await registry.execute(
                ToolExecutionInput(call_id="call", name=TOOL, arguments={}, signal=source.signal)
            )
        except (trio.Cancelled, Fatal) as exc:
            escaped = type(exc)
    return published, ran, escaped, views


@pytest.mark.parametrize(
    ("scenario", "code", "escapes"), SCENARIOS, ids=[s.__name__ for s, _, _ in SCENARIOS]
)
async def test_guards_alone_end_as_the_scoped_gate_does(
    scenario: Scenario, code: str | None, escapes: type[BaseException] | None
) -> None:
    outcomes = []
    for scoped in (False, True):
        published, ran, escaped, views = await run_scenario(scenario, scoped=scoped)
        assert [code] == [result.code for result in published]
        assert escapes is escaped
        assert len({id(view) for view in views}) == 1  # one view for every stage
        # Whole results, but a message naming a guard names a different function each run.
        results = [re.sub(r" at 0x[0-9a-f]+", "", repr(result)) for result in published]
        outcomes.append((results, ran, escaped))
    assert outcomes[0] == outcomes[1]


async def test_guards_alone_leave_no_listener_on_the_callers_signal() -> None:
    """No scope was bound to the caller's signal: nothing is left to detach."""
    registry = ToolRegistry()
    source = CancelSource()

    @registry.tool(name=TOOL)
    async def body(args: object, ctx: ToolRunContext) -> str:
        return "done"

    registry.add_guard(lambda exec: None)
    result = await registry.execute(
        ToolExecutionInput(call_id="call", name=TOOL, arguments={}, signal=source.signal)
    )
    assert result.code is None
    assert {} == source.signal._listeners  # pyright: ignore[reportPrivateUsage]
