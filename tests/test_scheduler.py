"""The batch scheduler (DESIGN.md §8): one model step's tool calls, a balanced transcript.

Every tool body here waits on its own ``trio.Event`` (``Step.gates[call_id]``), so each
ordering is forced by the test and observed with ``wait_all_tasks_blocked()``, never timed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from trio_tools import (
    Accept,
    AdditionalContext,
    Allow,
    BatchOutcome,
    CancelSource,
    Deny,
    ErrorInfo,
    Halt,
    JournalEvent,
    MemoryJournal,
    PostDecision,
    PreDecision,
    TextBlock,
    ToolCall,
    ToolExecution,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    define_tool,
    run_tool_calls,
)

# -- expected results, spelled out from the §5 table ---------------------------------------


def ok(text: str, **fields: Any) -> ToolResult:
    return ToolResult(content=(TextBlock(text),), **fields)


def error(name: str, code: str, message: str, **fields: Any) -> ToolResult:
    return ToolResult(
        content=(TextBlock(f"Error: {message}"),),
        is_error=True,
        error=ErrorInfo(name, code, message),
        **fields,
    )


ABORTED = error("AbortError", "ABORTED", "tool call aborted")
ABORTED_BEFORE_DISPATCH = error(
    "AbortError", "ABORTED_BEFORE_DISPATCH", "tool call aborted before dispatch"
)
SYNTHETIC = error(
    "AbortError", "ABORTED_BEFORE_DISPATCH", "tool call aborted before dispatch", synthetic=True
)


def done(call_id: str) -> ToolResult:
    """What a gated tool returns once released."""
    return ok(f"{call_id} done")


def call_event(call: ToolCall) -> JournalEvent:
    return JournalEvent("call", call)


def result_event(call: ToolCall, result: ToolResult) -> JournalEvent:
    return JournalEvent("result", call, result)


def outcome(
    *results: ToolResult,
    aborted: bool = False,
    halt: Halt | None = None,
    concludes_turn: bool = False,
    contexts: Sequence[AdditionalContext] = (),
) -> BatchOutcome:
    return BatchOutcome(
        results=results,
        aborted=aborted,
        halt=halt,
        concludes_turn=concludes_turn,
        contexts=tuple(contexts),
    )


class Fatal(BaseException):
    """A non-``Exception`` error, standing in for ``KeyboardInterrupt``."""


class JournalBroke(Exception):
    """Raised by a journal that fails on purpose."""


# -- the harness ---------------------------------------------------------------------------


class Step:
    """A registry with gated tools, a cancel source, a journal, and a log of what ran.

    ``read`` is parallel, ``write`` exclusive; both log ``start:<id>``, wait for
    ``gates[<id>]``, log ``end:<id>`` and return ``"<id> done"``.  ``instant`` (parallel)
    returns ``"<id> done"`` at once.  ``Step(journaled=False)`` runs its batches without a
    journal (the scheduler's other path: the calls' reports start the next calls).
    """

    def __init__(self, journaled: bool = True) -> None:
        self.registry = ToolRegistry()
        self.source = CancelSource()
        self.journaled = journaled
        self.journal = MemoryJournal()
        self.gates: defaultdict[str, trio.Event] = defaultdict(trio.Event)
        self.log: list[str] = []
        self.running = 0
        self.most_running = 0
        self.observed: list[tuple[str, ToolResult]] = []
        self.outcome: BatchOutcome | None = None
        self.registry.add_observer(self._observe)
        self.registry.register(define_tool(self.gated, name="read", concurrency_safe=True))
        self.registry.register(define_tool(self.gated, name="write"))
        self.registry.register(define_tool(self.instant, concurrency_safe=True))

    def _observe(self, execution: ToolExecution, result: ToolResult) -> None:
        self.observed.append((execution.call_id, result))

    async def gated(self, args: object, ctx: ToolRunContext) -> str:
        self.log.append(f"start:{ctx.call_id}")
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.gates[ctx.call_id].wait()
        finally:
            self.running -= 1
        self.log.append(f"end:{ctx.call_id}")
        return f"{ctx.call_id} done"

    async def instant(self, args: object, ctx: ToolRunContext) -> str:
        return f"{ctx.call_id} done"

    def release(self, *call_ids: str) -> None:
        for call_id in call_ids:
            self.gates[call_id].set()

    async def run(self, calls: Sequence[ToolCall], **options: Any) -> BatchOutcome:
        options.setdefault("journal", self.journal if self.journaled else None)
        self.outcome = await run_tool_calls(
            self.registry, calls, signal=self.source.signal, **options
        )
        return self.outcome

    def start(self, nursery: trio.Nursery, calls: Sequence[ToolCall], **options: Any) -> None:
        """Run the batch in the background; its outcome lands in ``self.outcome``."""

        async def runner() -> None:
            await self.run(calls, **options)

        nursery.start_soon(runner)

    def check_balanced(self) -> None:
        """The journal is balanced (when the batch had one)."""
        if self.journaled:
            self.journal.assert_balanced()

    def events(self) -> list[tuple[str, str]]:
        """The journal, as ``(kind, call_id)`` pairs."""
        return [(event.kind, event.call.call_id) for event in self.journal.events]


def calls(*specs: str) -> list[ToolCall]:
    """``calls("read:r1", "write:w2")``: one call per spec, arguments ``"{}"``."""
    out: list[ToolCall] = []
    for spec in specs:
        name, _, call_id = spec.partition(":")
        out.append(ToolCall(call_id, name, "{}"))
    return out


# With a journal the driver takes every step; without one, the calls' reports do.
both_paths = pytest.mark.parametrize("journaled", [True, False], ids=["journal", "no-journal"])


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


# -- scheduling ----------------------------------------------------------------------------


@both_paths
async def test_parallel_siblings_run_at_the_same_time(journaled: bool) -> None:
    step = Step(journaled)
    batch = calls("read:r1", "read:r2")
    async with trio.open_nursery() as nursery:
        step.start(nursery, batch)
        await settle()
        assert ["start:r1", "start:r2"] == step.log
        step.release("r1", "r2")

    assert outcome(done("r1"), done("r2")) == step.outcome
    step.check_balanced()


async def test_read_write_read_run_in_strict_order_around_the_exclusive_barrier() -> None:
    step = Step()
    batch = calls("read:r1", "write:w2", "read:r3")
    async with trio.open_nursery() as nursery:
        step.start(nursery, batch)
        await settle()
        assert ["start:r1"] == step.log
        step.release("r1")
        await settle()
        assert ["start:r1", "end:r1", "start:w2"] == step.log
        step.release("w2")
        await settle()
        assert ["start:r1", "end:r1", "start:w2", "end:w2", "start:r3"] == step.log
        step.release("r3")

    assert outcome(done("r1"), done("w2"), done("r3")) == step.outcome
    # The write's call is recorded only once it starts: after r1's result was committed.
    assert [
        ("call", "r1"),
        ("result", "r1"),
        ("call", "w2"),
        ("result", "w2"),
        ("call", "r3"),
        ("result", "r3"),
    ] == step.events()


@both_paths
async def test_exclusive_call_holds_its_barrier_through_post_execute_and_commit(
    journaled: bool,
) -> None:
    step = Step(journaled)
    post_gate = trio.Event()

    async def slow_post(
        execution: ToolExecution,
        result: ToolResult,
        call_next: Callable[[], Awaitable[PostDecision]],
    ) -> PostDecision:
        if execution.call_id == "w1":
            step.log.append("post:w1")
            await post_gate.wait()
        return await call_next()

    step.registry.add_post_execute(slow_post)
    async with trio.open_nursery() as nursery:
        step.start(nursery, calls("write:w1", "read:r2"))
        step.release("w1", "r2")
        await settle()
        assert ["start:w1", "end:w1", "post:w1"] == step.log
        post_gate.set()

    assert ["start:w1", "end:w1", "post:w1", "start:r2", "end:r2"] == step.log


@both_paths
async def test_pool_of_two_refills_as_each_call_returns(journaled: bool) -> None:
    step = Step(journaled)
    async with trio.open_nursery() as nursery:
        step.start(nursery, calls("read:r1", "read:r2", "read:r3", "read:r4"), max_parallel=2)
        await settle()
        assert ["start:r1", "start:r2"] == step.log
        step.release("r2")
        await settle()
        assert ["start:r1", "start:r2", "end:r2", "start:r3"] == step.log
        step.release("r1")
        await settle()
        assert ["start:r1", "start:r2", "end:r2", "start:r3", "end:r1", "start:r4"] == step.log
        step.release("r3", "r4")

    assert outcome(done("r1"), done("r2"), done("r3"), done("r4")) == step.outcome
    assert 2 == step.most_running


@both_paths
@pytest.mark.parametrize("spare", [-1, 0, 1], ids=["one-slot-short", "exact", "one-spare"])
async def test_the_pool_fills_only_with_more_calls_than_slots(journaled: bool, spare: int) -> None:
    # A batch with no more calls than slots counts none: every call starts at once; one
    # call more than slots and the last one waits for the first slot to free.
    step = Step(journaled)
    ids = [f"r{n}" for n in range(4)]
    async with trio.open_nursery() as nursery:
        step.start(nursery, [ToolCall(i, "read", "{}") for i in ids], max_parallel=4 + spare)
        await settle()
        started = [f"start:{i}" for i in ids]
        assert (started if spare >= 0 else started[:3]) == step.log
        step.release("r2")
        await settle()
        assert "start:r3" in step.log
        step.release("r0", "r1", "r3")

    assert (4 if spare >= 0 else 3) == step.most_running
    assert outcome(*(done(i) for i in ids)) == step.outcome


@both_paths
async def test_max_parallel_is_never_exceeded(journaled: bool) -> None:
    step = Step(journaled)
    ids = [f"r{n}" for n in range(8)]
    async with trio.open_nursery() as nursery:
        step.start(nursery, [ToolCall(call_id, "read", "{}") for call_id in ids], max_parallel=3)
        # Release in an order unrelated to the start order, one at a time.
        for call_id in ["r1", "r0", "r4", "r2", "r3", "r7", "r6", "r5"]:
            await settle()
            assert step.running <= 3
            step.release(call_id)

    assert 3 == step.most_running
    assert outcome(*(done(call_id) for call_id in ids)) == step.outcome


async def test_results_commit_in_model_order_when_a_later_call_finishes_first() -> None:
    step = Step()
    batch = calls("read:r1", "read:r2")
    async with trio.open_nursery() as nursery:
        step.start(nursery, batch)
        await settle()
        step.release("r2")
        await settle()
        assert ["start:r1", "start:r2", "end:r2"] == step.log
        assert [("call", "r1"), ("call", "r2")] == step.events()
        step.release("r1")

    assert [
        call_event(batch[0]),
        call_event(batch[1]),
        result_event(batch[0], done("r1")),
        result_event(batch[1], done("r2")),
    ] == list(step.journal.events)
    assert outcome(done("r1"), done("r2")) == step.outcome


@both_paths
async def test_pre_execute_runs_one_call_at_a_time_in_model_order(journaled: bool) -> None:
    step = Step(journaled)
    hook_gates: defaultdict[str, trio.Event] = defaultdict(trio.Event)

    async def pre(
        execution: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        step.log.append(f"pre:{execution.call_id}")
        await hook_gates[execution.call_id].wait()
        return await call_next()

    step.registry.add_pre_execute(pre)
    async with trio.open_nursery() as nursery:
        step.start(nursery, calls("read:r1", "read:r2", "read:r3"), max_parallel=3)
        await settle()
        # A later call's hook being released first lets nothing run out of order.
        hook_gates["r3"].set()
        hook_gates["r2"].set()
        await settle()
        assert ["pre:r1"] == step.log
        hook_gates["r1"].set()
        await settle()
        # Each call dispatches right after its own gate, before the next gate starts.
        assert ["pre:r1", "start:r1", "pre:r2", "start:r2", "pre:r3", "start:r3"] == step.log
        step.release("r1", "r2", "r3")

    assert outcome(done("r1"), done("r2"), done("r3")) == step.outcome


@both_paths
async def test_reclassification_right_before_start_sees_a_tool_re_registered_exclusive(
    journaled: bool,
) -> None:
    step = Step(journaled)
    flip = step.registry.register(define_tool(step.gated, name="flip", concurrency_safe=True))

    async def reconfigure(args: object, ctx: ToolRunContext) -> str:
        # Before the body's first checkpoint, so before the scheduler looks at "flip".
        flip()
        step.registry.register(define_tool(step.gated, name="flip", concurrency_safe=False))
        return await step.gated(args, ctx)

    step.registry.register(define_tool(reconfigure, concurrency_safe=True))
    async with trio.open_nursery() as nursery:
        step.start(nursery, calls("reconfigure:c1", "flip:c2"))
        await settle()
        assert ["start:c1"] == step.log  # "flip" is exclusive now: it waits for c1
        step.release("c1")
        await settle()
        assert ["start:c1", "end:c1", "start:c2"] == step.log
        step.release("c2")

    assert outcome(done("c1"), done("c2")) == step.outcome


# -- cancellation --------------------------------------------------------------------------


async def test_pre_cancelled_batch_closes_every_call_synthetically() -> None:
    step = Step()
    step.source.cancel("user pressed stop")
    batch = calls("read:r1", "write:w2", "nope:x3")

    result = await step.run(batch)

    assert outcome(SYNTHETIC, SYNTHETIC, SYNTHETIC, aborted=True) == result
    assert [] == step.log
    assert [] == step.observed  # synthetic results never pass through the registry
    assert [
        call_event(batch[0]),
        result_event(batch[0], SYNTHETIC),
        call_event(batch[1]),
        result_event(batch[1], SYNTHETIC),
        call_event(batch[2]),
        result_event(batch[2], SYNTHETIC),
    ] == list(step.journal.events)
    step.journal.assert_balanced()


@both_paths
async def test_cancel_mid_batch_drains_started_calls_and_closes_unstarted_ones(
    journaled: bool,
) -> None:
    step = Step(journaled)
    batch = calls("read:r1", "read:r2", "read:r3", "read:r4")
    async with trio.open_nursery() as nursery:
        step.start(nursery, batch, max_parallel=2)
        await settle()
        step.source.cancel()

    assert outcome(ABORTED, ABORTED, SYNTHETIC, SYNTHETIC, aborted=True) == step.outcome
    assert ["start:r1", "start:r2"] == step.log
    # Both wake on the same cancellation, in whichever order Trio picks.
    assert [("r1", ABORTED), ("r2", ABORTED)] == sorted(step.observed, key=lambda o: o[0])
    if journaled:
        assert [
            call_event(batch[0]),
            call_event(batch[1]),
            result_event(batch[0], ABORTED),
            result_event(batch[1], ABORTED),
            call_event(batch[2]),
            result_event(batch[2], SYNTHETIC),
            call_event(batch[3]),
            result_event(batch[3], SYNTHETIC),
        ] == list(step.journal.events)


@both_paths
async def test_exclusive_barrier_after_an_aborted_parallel_group_never_runs(
    journaled: bool,
) -> None:
    step = Step(journaled)
    async with trio.open_nursery() as nursery:
        step.start(nursery, calls("read:r1", "read:r2", "write:w3"))
        await settle()
        step.source.cancel()

    assert outcome(ABORTED, ABORTED, SYNTHETIC, aborted=True) == step.outcome
    assert ["start:r1", "start:r2"] == step.log
    step.check_balanced()


@both_paths
async def test_body_cancelling_the_turn_aborts_itself_and_skips_its_sibling(
    journaled: bool,
) -> None:
    step = Step(journaled)

    async def stop_turn(args: object, ctx: ToolRunContext) -> str:
        step.source.cancel("the tool decided to stop")
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    step.registry.register(define_tool(stop_turn, concurrency_safe=True))

    result = await step.run(calls("stop_turn:s1", "read:r2"))

    assert outcome(ABORTED, SYNTHETIC, aborted=True) == result
    assert [] == step.log  # the sibling's body never ran
    step.check_balanced()


@both_paths
async def test_ambient_cancellation_propagates_as_cancelled_after_publishing(
    journaled: bool,
) -> None:
    step = Step(journaled)
    raised: list[BaseException] = []
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def runner() -> None:
                try:
                    await step.run(calls("read:r1", "read:r2", "read:r3"), max_parallel=2)
                except BaseException as exc:
                    raised.append(exc)
                    raise

            nursery.start_soon(runner)
            await settle()
            scope.cancel()

    assert scope.cancelled_caught
    assert 1 == len(raised)
    assert isinstance(raised[0], trio.Cancelled)  # not wrapped in an ExceptionGroup
    assert [("r1", ABORTED), ("r2", ABORTED)] == sorted(step.observed, key=lambda o: o[0])
    assert step.outcome is None
    if not journaled:
        assert ["start:r1", "start:r2"] == step.log  # r3 never started
        return
    # Before Cancelled propagated, the scheduler balanced the journal: the started calls
    # with what they published, the unstarted one synthetically.
    assert [
        ("call", "r1"),
        ("call", "r2"),
        ("result", "r1"),
        ("result", "r2"),
        ("call", "r3"),
        ("result", "r3"),
    ] == step.events()
    step.check_balanced()
    results = [event.result for event in step.journal.events if event.result is not None]
    assert [ABORTED, ABORTED, SYNTHETIC] == results


@both_paths
async def test_a_base_exception_from_a_body_propagates_unwrapped(journaled: bool) -> None:
    step = Step(journaled)

    async def interrupted(args: object, ctx: ToolRunContext) -> str:
        raise Fatal

    step.registry.register(define_tool(interrupted, concurrency_safe=True))
    with pytest.raises(Fatal):
        await step.run(calls("read:r1", "interrupted:i2"))

    # i2 publishes before it raises; then the batch's nursery cancels r1.
    assert [("i2", ABORTED), ("r1", ABORTED)] == step.observed
    step.check_balanced()


# -- halts and conclusions -----------------------------------------------------------------


@both_paths
async def test_deny_with_halt_closes_the_unstarted_calls(journaled: bool) -> None:
    step = Step(journaled)
    halt = Halt("policy says stop")

    async def pre(
        execution: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        if execution.call_id == "r1":
            return Deny("not this one", halt=halt)
        return Allow()

    step.registry.add_pre_execute(pre)

    result = await step.run(calls("read:r1", "read:r2", "write:w3"))

    denied = error("ToolDeniedError", "DENIED", "not this one", halt=halt)
    assert outcome(denied, SYNTHETIC, SYNTHETIC, halt=halt) == result
    assert [] == step.log
    step.check_balanced()


@both_paths
async def test_post_execute_halt_skips_unstarted_calls_without_cancelling_started_ones(
    journaled: bool,
) -> None:
    step = Step(journaled)
    halt = Halt("enough reading")

    async def post(
        execution: ToolExecution,
        result: ToolResult,
        call_next: Callable[[], Awaitable[PostDecision]],
    ) -> PostDecision:
        if execution.call_id == "r1":
            return Accept(halt=halt)
        return await call_next()

    step.registry.add_post_execute(post)
    async with trio.open_nursery() as nursery:
        step.start(nursery, calls("read:r1", "read:r2", "read:r3"), max_parallel=2)
        await settle()
        step.release("r1")
        await settle()
        step.release("r2")  # still running after the halt: it finishes normally

    assert outcome(ok("r1 done", halt=halt), done("r2"), SYNTHETIC, halt=halt) == step.outcome
    assert ["start:r1", "start:r2", "end:r1", "end:r2"] == step.log
    step.check_balanced()


@both_paths
async def test_halt_turn_from_a_body_skips_unstarted_calls_and_first_halt_wins(
    journaled: bool,
) -> None:
    step = Step(journaled)

    async def halting(args: object, ctx: ToolRunContext) -> str:
        ctx.halt_turn(f"{ctx.call_id} says stop")
        return await step.gated(args, ctx)

    step.registry.register(define_tool(halting, concurrency_safe=True))
    async with trio.open_nursery() as nursery:
        step.start(nursery, calls("halting:h1", "halting:h2", "read:r3", "read:r4"), max_parallel=2)
        await settle()
        step.release("h2")  # the later halt settles first; model order still decides
        await settle()
        step.release("h1")

    first, second = Halt("h1 says stop"), Halt("h2 says stop")
    assert (
        outcome(
            ok("h1 done", halt=first), ok("h2 done", halt=second), SYNTHETIC, SYNTHETIC, halt=first
        )
        == step.outcome
    )
    step.check_balanced()


@both_paths
async def test_outcome_gathers_conclusion_contexts_and_progress_in_model_order(
    journaled: bool,
) -> None:
    step = Step(journaled)
    progress: list[tuple[str, object]] = []
    agents: list[object] = []
    agent = object()

    async def concluding(args: object, ctx: ToolRunContext) -> str:
        agents.append(ctx.agent)
        ctx.report_progress(f"{ctx.call_id} half way")
        ctx.defer_context(AdditionalContext(f"from {ctx.call_id}"))
        if ctx.call_id == "c1":
            ctx.conclude_turn()
        return await step.gated(args, ctx)

    step.registry.register(define_tool(concluding, concurrency_safe=True))
    async with trio.open_nursery() as nursery:
        step.start(
            nursery,
            calls("concluding:c1", "concluding:c2"),
            agent=agent,
            on_progress=lambda call_id, p: progress.append((call_id, p)),
        )
        await settle()
        step.release("c2")
        await settle()
        step.release("c1")

    from_c1, from_c2 = AdditionalContext("from c1"), AdditionalContext("from c2")
    assert (
        outcome(
            ok("c1 done", concludes_turn=True, additional_contexts=(from_c1,)),
            ok("c2 done", additional_contexts=(from_c2,)),
            concludes_turn=True,
            contexts=(from_c1, from_c2),
        )
        == step.outcome
    )
    assert [("c1", "c1 half way"), ("c2", "c2 half way")] == progress
    assert [agent, agent] == agents


# -- internal failures ---------------------------------------------------------------------


@attrs.define
class FailingJournal:
    """A journal whose ``record_result`` for one call raises."""

    fail_for: str
    inner: MemoryJournal = attrs.Factory(MemoryJournal)

    async def record_call(self, call: ToolCall) -> None:
        await self.inner.record_call(call)

    async def record_result(self, call: ToolCall, result: ToolResult) -> None:
        if call.call_id == self.fail_for:
            raise JournalBroke(f"disk full at {call.call_id}")
        await self.inner.record_result(call, result)


async def test_journal_failure_drains_started_calls_then_raises_unwrapped() -> None:
    step = Step()
    journal = FailingJournal("r1")
    raised: list[BaseException] = []
    async with trio.open_nursery() as nursery:

        async def runner() -> None:
            try:
                await step.run(
                    calls("read:r1", "read:r2", "read:r3"), max_parallel=2, journal=journal
                )
            except JournalBroke as exc:
                raised.append(exc)

        nursery.start_soon(runner)
        await settle()
        step.release("r1")
        await settle()
        assert [] == raised  # r2 is drained first, not cancelled
        step.release("r2")

    assert 1 == len(raised)
    assert "disk full at r1" == str(raised[0])
    assert [("r1", done("r1")), ("r2", done("r2"))] == step.observed
    assert ["start:r1", "start:r2", "end:r1", "end:r2"] == step.log  # r3 never started
    # No synthetic result was invented, and nothing was written after the failure.
    assert [
        call_event(ToolCall("r1", "read", "{}")),
        call_event(ToolCall("r2", "read", "{}")),
    ] == list(journal.inner.events)


async def test_journal_failure_in_record_call_starts_nothing_more() -> None:
    step = Step()

    class BrokenJournal:
        async def record_call(self, call: ToolCall) -> None:
            raise JournalBroke("cannot record")

        async def record_result(self, call: ToolCall, result: ToolResult) -> None:
            raise AssertionError("unreachable")

    with pytest.raises(JournalBroke, match="cannot record"):
        await step.run(calls("read:r1"), journal=BrokenJournal())

    assert [] == step.log


# -- arguments -----------------------------------------------------------------------------


@attrs.frozen
class PathArgs:
    path: str


async def test_raw_argument_strings_are_parsed_or_passed_through() -> None:
    step = Step()

    async def echo(args: object, ctx: ToolRunContext) -> object:
        return args

    async def read_path(args: PathArgs, ctx: ToolRunContext) -> str:
        return args.path

    step.registry.register(define_tool(echo, concurrency_safe=True))
    step.registry.register(define_tool(read_path, concurrency_safe=True))
    batch = [
        ToolCall("e1", "echo", ""),
        ToolCall("e2", "echo", "  \n"),
        ToolCall("e3", "echo", '{"a": [1, 2.5, null]}'),
        ToolCall("e4", "echo", "{not json"),  # a raw tool receives the string itself
        ToolCall("e5", "echo", {"already": "parsed"}),
        ToolCall("p1", "read_path", '{"path": "notes.txt"}'),
        ToolCall("p2", "read_path", "{not json"),
        ToolCall("p3", "read_path", "NaN"),
        ToolCall("u1", "no_such_tool", "{}"),
        ToolCall("p4", "read_path", ""),
    ]

    result = await step.run(batch)

    def invalid(violations: str) -> ToolResult:
        return error("ToolArgsError", "INVALID_ARGS", f"invalid arguments: {violations}")

    assert (
        outcome(
            ok("{}"),
            ok("{}"),
            ok('{"a":[1,2.5,null]}'),
            ok("{not json"),
            ok('{"already":"parsed"}'),
            ok("notes.txt"),
            invalid(
                "not valid JSON (Expecting property name enclosed in double quotes"
                " at line 1 column 2)"
            ),
            invalid("not valid JSON (NaN is not allowed at line 1 column 1)"),
            error("ToolNotFoundError", "UNKNOWN_TOOL", 'unknown tool "no_such_tool"'),
            invalid("$.path: missing required field"),
        )
        == result
    )
    step.journal.assert_balanced()


# -- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize("max_parallel", [0, -1, True, False, 1.0, 2.5, "2", None])
async def test_max_parallel_must_be_an_int_of_at_least_one(max_parallel: object) -> None:
    step = Step()
    with pytest.raises(ValueError, match="max_parallel must be an int >= 1"):
        await step.run(calls("read:r1"), max_parallel=max_parallel)
    assert () == step.journal.events


async def test_duplicate_call_ids_are_rejected_before_anything_runs() -> None:
    step = Step()
    with pytest.raises(ValueError, match="call_id 'x' appears more than once"):
        await step.run(calls("read:x", "write:x"))
    assert () == step.journal.events


async def test_calls_must_be_tool_calls() -> None:
    step = Step()
    with pytest.raises(TypeError, match="calls must hold ToolCall objects"):
        await step.run([("r1", "read", "{}")])


def test_tool_call_validates_its_fields() -> None:
    with pytest.raises(TypeError):
        ToolCall(1, "read", "{}")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ToolCall("c1", None, "{}")  # type: ignore[arg-type]


async def test_the_first_bad_call_in_model_order_is_the_one_reported() -> None:
    step = Step()
    mixed: list[Any] = [*calls("read:x", "write:x"), ("r1", "read", "{}")]
    with pytest.raises(ValueError, match="call_id 'x' appears more than once"):
        await step.run(mixed)
    mixed = [*calls("read:x"), ("r1", "read", "{}"), *calls("write:x")]
    with pytest.raises(TypeError, match="calls must hold ToolCall objects"):
        await step.run(mixed)
    assert () == step.journal.events


def test_tool_call_raises_attrs_own_validation_errors() -> None:
    with pytest.raises(TypeError) as bad_id:
        ToolCall(1, "read", "{}")  # type: ignore[arg-type]
    assert (
        "'call_id' must be <class 'str'> (got 1 that is a <class 'int'>)." == bad_id.value.args[0]
    )
    with pytest.raises(TypeError) as bad_name:
        ToolCall(call_id="c1", name=None, arguments="{}")  # type: ignore[arg-type]
    assert bad_name.value.args[0].startswith("'name' must be <class 'str'> (got None")
    assert attrs.fields(ToolCall).name is bad_name.value.args[1]
    call = ToolCall(call_id="c1", name="read", arguments={"a": 1})
    assert ("c1", "read", {"a": 1}) == (call.call_id, call.name, call.arguments)
    assert ToolCall("c2", "read", {"a": 1}) == attrs.evolve(call, call_id="c2")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        call.name = "write"  # type: ignore[misc]


class _Text(str):
    """A ``str`` subclass: a valid ``ToolCall`` field, not a valid input's ``call_id``."""


async def test_a_call_id_the_input_rejects_is_an_internal_failure() -> None:
    step = Step(journaled=False)
    call = ToolCall(_Text("c1"), "instant", "{}")
    assert type(call.call_id) is _Text
    with pytest.raises(TypeError, match="call_id must be a str"):
        await step.run([call])
    assert [] == step.observed


@both_paths
async def test_every_empty_object_text_parses_to_its_own_calls_arguments(
    journaled: bool,
) -> None:
    step = Step(journaled)
    seen: list[object] = []

    async def echo(args: object, ctx: ToolRunContext) -> str:
        seen.append(args)
        return f"{ctx.call_id} done"

    step.registry.register(define_tool(echo, concurrency_safe=True))
    batch = [ToolCall(f"e{i}", "echo", text) for i, text in enumerate(["{}", " {} ", "{}"])]
    result = await step.run(batch)
    assert outcome(done("e0"), done("e1"), done("e2")) == result
    assert [{}, {}, {}] == seen


def test_journal_event_result_matches_its_kind() -> None:
    call = ToolCall("c1", "read", "{}")
    with pytest.raises(ValueError, match="'call' event has no result"):
        JournalEvent("call", call, done("c1"))
    with pytest.raises(TypeError, match="'result' event needs a ToolResult"):
        JournalEvent("result", call)
    with pytest.raises(ValueError, match="kind"):
        JournalEvent("other", call)  # type: ignore[arg-type]


async def test_empty_batch_is_a_checkpoint_and_returns_an_empty_outcome() -> None:
    source = CancelSource()
    with trio.testing.assert_checkpoints():
        result = await run_tool_calls(ToolRegistry(), [], signal=source.signal)
    assert outcome() == result


async def test_signal_listeners_are_removed_when_the_batch_returns() -> None:
    step = Step()
    before = step.source.signal.statistics()
    result = await step.run(calls("instant:i1", "instant:i2"), journal=None)
    assert outcome(done("i1"), done("i2")) == result
    assert before == step.source.signal.statistics()


# -- MemoryJournal.assert_balanced ---------------------------------------------------------

A = ToolCall("a", "read", "{}")
B = ToolCall("b", "read", "{}")


async def record(journal: MemoryJournal, *steps: tuple[str, ToolCall]) -> None:
    for kind, call in steps:
        if kind == "call":
            await journal.record_call(call)
        else:
            await journal.record_result(call, done(call.call_id))


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([("call", A)], "call 'a' has no result"),
        ([("call", A), ("call", B), ("result", A)], "call 'b' has no result"),
        ([("call", A), ("result", A), ("result", A)], "event #2: call 'a' has more than one"),
        ([("result", A), ("call", A)], "event #0: result for call 'a' without a call"),
        (
            [("call", A), ("call", B), ("result", B), ("result", A)],
            "event #2: result for call 'b' is out of model order: call 'a' has no result yet",
        ),
        ([("call", A), ("call", A)], "event #1: call 'a' is recorded twice"),
        (
            [("call", A), ("result", ToolCall("a", "write", "{}"))],
            "event #1: result for call 'a' carries",
        ),
    ],
)
async def test_assert_balanced_reports_the_first_violation(
    steps: list[tuple[str, ToolCall]], message: str
) -> None:
    journal = MemoryJournal()
    await record(journal, *steps)
    with pytest.raises(AssertionError, match=f"^journal is not balanced: .*{message}"):
        journal.assert_balanced()


async def test_assert_balanced_accepts_balanced_journals() -> None:
    journal = MemoryJournal()
    journal.assert_balanced()
    await record(journal, ("call", A), ("call", B), ("result", A), ("result", B))
    journal.assert_balanced()


async def test_memory_journal_writes_are_not_interrupted_by_cancellation() -> None:
    journal = MemoryJournal()
    with trio.CancelScope() as scope:
        scope.cancel()
        await journal.record_call(A)
        await journal.record_result(A, done("a"))
    assert (call_event(A), result_event(A, done("a"))) == journal.events


async def test_several_internal_failures_raise_the_first_and_log_the_others(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    step = Step()
    execute = step.registry._execute

    async def buggy(input: Any, hooks: Any) -> ToolResult:
        await execute(input, hooks)
        raise RuntimeError(f"bug after {input.call_id}")

    monkeypatch.setattr(step.registry, "_execute", buggy)
    raised: list[BaseException] = []
    async with trio.open_nursery() as nursery:

        async def runner() -> None:
            try:
                await step.run(calls("read:r1", "read:r2", "read:r3"), max_parallel=2)
            except RuntimeError as exc:
                raised.append(exc)

        nursery.start_soon(runner)
        await settle()
        step.release("r2")
        await settle()
        assert [] == raised  # r1 is drained, not cancelled
        step.release("r1")

    assert ["bug after r2"] == [str(exc) for exc in raised]
    assert ["start:r1", "start:r2", "end:r2", "end:r1"] == step.log
    logged = [record.exc_info[1] for record in caplog.records if record.exc_info]
    assert ["bug after r1"] == [str(exc) for exc in logged]
    assert [("call", "r1"), ("call", "r2")] == step.events()


async def test_a_journal_write_in_progress_completes_despite_ambient_cancellation() -> None:
    step = Step()
    step.registry.register(define_tool(step.instant, name="instant_write"))
    write_gate = trio.Event()
    journal = MemoryJournal()

    class SlowJournal:
        async def record_call(self, call: ToolCall) -> None:
            await journal.record_call(call)

        async def record_result(self, call: ToolCall, result: ToolResult) -> None:
            await write_gate.wait()
            await journal.record_result(call, result)

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:

        async def runner() -> None:
            with scope:
                await step.run(calls("instant_write:w1", "read:r2"), journal=SlowJournal())

        nursery.start_soon(runner)
        await settle()
        scope.cancel()
        await settle()
        try:
            assert 1 == len(journal.events)  # still writing w1's result: it is shielded
        finally:
            write_gate.set()

    assert scope.cancelled_caught
    assert step.outcome is None
    w1 = ToolCall("w1", "instant_write", "{}")
    r2 = ToolCall("r2", "read", "{}")
    # The write completed; then the batch stopped: r2 never started, and was closed with a
    # synthetic result so that the transcript balances.
    assert (
        call_event(w1),
        result_event(w1, done("w1")),
        call_event(r2),
        result_event(r2, SYNTHETIC),
    ) == journal.events
    assert [("w1", done("w1"))] == step.observed


@both_paths
async def test_a_pool_slot_frees_when_dispatch_settles_before_post_execute(journaled: bool) -> None:
    """DESIGN.md §8: the slot frees when the call's dispatch settles, not at commit."""
    step = Step(journaled)
    post_gate = trio.Event()

    async def slow_post(
        execution: ToolExecution, result: ToolResult, call_next: Callable[[], Awaitable[Any]]
    ) -> Any:
        step.log.append(f"post:{execution.call_id}")
        if execution.call_id == "r1":
            await post_gate.wait()
        return await call_next()

    step.registry.add_post_execute(slow_post)
    async with trio.open_nursery() as nursery:
        step.start(nursery, calls("read:r1", "read:r2"), max_parallel=1)
        await settle()
        step.release("r1")
        await settle()
        # r1 waits in post-execute; its pool slot is free, so r2's body has started.
        assert ["start:r1", "end:r1", "post:r1", "start:r2"] == step.log
        step.release("r2")
        await settle()
        post_gate.set()
    assert step.outcome is not None
    assert [TextBlock("r1 done"), TextBlock("r2 done")] == [
        r.content[0] for r in step.outcome.results
    ]
    step.check_balanced()
