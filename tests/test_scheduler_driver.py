"""The batch driver's two paths: a journaled batch's driver takes every step; without a
journal, the calls' reports start and commit the calls, and the driver only begins, stops
and ends the batch.  Counted (driver steps, contexts, starts), never timed.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing

from trio_tools import (
    Allow,
    CancelSource,
    MemoryJournal,
    PreDecision,
    ToolCall,
    ToolExecution,
    ToolRegistry,
    ToolRunContext,
    run_tool_calls,
)

_CALLS = 200

where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="unset")


class _TaskSteps(trio.abc.Instrument):
    """Counts the steps (resumptions) of one task."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def _noop(args: object, ctx: ToolRunContext) -> str:
    return "ok"


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.tool(_noop, name="noop", concurrency_safe=True)
    return registry


def _calls(count: int) -> list[ToolCall]:
    return [ToolCall(f"c{i}", "noop", "{}") for i in range(count)]


@pytest.mark.parametrize("journaled", [False, True], ids=["no-journal", "journal"])
async def test_without_a_journal_the_driver_steps_a_few_times_per_batch(journaled: bool) -> None:
    # Before: the driver was woken for every gate passed and every result (about two
    # steps per call), with or without a journal.
    steps = _TaskSteps(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(steps)
    try:
        outcome = await run_tool_calls(
            _registry(),
            _calls(_CALLS),
            signal=CancelSource().signal,
            max_parallel=_CALLS,
            journal=MemoryJournal() if journaled else None,
        )
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert _CALLS == len(outcome.results)
    assert all(r.text == "ok" for r in outcome.results)
    if journaled:
        assert steps.steps > _CALLS  # every journal write is the driver's
    else:
        assert steps.steps <= 5


async def test_calls_started_by_a_report_see_the_callers_context_not_a_siblings() -> None:
    registry = _registry()
    seen: list[tuple[str, str]] = []

    async def pre(
        execution: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        seen.append((execution.call_id, where.get()))
        # Set in this call's task, right before its gate passes (where the next call is
        # spawned): the next call must not inherit it.
        where.set(execution.call_id)
        return await call_next()

    registry.add_pre_execute(pre)
    where.set("caller")
    outcome = await run_tool_calls(registry, _calls(4), signal=CancelSource().signal)
    assert 4 == len(outcome.results)
    assert [(f"c{i}", "caller") for i in range(4)] == seen
    assert "caller" == where.get()


@pytest.mark.parametrize("where_cancelled", ["gate", "body"])
async def test_ambient_cancellation_before_the_next_start_starts_no_further_call(
    where_cancelled: str,
) -> None:
    registry = _registry()
    entered: list[str] = []
    scope = trio.CancelScope()

    async def stopper(args: object, ctx: ToolRunContext) -> str:
        # Before the body's first checkpoint: the next call is already spawned (at this
        # call's gate) but has not decided to start yet.
        scope.cancel()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    registry.tool(stopper, name="stopper", concurrency_safe=True)

    async def pre(
        execution: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        entered.append(execution.call_id)
        if where_cancelled == "gate" and execution.call_id == "c0":
            # No checkpoint follows before the gate passes, where the next call is
            # spawned: with the batch already cancelled.
            scope.cancel()
        return Allow()

    registry.add_pre_execute(pre)
    published: list[str] = []
    registry.add_observer(lambda execution, result: published.append(execution.call_id))
    calls = _calls(3)
    if where_cancelled == "body":
        calls[0] = ToolCall("c0", "stopper", "{}")
    raised: list[BaseException] = []
    with scope:
        try:
            await run_tool_calls(registry, calls, signal=CancelSource().signal)
        except BaseException as exc:
            raised.append(exc)
            raise
    assert scope.cancelled_caught
    assert [trio.Cancelled] == [type(exc) for exc in raised]
    # Only c0 started (the others are closed synthetically, past the registry).
    assert ["c0"] == entered
    assert ["c0"] == published


@attrs.frozen
class _StopArgs:
    stop: bool = False


@pytest.mark.parametrize("journaled", [False, True], ids=["no-journal", "journal"])
@pytest.mark.parametrize("stop", ["signal", "ambient"])
async def test_a_stop_during_classification_keeps_that_call_from_starting(
    autojump_clock: trio.testing.MockClock, journaled: bool, stop: str
) -> None:
    # The concurrency_safe callable runs right before the call starts: if it fires the
    # step's signal (or cancels an enclosing scope), the call must not start, on either
    # path (without a journal, the next call's own task makes the start decision).
    source = CancelSource()
    scope = trio.CancelScope()
    registry = ToolRegistry()

    def safe(args: _StopArgs) -> bool:
        if args.stop:
            if stop == "signal":
                source.cancel("stop")
            else:
                scope.cancel()
        return True

    async def slow(args: _StopArgs, ctx: ToolRunContext) -> str:
        await trio.sleep(1)
        return "ok"

    registry.tool(slow, name="slow", concurrency_safe=safe)
    published: list[str] = []
    registry.add_observer(lambda execution, result: published.append(execution.call_id))
    journal = MemoryJournal() if journaled else None
    calls = [ToolCall("c0", "slow", {}), ToolCall("c1", "slow", {"stop": True})]
    calls.append(ToolCall("c2", "slow", {}))
    synthetic: list[bool] = []
    with scope:
        outcome = await run_tool_calls(registry, calls, signal=source.signal, journal=journal)
        synthetic = [result.synthetic for result in outcome.results]
    # Only c0 started: the others are closed synthetically, past the registry.
    assert ["c0"] == published
    if stop == "signal":
        assert [False, True, True] == synthetic
    else:
        assert scope.cancelled_caught
    if journal is not None:
        journal.assert_balanced()
        committed = [event.result for event in journal.events if event.kind == "result"]
        assert [False, True, True] == [
            result is not None and result.synthetic for result in committed
        ]
