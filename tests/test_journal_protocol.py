"""How ``run_tool_calls`` uses a ``DurableJournal``: the batch list first, the write-ahead
dispatch marker right before each body, settled results as they are published, commits in
model order; write failures are internal failures.  Journals without the extra methods
behave as before.

The journal here is the test's own in-memory ``DurableJournal``, logging into the same list
as the tools and stages, so the order of everything is observable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from helpers_registry import aborted, aborted_before_dispatch, denied, ok, unknown_tool

from trio_tools import (
    TOOL_ABORTED_BEFORE_DISPATCH,
    Accept,
    CancelSource,
    Deny,
    DurableJournal,
    Halt,
    MemoryJournal,
    PostDecision,
    PreDecision,
    ToolCall,
    ToolDispatchExecution,
    ToolExecution,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    run_tool_calls,
)

Log = list[tuple[Any, ...]]


class DiskFullError(OSError):
    pass


class LoggingJournal:
    """A ``DurableJournal`` in memory; each write may wait or raise, per call id."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.delay: dict[tuple[str, str], float] = {}
        self.fail: dict[tuple[str, str], BaseException] = {}
        self.active = 0
        self.most_active = 0

    async def _write(self, method: str, key: str, *entry: Any) -> None:
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            await trio.sleep(self.delay.get((method, key), 0))
            error = self.fail.get((method, key))
            if error is not None:
                raise error
            self.log.append((method, key, *entry))
        finally:
            self.active -= 1

    async def record_batch(self, calls: tuple[ToolCall, ...]) -> None:
        await self._write("batch", "*", tuple(call.call_id for call in calls))

    async def record_call(self, call: ToolCall) -> None:
        await self._write("call", call.call_id)

    async def record_dispatch(self, call: ToolCall) -> None:
        await self._write("dispatch", call.call_id)

    async def record_settled(self, call: ToolCall, result: ToolResult) -> None:
        await self._write("settled", call.call_id, result)

    async def record_result(self, call: ToolCall, result: ToolResult) -> None:
        await self._write("result", call.call_id, result)


def _is_durable(journal: DurableJournal) -> DurableJournal:
    return journal  # the static check: LoggingJournal satisfies the protocol


def make_registry(log: Log) -> ToolRegistry:
    """``work`` logs its body, sleeps ``args["sleep"]`` and returns ``"{id} done"``."""
    registry = ToolRegistry()

    def parallel(args: object) -> bool:
        return not (isinstance(args, dict) and args.get("exclusive"))

    @registry.tool(concurrency_safe=parallel)
    async def work(args: object, ctx: ToolRunContext) -> str:
        log.append(("body", ctx.call_id))
        if isinstance(args, dict):
            await trio.sleep(float(args.get("sleep", 0)))
        return f"{ctx.call_id} done"

    async def around(
        exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
    ) -> ToolResult:
        log.append(("around", exec.call_id))
        return await call_next()

    async def pre(
        exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        log.append(("pre", exec.call_id))
        if exec.call_id.startswith("deny"):
            return Deny("no")
        return await call_next()

    registry.add_around_execute(around)
    registry.add_pre_execute(pre)
    return registry


def call(call_id: str, **args: Any) -> ToolCall:
    return ToolCall(call_id, "work", args)


def of(log: Log, *kinds: str) -> list[tuple[Any, ...]]:
    return [(entry[0], entry[1]) for entry in log if entry[0] in kinds]


async def test_one_call_writes_batch_call_dispatch_settled_result_in_order() -> None:
    log: Log = []
    journal = _is_durable(LoggingJournal(log))
    outcome = await run_tool_calls(
        make_registry(log), [call("c1")], signal=CancelSource().signal, journal=journal
    )
    assert (ok("c1 done"),) == outcome.results
    assert [
        ("batch", "*", ("c1",)),
        ("call", "c1"),
        ("pre", "c1"),
        ("around", "c1"),
        ("dispatch", "c1"),
        ("body", "c1"),
        ("settled", "c1", ok("c1 done")),
        ("result", "c1", ok("c1 done")),
    ] == log


async def test_the_batch_list_is_recorded_before_anything_of_the_batch_runs() -> None:
    log: Log = []
    calls = [call("c1"), call("deny2"), ToolCall("c3", "nope", {}), call("c4", exclusive=True)]
    await run_tool_calls(
        make_registry(log), calls, signal=CancelSource().signal, journal=LoggingJournal(log)
    )
    assert ("batch", "*", ("c1", "deny2", "c3", "c4")) == log[0]
    assert 1 == sum(1 for entry in log if entry[0] == "batch")


async def test_the_dispatch_marker_is_written_right_before_each_body(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    calls = [call("c1", sleep=1), call("c2"), call("c3", exclusive=True), call("c4", sleep=2)]
    await run_tool_calls(
        make_registry(log), calls, signal=CancelSource().signal, journal=LoggingJournal(log)
    )
    for call_id in ("c1", "c2", "c3", "c4"):
        mine = [entry[0] for entry in log if entry[1] == call_id]
        # Only the wrapper ran before the marker; the body right after it.
        position = mine.index("dispatch")
        assert ["call", "pre", "around", "dispatch", "body"] == mine[: position + 2], call_id


async def test_calls_whose_body_never_runs_get_no_dispatch_marker() -> None:
    log: Log = []
    calls = [call("deny1"), ToolCall("c2", "nope", {}), ToolCall("c3", "strict", "[not json")]
    registry = make_registry(log)

    @registry.tool
    async def strict(args: dict[str, int], ctx: ToolRunContext) -> str:
        return "never"

    calls.append(ToolCall("c4", "strict", {"x": "text"}))
    outcome = await run_tool_calls(
        registry, calls, signal=CancelSource().signal, journal=LoggingJournal(log)
    )
    assert [] == of(log, "dispatch", "body")
    assert denied("no") == outcome.results[0]
    assert unknown_tool("nope") == outcome.results[1]
    # Every call still settles, and is committed with its settled result.
    assert [("settled", c.call_id) for c in calls] == of(log, "settled")
    assert [("result", c.call_id) for c in calls] == of(log, "result")


async def test_a_pre_aborted_batch_records_the_list_and_no_marker() -> None:
    log: Log = []
    source = CancelSource()
    source.cancel("stop")
    outcome = await run_tool_calls(
        make_registry(log),
        [call("c1"), call("c2")],
        signal=source.signal,
        journal=LoggingJournal(log),
    )
    assert ("batch", "*", ("c1", "c2")) == log[0]
    assert [] == of(log, "dispatch", "body")
    assert all(TOOL_ABORTED_BEFORE_DISPATCH == r.code for r in outcome.results)


@attrs.frozen
class _Count:
    n: int


@pytest.mark.parametrize("stage", ["deny", "post-execute"])
async def test_a_halt_stops_later_starts_while_its_result_is_being_settled(
    autojump_clock: trio.testing.MockClock, stage: str
) -> None:
    # The halting call never passes its gate (a Deny, or INVALID_ARGS then a halting
    # post-execute), so the next call may start only once it settled: by then its halt
    # is known, even though the durable journal is still writing the result.
    log: Log = []
    journal = LoggingJournal(log)
    journal.delay[("settled", "halt1")] = 5
    registry = make_registry(log)
    stop = Halt("stop")

    async def deny(
        exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        if exec.call_id == "halt1":
            return Deny("no", halt=stop)
        return await call_next()

    async def post(
        exec: ToolExecution, result: ToolResult, call_next: Callable[[], Awaitable[PostDecision]]
    ) -> PostDecision:
        if exec.call_id == "halt1":
            return Accept(halt=stop)
        return await call_next()

    if stage == "deny":
        registry.add_pre_execute(deny)
        first = call("halt1")
    else:

        async def typed(args: _Count, ctx: ToolRunContext) -> str:
            raise AssertionError("INVALID_ARGS: never invoked")

        registry.tool(typed, name="typed", concurrency_safe=True)
        registry.add_post_execute(post)
        first = ToolCall("halt1", "typed", {"n": "x"})  # parallel, INVALID_ARGS: no gate
    outcome = await run_tool_calls(
        registry, [first, call("c2")], signal=CancelSource().signal, journal=journal
    )
    assert stop == outcome.halt
    assert attrs.evolve(aborted_before_dispatch(), synthetic=True) == outcome.results[1]
    # The second call never started: recorded and closed synthetically, nothing else.
    assert [("call", "c2"), ("result", "c2")] == [entry[:2] for entry in log if entry[1] == "c2"]


async def test_results_settle_in_finish_order_and_commit_in_model_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    calls = [call("slow", sleep=5), call("fast")]
    await run_tool_calls(
        make_registry(log), calls, signal=CancelSource().signal, journal=LoggingJournal(log)
    )
    assert [("settled", "fast"), ("settled", "slow")] == of(log, "settled")
    # Both were ready when the slow one settled: committed together (overlapping writes).
    assert {("result", "slow"), ("result", "fast")} == set(of(log, "result")[:2])
    assert log.index(("settled", "slow", ok("slow done"))) < min(
        index for index, entry in enumerate(log) if entry[0] == "result"
    )
    # The fast call's result was durable while the slow one was still running.
    assert log.index(("settled", "fast", ok("fast done"))) < log.index(
        ("settled", "slow", ok("slow done"))
    )


async def test_results_ready_together_are_committed_with_overlapping_writes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    journal = LoggingJournal(log)
    calls = [call("c0", sleep=5), *(call(f"c{i}") for i in range(1, 6))]
    for c in calls:
        journal.delay[("result", c.call_id)] = 1
    before = trio.current_time()
    outcome = await run_tool_calls(
        make_registry(log), calls, signal=CancelSource().signal, journal=journal
    )
    assert [ok(f"c{i} done") for i in range(6)] == list(outcome.results)
    assert {("result", c.call_id) for c in calls} == set(of(log, "result"))
    # c1..c5 waited for c0, then all six were committed at once: 5 s + one round of 1 s
    # (one write at a time would take 5 s + 6 s).
    assert 6 == pytest.approx(trio.current_time() - before)
    assert journal.most_active >= 5


async def test_a_plain_journal_still_sees_one_write_at_a_time_in_model_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    journal = MemoryJournal()
    calls = [call("c0", sleep=5), *(call(f"c{i}") for i in range(1, 6))]
    outcome = await run_tool_calls(
        make_registry(log), calls, signal=CancelSource().signal, journal=journal
    )
    journal.assert_balanced()
    assert [(e.kind, e.call.call_id) for e in journal.events if e.kind == "result"] == [
        ("result", c.call_id) for c in calls
    ]
    assert [ok(f"c{i} done") for i in range(6)] == list(outcome.results)


async def test_a_failing_dispatch_write_stops_the_body_and_is_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    journal = LoggingJournal(log)
    failure = DiskFullError(28, "No space left on device")
    journal.fail[("dispatch", "c2")] = failure
    calls = [call("c1", sleep=5), call("c2"), call("c3")]
    with pytest.raises(DiskFullError) as info:
        await run_tool_calls(
            make_registry(log), calls, signal=CancelSource().signal, journal=journal
        )
    assert failure is info.value
    # c2's body never ran; c1 was drained (not cancelled); c3 never started.
    assert [("body", "c1")] == of(log, "body")
    assert ("settled", "c1", ok("c1 done")) in log
    assert [] == [e for e in of(log, "pre", "dispatch", "body") if e[1] == "c3"]


async def test_a_failing_batch_write_is_raised_before_anything_runs() -> None:
    log: Log = []
    journal = LoggingJournal(log)
    failure = DiskFullError(28, "No space left on device")
    journal.fail[("batch", "*")] = failure
    with pytest.raises(DiskFullError) as info:
        await run_tool_calls(
            make_registry(log), [call("c1")], signal=CancelSource().signal, journal=journal
        )
    assert failure is info.value
    assert [] == log


async def test_a_failing_settled_write_is_an_internal_failure() -> None:
    log: Log = []
    journal = LoggingJournal(log)
    failure = RuntimeError("journal write failed")
    journal.fail[("settled", "c1")] = failure
    with pytest.raises(RuntimeError) as info:
        await run_tool_calls(
            make_registry(log),
            [call("c1"), call("c2")],
            signal=CancelSource().signal,
            journal=journal,
        )
    assert failure is info.value
    assert [] == of(log, "result")


class Interrupt(BaseException):
    """A non-``Exception`` error, standing in for ``KeyboardInterrupt``."""


async def test_an_interrupting_settled_write_still_commits_the_published_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The call's result was published (and handed to record_settled): closing the
    # interrupted batch commits that real result, not a synthetic ABORTED.
    log: Log = []
    journal = LoggingJournal(log)
    journal.fail[("settled", "c1")] = Interrupt()
    registry = make_registry(log)
    published: list[ToolResult] = []
    registry.add_observer(lambda execution, result: published.append(result))
    with pytest.raises(Interrupt):
        await run_tool_calls(
            registry,
            [call("c1", sleep=1), call("c2", sleep=5), call("c3", exclusive=True)],
            signal=CancelSource().signal,
            journal=journal,
        )
    assert [ok("c1 done"), aborted()] == published
    committed = [entry[2] for entry in log if entry[0] == "result"]
    synthetic = attrs.evolve(aborted_before_dispatch(), synthetic=True)
    assert [ok("c1 done"), aborted(), synthetic] == committed
    assert [("call", "c1"), ("call", "c2"), ("call", "c3")] == of(log, "call")


async def test_a_signal_that_fires_during_the_dispatch_write_keeps_the_body_from_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    journal = LoggingJournal(log)
    journal.delay[("dispatch", "c1")] = 10
    source = CancelSource()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio_sleep_then_cancel, source, 5)
        outcome = await run_tool_calls(
            make_registry(log), [call("c1")], signal=source.signal, journal=journal
        )
    # The write completed (shielded), the body did not run.
    assert [("dispatch", "c1")] == of(log, "dispatch")
    assert [] == of(log, "body")
    assert (aborted_before_dispatch(),) == outcome.results


async def trio_sleep_then_cancel(source: CancelSource, seconds: float) -> None:
    await trio.sleep(seconds)
    source.cancel("stop")


async def test_ambient_cancellation_does_not_interrupt_the_writes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: Log = []
    journal = LoggingJournal(log)
    journal.delay[("dispatch", "c1")] = 10
    journal.delay[("settled", "c1")] = 10
    with trio.move_on_after(5):
        await run_tool_calls(
            make_registry(log),
            [call("c1"), call("c2", exclusive=True)],
            signal=CancelSource().signal,
            journal=journal,
        )
    # Every write that began completed, and the transcript is balanced.
    assert [("batch", "*"), ("dispatch", "c1")] == of(log, "batch", "dispatch")
    assert [("result", "c1"), ("result", "c2")] == of(log, "result")
    assert [("call", "c1"), ("call", "c2")] == of(log, "call")


async def test_a_journal_with_only_some_extra_methods_gets_those() -> None:
    log: Log = []

    class DispatchOnly:
        async def record_call(self, call: ToolCall) -> None:
            log.append(("call", call.call_id))
            await trio.lowlevel.checkpoint()

        async def record_dispatch(self, call: ToolCall) -> None:
            log.append(("dispatch", call.call_id))
            await trio.lowlevel.checkpoint()

        async def record_result(self, call: ToolCall, result: ToolResult) -> None:
            log.append(("result", call.call_id))
            await trio.lowlevel.checkpoint()

    await run_tool_calls(
        make_registry(log), [call("c1")], signal=CancelSource().signal, journal=DispatchOnly()
    )
    assert [("call", "c1"), ("dispatch", "c1"), ("result", "c1")] == of(
        log, "call", "dispatch", "result"
    )
