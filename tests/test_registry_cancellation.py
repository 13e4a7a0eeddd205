"""Cancellation in the registry pipeline (DESIGN.md §4, "Cancellation while stages run").

Every race is forced with ``trio.Event``s and ``wait_all_tasks_blocked``: the caller's signal
fires while a named stage is waiting, and the test checks the one published result.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
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
    aborted,
    aborted_before_dispatch,
    denied,
    error,
    not_json_arguments,
    note,
    ok,
    unknown_tool,
)

from trio_tools import (
    Accept,
    ApprovalRequest,
    Ask,
    Block,
    CancelReason,
    CancelSignal,
    CancelSource,
    Deny,
    ErrorInfo,
    Halt,
    PreDecision,
    TextBlock,
    ToolDispatchExecution,
    ToolExecution,
    ToolResult,
    ToolRunContext,
    define_tool,
    open_signal,
)


@pytest.fixture
def h() -> Harness:
    return Harness()


class Stages:
    """Records which stages ran and lets a test hold one of them at a wait point."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.calls: list[str] = []
        self.post_saw: list[ToolResult] = []
        self.reached = trio.Event()

        async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
            self.calls.append("post")
            self.post_saw.append(result)
            return await call_next()

        h.registry.add_post_execute(post)

    def body(
        self, fn: Callable[[Any, ToolRunContext], Awaitable[object]] | None = None
    ) -> list[ToolRunContext]:
        """Register the tool; by default it defers a context and returns ``"done"``."""
        contexts: list[ToolRunContext] = []

        async def body(args: object, ctx: ToolRunContext) -> object:
            self.calls.append("body")
            contexts.append(ctx)
            if fn is not None:
                return await fn(args, ctx)
            ctx.defer_context(note("body"))
            return "done"

        self.h.registry.register(define_tool(body, name=TOOL))
        return contexts

    async def run_and_cancel(self, **kwargs: Any) -> ToolResult:
        """Start the call, cancel the caller's signal once ``reached`` is set, return the result."""
        async with trio.open_nursery() as nursery:
            pending = self.h.start_execute(nursery, **kwargs)
            await self.reached.wait()
            await trio.testing.wait_all_tasks_blocked()
            assert not pending.done
            self.h.source.cancel("user pressed stop")
        assert pending.result is not None
        return pending.result


# --------------------------------------------------------------------------------------
# The gate runs inside caller_signal.open_scope()


async def test_cancel_during_a_pre_execute_hook_aborts_before_dispatch_and_post_runs(
    h: Harness,
) -> None:
    stages = Stages(h)

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        stages.reached.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    h.registry.add_pre_execute(pre)
    stages.body()

    result = await stages.run_and_cancel()

    assert aborted_before_dispatch() == result
    assert ["post"] == stages.calls
    assert [aborted_before_dispatch()] == stages.post_saw


async def test_a_deny_completing_after_cancel_stays_denied(h: Harness) -> None:
    stages = Stages(h)
    release = trio.Event()

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        stages.reached.set()
        with trio.CancelScope(shield=True):  # finishes its lookup whatever the caller does
            await release.wait()
        return Deny("not allowed", halt=Halt("policy"))

    h.registry.add_pre_execute(pre)
    stages.body()

    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await stages.reached.wait()
        h.source.cancel()
        release.set()

    assert denied("not allowed", halt=Halt("policy")) == pending.result
    assert ["post"] == stages.calls


async def test_allow_completing_after_cancel_aborts_before_dispatch(h: Harness) -> None:
    stages = Stages(h)

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        h.source.cancel()
        return await call_next()

    h.registry.add_pre_execute(pre)
    stages.body()

    assert aborted_before_dispatch() == await h.execute()
    assert ["post"] == stages.calls


async def test_a_guard_cancelling_the_caller_aborts_before_dispatch(h: Harness) -> None:
    stages = Stages(h)
    h.registry.add_guard(lambda execution: h.source.cancel())
    stages.body()

    assert aborted_before_dispatch() == await h.execute()
    assert ["post"] == stages.calls


async def test_cancel_during_approval_aborts_before_dispatch_and_post_runs(h: Harness) -> None:
    stages = Stages(h)

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Ask("confirm")

    async def approver(request: ApprovalRequest) -> str:
        stages.reached.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    h.registry.add_pre_execute(pre)
    h.registry.set_approver(approver)
    stages.body()

    result = await stages.run_and_cancel()

    assert aborted_before_dispatch() == result
    assert ["post"] == stages.calls


@pytest.mark.parametrize("caller_cancelled", [True, False])
async def test_approver_answering_cancelled(h: Harness, caller_cancelled: bool) -> None:
    stages = Stages(h)

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Ask()

    async def approver(request: ApprovalRequest) -> str:
        if caller_cancelled:
            h.source.cancel()
        return "cancelled"

    h.registry.add_pre_execute(pre)
    h.registry.set_approver(approver)
    stages.body()

    result = await h.execute()

    if caller_cancelled:
        assert aborted_before_dispatch() == result
    else:
        assert denied('approval for tool "tool" was cancelled') == result
    assert ["post"] == stages.calls


async def test_a_shielded_approver_answering_cancelled_after_the_caller_cancelled(
    h: Harness,
) -> None:
    stages = Stages(h)

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Ask()

    async def approver(request: ApprovalRequest) -> str:
        stages.reached.set()
        with trio.CancelScope(shield=True):  # the prompt closes itself
            await request.execution.signal.wait_cancelled()
        return "cancelled"

    h.registry.add_pre_execute(pre)
    h.registry.set_approver(approver)
    stages.body()

    assert aborted_before_dispatch() == await stages.run_and_cancel()


async def test_a_gate_failure_after_cancel_stays_a_pre_execute_failure(h: Harness) -> None:
    stages = Stages(h)

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        stages.reached.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            raise ValueError("cleanup failed") from None
        raise AssertionError("unreachable")

    h.registry.add_pre_execute(pre)
    stages.body()

    result = await stages.run_and_cancel()

    assert error("ValueError", "PRE_EXECUTE_FAILED", "cleanup failed") == result
    assert [] == stages.calls


async def test_the_gate_listener_is_removed_after_the_gate(h: Harness) -> None:
    seen: list[int] = []

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        seen.append(h.signal.statistics().listeners)
        return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        seen.append(h.signal.statistics().listeners)
        return "done"

    h.registry.add_pre_execute(pre)
    h.registry.register(define_tool(body, name=TOOL))

    await h.execute()

    assert [1, 1, 0] == [*seen, h.signal.statistics().listeners]


# --------------------------------------------------------------------------------------
# Around-execute wrappers observe exec.signal cooperatively


async def test_cancel_while_a_wrapper_waits_before_call_next_aborts_before_dispatch(
    h: Harness,
) -> None:
    stages = Stages(h)

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        with execution.signal.open_scope():
            stages.reached.set()
            await trio.sleep_forever()
        return await call_next()

    h.registry.add_around_execute(wrapper)
    stages.body()

    result = await stages.run_and_cancel()

    assert aborted_before_dispatch() == result
    assert ["post"] == stages.calls


async def test_a_wrapper_supplying_an_already_cancelled_signal_never_invokes_the_body(
    h: Harness,
) -> None:
    stages = Stages(h)
    gone = CancelSource()
    gone.cancel("sandbox gone")

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        execution.signal = gone.signal
        return await call_next()

    h.registry.add_around_execute(wrapper)
    stages.body()

    result = await h.execute()

    assert aborted_before_dispatch() == result
    assert ["post"] == stages.calls
    assert not h.signal.cancelled


@pytest.mark.parametrize("shielded", [False, True])
async def test_a_wrapper_success_overtaken_by_caller_cancellation_aborts_before_dispatch(
    h: Harness, shielded: bool
) -> None:
    stages = Stages(h)
    release = trio.Event()

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        stages.reached.set()
        if shielded:
            with trio.CancelScope(shield=True):  # a cache lookup that ignores the caller
                await release.wait()
        else:
            await h.signal.wait_cancelled()
        return ok("cached", contexts=[note("wrapper")], halt=Halt("cache"))

    h.registry.add_around_execute(wrapper)
    stages.body()

    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await stages.reached.wait()
        h.source.cancel()
        release.set()

    expected = aborted_before_dispatch(contexts=[note("wrapper")], halt=Halt("cache"))
    assert expected == pending.result
    assert ["post"] == stages.calls


async def test_cancel_after_the_body_returned_while_the_wrapper_waits_is_aborted(
    h: Harness,
) -> None:
    stages = Stages(h)

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        result = await call_next()
        with execution.signal.open_scope():
            stages.reached.set()
            await trio.sleep_forever()
        return attrs.evolve(
            result, additional_contexts=(*result.additional_contexts, note("wrapper"))
        )

    h.registry.add_around_execute(wrapper)
    stages.body()

    result = await stages.run_and_cancel()

    assert aborted(contexts=[note("body"), note("wrapper")]) == result
    assert ["body", "post"] == stages.calls


async def test_cancel_while_post_execute_waits_is_aborted(h: Harness) -> None:
    stages = Stages(h)

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        with execution.signal.open_scope():
            stages.reached.set()
            await trio.sleep_forever()
        return Accept(additional_contexts=[note("post")])

    h.registry.add_post_execute(post)
    stages.body()

    result = await stages.run_and_cancel()

    assert aborted(contexts=[note("body"), note("post")]) == result


async def test_cancel_while_post_execute_waits_on_an_error_keeps_the_error(h: Harness) -> None:
    stages = Stages(h)

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        with execution.signal.open_scope():
            stages.reached.set()
            await trio.sleep_forever()
        return await call_next()

    h.registry.add_post_execute(post)

    assert unknown_tool("nope") == await stages.run_and_cancel(name="nope")


# --------------------------------------------------------------------------------------
# Fusion of the caller's and the wrapper's signals (§4.5)


async def test_body_signal_fuses_caller_and_wrapper_replacement(h: Harness) -> None:
    stages = Stages(h)
    replacement = CancelSource()
    signals: dict[str, CancelSignal] = {}

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        execution.signal = replacement.signal
        return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        signals["body"] = ctx.signal
        stages.reached.set()
        await trio.sleep_forever()
        return "unreachable"

    h.registry.add_around_execute(wrapper)
    stages.body(body)

    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await stages.reached.wait()
        fused = signals["body"]
        assert fused is not h.signal
        assert fused is not replacement.signal
        assert not fused.cancelled
        h.source.cancel("user pressed stop")
        # Propagation is synchronous: the fused signal fired with the caller's reason.
        assert CancelReason("CANCELLED", "user pressed stop") == fused.reason

    assert aborted() == pending.result
    assert not replacement.signal.cancelled
    assert 0 == replacement.signal.statistics().listeners
    assert 0 == h.signal.statistics().listeners


async def test_the_wrappers_replacement_firing_aborts_the_body_but_not_the_caller(
    h: Harness,
) -> None:
    stages = Stages(h)
    replacement = CancelSource()
    signals: list[CancelSignal] = []

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        execution.signal = replacement.signal
        return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        signals.append(ctx.signal)
        stages.reached.set()
        await trio.sleep_forever()
        return "unreachable"

    h.registry.add_around_execute(wrapper)
    stages.body(body)

    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await stages.reached.wait()
        replacement.cancel("narrowed", code="NARROW")

    assert aborted() == pending.result
    assert CancelReason("NARROW", "narrowed") == signals[0].reason
    assert not h.signal.cancelled
    assert 0 == h.signal.statistics().listeners


async def test_a_signal_derived_from_the_callers_is_the_bodys_own_and_follows_the_caller(
    h: Harness,
) -> None:
    """Fusing a signal that already follows the caller's would add nothing: the body gets
    it as it is, it fires with the caller's reason, and no listener is left behind."""
    stages = Stages(h)
    signals: dict[str, CancelSignal] = {}

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        async with open_signal(execution.signal, timeout=60) as narrowed:
            execution.signal = signals["narrowed"] = narrowed
            return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        signals["body"] = ctx.signal
        stages.reached.set()
        await trio.sleep_forever()
        return "unreachable"

    h.registry.add_around_execute(wrapper)
    stages.body(body)

    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await stages.reached.wait()
        assert signals["body"] is signals["narrowed"]
        assert 1 == h.signal.statistics().listeners  # the narrowed signal's link only
        h.source.cancel("user pressed stop")
        assert CancelReason("CANCELLED", "user pressed stop") == signals["body"].reason

    assert aborted() == pending.result
    assert 0 == h.signal.statistics().listeners
    assert 0 == signals["narrowed"].statistics().listeners


async def test_a_derived_signal_already_detached_from_the_caller_is_still_fused(
    h: Harness,
) -> None:
    """A wrapper that hands on a derived signal after leaving its ``open_signal`` block
    (so it no longer follows the caller) cannot detach the body from the caller."""
    stages = Stages(h)
    signals: dict[str, CancelSignal] = {}

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        async with open_signal(execution.signal) as detached:
            pass
        execution.signal = signals["detached"] = detached
        return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        signals["body"] = ctx.signal
        stages.reached.set()
        await trio.sleep_forever()
        return "unreachable"

    h.registry.add_around_execute(wrapper)
    stages.body(body)

    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await stages.reached.wait()
        assert signals["body"] is not signals["detached"]
        h.source.cancel("user pressed stop")
        assert CancelReason("CANCELLED", "user pressed stop") == signals["body"].reason

    assert aborted() == pending.result
    assert not signals["detached"].cancelled
    assert 0 == h.signal.statistics().listeners
    assert 0 == signals["detached"].statistics().listeners


@pytest.mark.parametrize("with_wrapper", [False, True])
async def test_the_body_sees_the_callers_signal_when_no_wrapper_replaced_it(
    h: Harness, with_wrapper: bool
) -> None:
    signals: list[CancelSignal] = []

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        signals.append(ctx.signal)
        return "done"

    if with_wrapper:
        h.registry.add_around_execute(wrapper)
    h.registry.register(define_tool(body, name=TOOL))

    await h.execute()

    assert signals[0] is h.signal


async def test_dispatch_signal_is_restored_after_call_next_and_after_the_chain(
    h: Harness,
) -> None:
    outer_signal, inner_signal = CancelSource(), CancelSource()
    seen: list[tuple[str, CancelSignal]] = []
    views: list[ToolDispatchExecution] = []

    async def outer(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        views.append(execution)
        seen.append(("outer before", execution.signal))
        execution.signal = outer_signal.signal
        result = await call_next()
        seen.append(("outer after", execution.signal))
        return result

    async def inner(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        seen.append(("inner before", execution.signal))
        execution.signal = inner_signal.signal
        result = await call_next()
        seen.append(("inner after", execution.signal))
        execution.signal = outer_signal.signal  # left behind: the registry restores anyway
        return result

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        seen.append(("post", execution.signal))
        seen.append(("view during post", views[0].signal))
        return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        return "done"

    h.registry.add_around_execute(outer)
    h.registry.add_around_execute(inner)
    h.registry.add_post_execute(post)
    h.registry.register(define_tool(body, name=TOOL))

    await h.execute()

    assert [
        ("outer before", h.signal),
        ("inner before", outer_signal.signal),
        ("inner after", inner_signal.signal),
        ("outer after", outer_signal.signal),
        ("post", h.signal),
        ("view during post", h.signal),
    ] == seen
    assert views[0].signal is h.signal
    assert h.executions[0].signal is h.signal


async def test_dispatch_signal_is_restored_when_a_wrapper_raises(h: Harness) -> None:
    views: list[ToolDispatchExecution] = []

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        views.append(execution)
        execution.signal = CancelSource().signal
        raise ValueError("broken")

    h.registry.add_around_execute(wrapper)
    h.registry.register(define_tool(_done, name=TOOL))

    assert error("ValueError", "WRAPPER_FAILED", "broken") == await h.execute()
    assert views[0].signal is h.signal


async def _done(args: object, ctx: ToolRunContext) -> str:
    return "done"


async def test_a_wrapper_narrowing_with_open_signal_fuses_and_detaches(
    h: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    signals: list[CancelSignal] = []

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        async with open_signal(execution.signal, timeout=3, code="NARROW") as narrowed:
            execution.signal = narrowed
            signals.append(narrowed)
            return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        signals.append(ctx.signal)
        await trio.sleep_forever()
        return "unreachable"

    h.registry.add_around_execute(wrapper)
    h.registry.register(define_tool(body, name=TOOL))

    result = await h.execute()

    assert aborted() == result
    narrowed, fused = signals
    assert CancelReason("NARROW", "deadline exceeded after 3s") == fused.reason
    assert fused.reason == narrowed.reason
    assert 3 == trio.current_time()
    assert 0 == h.signal.statistics().listeners


# --------------------------------------------------------------------------------------
# The body: invoked classification and quiescence


async def test_body_returning_after_the_fused_signal_fired_is_aborted(h: Harness) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(note("body"))
        h.source.cancel()
        return "done anyway"

    h.registry.register(define_tool(body, name=TOOL))

    assert aborted(contexts=[note("body")]) == await h.execute()


async def test_a_cooperative_body_interrupted_by_cancel_is_aborted(h: Harness) -> None:
    stages = Stages(h)

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(note("body"))
        stages.reached.set()
        await trio.sleep_forever()
        return "unreachable"

    stages.body(body)

    assert aborted(contexts=[note("body")]) == await stages.run_and_cancel()
    assert ["body", "post"] == stages.calls


async def test_a_body_raising_in_reaction_to_cancellation_is_a_tool_failure(h: Harness) -> None:
    stages = Stages(h)

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(note("body"))
        stages.reached.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            raise OSError("rollback failed") from None
        return "unreachable"

    stages.body(body)

    result = await stages.run_and_cancel()

    assert error("OSError", "TOOL_FAILED", "rollback failed", contexts=[note("body")]) == result


async def test_an_uncooperative_body_keeps_execute_pending_until_it_returns(h: Harness) -> None:
    stages = Stages(h)
    release = trio.Event()

    async def body(args: object, ctx: ToolRunContext) -> str:
        stages.reached.set()
        with trio.CancelScope(shield=True):  # deliberately ignores the call's cancellation
            await release.wait()
        return "finished anyway"

    stages.body(body)

    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await stages.reached.wait()
        h.source.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert not pending.done
        assert [] == h.published
        release.set()

    assert aborted() == pending.result


async def test_uncooperative_started_work_keeps_execute_pending(h: Harness) -> None:
    stages = Stages(h)
    release = trio.Event()
    finished: list[str] = []

    async def work() -> None:
        with trio.CancelScope(shield=True):  # deliberately ignores the call's cancellation
            await release.wait()
        finished.append("work")

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.start_soon(work)
        stages.reached.set()
        await trio.sleep_forever()
        return "unreachable"

    stages.body(body)

    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await stages.reached.wait()
        h.source.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert not pending.done
        release.set()

    assert aborted() == pending.result
    assert ["work"] == finished


async def test_contexts_deferred_by_the_body_survive_cancellation_with_halt(
    h: Harness,
) -> None:
    stages = Stages(h)

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(note("body"))
        ctx.halt_turn("enough")
        ctx.conclude_turn()
        stages.reached.set()
        await trio.sleep_forever()
        return "unreachable"

    stages.body(body)

    expected = aborted(contexts=[note("body")], halt=Halt("enough"))
    assert expected == await stages.run_and_cancel()


# --------------------------------------------------------------------------------------
# Precedence: only a non-error result is replaced by cancellation


async def _cancel_then_raise_in_pre(h: Harness) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        h.source.cancel()
        raise ValueError("boom")

    h.registry.add_pre_execute(pre)


async def _cancel_then_raise_in_wrapper(h: Harness) -> None:
    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        await call_next()
        h.source.cancel()
        raise ValueError("boom")

    h.registry.add_around_execute(wrapper)


async def _cancel_then_raise_in_body(h: Harness) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        h.source.cancel()
        raise ValueError("boom")

    h.registry.add_around_execute(_passthrough)
    h.registry.register(define_tool(body, name="failing"))


async def _cancel_then_raise_in_post(h: Harness) -> None:
    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        h.source.cancel()
        raise ValueError("boom")

    h.registry.add_post_execute(post)


async def _passthrough(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
    return await call_next()


@pytest.mark.parametrize(
    ("install", "name", "code"),
    [
        (_cancel_then_raise_in_pre, TOOL, "PRE_EXECUTE_FAILED"),
        (_cancel_then_raise_in_wrapper, TOOL, "WRAPPER_FAILED"),
        (_cancel_then_raise_in_body, "failing", "TOOL_FAILED"),
        (_cancel_then_raise_in_post, TOOL, "POST_EXECUTE_FAILED"),
    ],
)
async def test_a_stage_failure_beats_cancellation(
    h: Harness, install: Callable[[Harness], Awaitable[None]], name: str, code: str
) -> None:
    await install(h)
    h.registry.register(define_tool(_done, name=TOOL))

    assert error("ValueError", code, "boom") == await h.execute(name)


async def test_a_denial_beats_cancellation(h: Harness) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        h.source.cancel()
        return Deny("no")

    h.registry.add_pre_execute(pre)
    h.registry.register(define_tool(_done, name=TOOL))

    assert denied("no") == await h.execute()


async def test_a_block_beats_cancellation(h: Harness) -> None:
    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        h.source.cancel()
        return Block("no")

    h.registry.add_post_execute(post)
    h.registry.register(define_tool(_done, name=TOOL))

    expected = ToolResult(
        content=(TextBlock("no"),),
        is_error=True,
        error=ErrorInfo("ToolBlockedError", "BLOCKED", "no"),
    )
    assert expected == await h.execute()


async def test_an_error_made_by_a_wrapper_beats_cancellation(h: Harness) -> None:
    made = error("QuotaError", "QUOTA", "quota exhausted")

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        await call_next()
        h.source.cancel()
        return made

    h.registry.add_around_execute(wrapper)
    h.registry.register(define_tool(_done, name=TOOL))

    assert made == await h.execute()


async def test_a_success_made_by_post_execute_is_replaced_by_cancellation(h: Harness) -> None:
    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        h.source.cancel()
        return Accept(content=[TextBlock("rewritten")], additional_contexts=[note("post")])

    h.registry.add_post_execute(post)
    h.registry.register(define_tool(_done, name=TOOL))

    assert aborted(contexts=[note("post")]) == await h.execute()


# --------------------------------------------------------------------------------------
# Ambient cancellation and other BaseExceptions propagate after publication


async def test_ambient_cancellation_during_the_body_publishes_aborted_then_reraises(
    h: Harness,
) -> None:
    returned: list[ToolResult] = []

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(note("body"))
        scope.cancel()
        await trio.sleep_forever()
        return "unreachable"

    h.registry.register(define_tool(body, name=TOOL))

    with trio.CancelScope() as scope:
        returned.append(await h.registry.execute(h.input()))

    assert scope.cancelled_caught
    assert [] == returned
    assert [aborted(contexts=[note("body")])] == h.published
    assert not h.signal.cancelled


@pytest.mark.parametrize("first", ["body", "child"])
async def test_a_failure_under_ambient_cancellation_is_tool_failed_in_either_order(
    h: Harness, first: str
) -> None:
    """An enclosing scope cancels the body and its ``start_soon`` child; the child raises
    while cleaning up.  Whichever of the two Trio finishes first, the real failure is the
    call's result: ``TOOL_FAILED``, returned (no exception group escapes ``execute``)."""
    body_done = trio.Event()
    child_failed = trio.Event()

    async def child() -> None:
        try:
            await trio.sleep_forever()
        finally:
            if first == "body":
                with trio.CancelScope(shield=True):  # clean-up that outlasts the body
                    await body_done.wait()
            child_failed.set()
            raise ValueError("boom in clean-up")

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.start_soon(child)
        try:
            await trio.sleep_forever()
        finally:
            if first == "child":
                with trio.CancelScope(shield=True):  # clean-up that outlasts the child
                    await child_failed.wait()
            body_done.set()
        return "unreachable"

    h.registry.register(define_tool(body, name=TOOL))
    returned: list[ToolResult] = []
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                returned.append(await h.registry.execute(h.input()))

            nursery.start_soon(call)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()

    assert [error("ValueError", "TOOL_FAILED", "boom in clean-up")] == returned
    assert returned == h.published
    assert returned[0] is h.published[0]


async def test_ambient_cancellation_during_a_pre_hook_publishes_before_dispatch_then_reraises(
    h: Harness,
) -> None:
    returned: list[ToolResult] = []

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        scope.cancel()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    h.registry.add_pre_execute(pre)
    h.registry.register(define_tool(_done, name=TOOL))

    with trio.CancelScope() as scope:
        returned.append(await h.registry.execute(h.input()))

    assert scope.cancelled_caught
    assert [] == returned
    assert [aborted_before_dispatch()] == h.published


async def test_ambient_cancellation_while_post_execute_waits_publishes_aborted(
    h: Harness,
) -> None:
    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        scope.cancel()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    h.registry.add_post_execute(post)
    h.registry.register(define_tool(_done, name=TOOL))

    with trio.CancelScope() as scope:
        await h.registry.execute(h.input())

    assert scope.cancelled_caught
    assert [aborted()] == h.published


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [({}, aborted_before_dispatch()), ({"s": {1}}, not_json_arguments())],
    ids=["json", "not-json"],
)
async def test_execute_in_an_already_cancelled_scope_publishes_then_raises(
    h: Harness, arguments: object, expected: ToolResult
) -> None:
    h.registry.register(define_tool(_done, name=TOOL))

    with trio.CancelScope() as scope:
        scope.cancel()
        await h.registry.execute(h.input(arguments=arguments))

    assert scope.cancelled_caught
    assert [expected] == h.published


async def test_observers_run_shielded_when_the_callers_scope_was_cancelled(
    h: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    recorded: list[ToolResult] = []

    async def slow_observer(execution: ToolExecution, result: ToolResult) -> None:
        await trio.sleep(1)
        recorded.append(result)

    async def body(args: object, ctx: ToolRunContext) -> str:
        scope.cancel()
        await trio.sleep_forever()
        return "unreachable"

    h.registry.add_observer(slow_observer)
    h.registry.register(define_tool(body, name=TOOL))

    with trio.CancelScope() as scope:
        await h.registry.execute(h.input())

    assert [aborted()] == recorded
    assert 1 == trio.current_time()


async def test_observers_run_shielded_when_the_caller_signal_fired(
    h: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    recorded: list[ToolResult] = []

    async def slow_observer(execution: ToolExecution, result: ToolResult) -> None:
        await trio.sleep(1)
        recorded.append(result)

    h.registry.add_observer(slow_observer)
    h.registry.register(define_tool(_done, name=TOOL))
    h.source.cancel()

    result = await h.execute()

    assert [result] == recorded


async def test_keyboard_interrupt_in_the_body_propagates_after_publishing_aborted(
    h: Harness,
) -> None:
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(note("body"))
        raise KeyboardInterrupt

    h.registry.register(define_tool(body, name=TOOL))

    with pytest.raises(KeyboardInterrupt):
        await h.registry.execute(h.input())

    assert [aborted(contexts=[note("body")])] == h.published


async def test_a_base_exception_in_started_work_propagates_after_publishing_aborted(
    h: Harness,
) -> None:
    async def work() -> None:
        raise Fatal

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.start_soon(work)
        await trio.sleep_forever()
        return "unreachable"

    h.registry.register(define_tool(body, name=TOOL))

    with pytest.raises(Fatal):
        await h.registry.execute(h.input())

    assert [aborted()] == h.published


async def test_a_base_exception_in_a_pre_hook_propagates_after_publishing_before_dispatch(
    h: Harness,
) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        raise KeyboardInterrupt

    h.registry.add_pre_execute(pre)
    h.registry.register(define_tool(_done, name=TOOL))

    with pytest.raises(KeyboardInterrupt):
        await h.registry.execute(h.input())

    assert [aborted_before_dispatch()] == h.published


async def test_a_base_exception_in_post_execute_propagates_after_publishing_aborted(
    h: Harness,
) -> None:
    finalized: list[ToolResult] = []

    async def post(execution: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        raise Fatal

    h.registry.add_post_execute(post)
    h.registry.register(
        define_tool(_done, name=TOOL, finalize_content=lambda e, r: finalized.append(r))
    )

    with pytest.raises(Fatal):
        await h.registry.execute(h.input())

    assert [aborted()] == h.published
    assert [aborted()] == finalized


# --------------------------------------------------------------------------------------
# Listener hygiene: many calls sharing one long-lived signal (§1)

CALLS = 10_000


async def _run_many(h: Harness) -> None:
    for index in range(CALLS):
        await h.registry.execute(h.input(call_id=str(index)))


async def test_many_calls_without_wrappers_leave_no_listeners(h: Harness) -> None:
    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return await call_next()

    h.registry.add_pre_execute(pre)
    h.registry.register(define_tool(_done, name=TOOL))
    before = h.signal.statistics().listeners

    await _run_many(h)

    assert before == h.signal.statistics().listeners
    assert [ok("done")] * CALLS == h.published


async def test_many_calls_with_a_narrowing_wrapper_leave_no_listeners(h: Harness) -> None:
    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        async with open_signal(execution.signal) as narrowed:
            execution.signal = narrowed
            return await call_next()

    h.registry.add_around_execute(wrapper)
    h.registry.register(define_tool(_done, name=TOOL))
    before = h.signal.statistics().listeners

    await _run_many(h)

    assert before == h.signal.statistics().listeners
    assert [ok("done")] * CALLS == h.published


async def test_many_calls_whose_child_signals_are_cancelled_leave_no_listeners(
    h: Harness,
) -> None:
    children: dict[str, CancelSource] = {}

    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        child = children[execution.call_id] = CancelSource()
        async with open_signal(execution.signal, child.signal) as narrowed:
            execution.signal = narrowed
            return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        children.pop(ctx.call_id).cancel()
        await trio.lowlevel.checkpoint()
        return "unreachable"

    h.registry.add_around_execute(wrapper)
    h.registry.register(define_tool(body, name=TOOL))
    before = h.signal.statistics().listeners

    await _run_many(h)

    assert before == h.signal.statistics().listeners
    assert [aborted()] * CALLS == h.published


async def test_many_calls_cancelled_by_a_deadline_leave_no_listeners(
    h: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        async with open_signal(execution.signal, timeout=1) as narrowed:
            execution.signal = narrowed
            return await call_next()

    async def body(args: object, ctx: ToolRunContext) -> str:
        await trio.sleep(2)
        return "unreachable"

    h.registry.add_around_execute(wrapper)
    h.registry.register(define_tool(body, name=TOOL))
    before = h.signal.statistics().listeners

    for index in range(CALLS // 10):
        await h.registry.execute(h.input(call_id=str(index)))

    assert before == h.signal.statistics().listeners
    assert [aborted()] * (CALLS // 10) == h.published


async def test_a_logged_listener_failure_does_not_break_the_call(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    stages = Stages(h)

    def broken(reason: CancelReason) -> None:
        raise RuntimeError("listener broke")

    async def body(args: object, ctx: ToolRunContext) -> str:
        stages.reached.set()
        await trio.sleep_forever()
        return "unreachable"

    stages.body(body)
    dispose = h.signal.add_listener(broken)

    with caplog.at_level(logging.ERROR, logger="trio_tools"):
        result = await stages.run_and_cancel()

    dispose()
    assert aborted() == result


# --------------------------------------------------------------------------------------
# Nurseries inside stages, lexical scopes in wrappers, BaseExceptions from finalize


async def test_cancel_during_a_pre_hook_waiting_in_its_own_nursery_aborts_before_dispatch(
    h: Harness,
) -> None:
    stages = Stages(h)

    async def pre(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            stages.reached.set()
            await trio.sleep_forever()
        raise AssertionError("unreachable")

    h.registry.add_pre_execute(pre)
    stages.body()

    assert aborted_before_dispatch() == await stages.run_and_cancel()
    assert ["post"] == stages.calls


async def test_a_wrapper_may_bound_the_body_with_a_lexical_trio_scope(
    h: Harness, autojump_clock: trio.testing.MockClock
) -> None:
    async def wrapper(execution: ToolDispatchExecution, call_next: AroundNext) -> ToolResult:
        with trio.move_on_after(2):
            return await call_next()
        return ok("gave up after 2s", contexts=[note("wrapper")])

    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.defer_context(note("body"))
        await trio.sleep_forever()
        return "unreachable"

    h.registry.add_around_execute(wrapper)
    h.registry.register(define_tool(body, name=TOOL))

    result = await h.execute()

    assert ok("gave up after 2s", contexts=[note("body"), note("wrapper")]) == result
    assert 2 == trio.current_time()
    assert 0 == h.signal.statistics().listeners


def _register_fatal_finalize(h: Harness) -> list[ToolResult]:
    """Register the tool with a finalize_content that raises ``Fatal``; return what it saw."""
    calls: list[ToolResult] = []

    def finalize(execution: ToolExecution, result: ToolResult) -> None:
        calls.append(result)
        raise Fatal

    h.registry.register(define_tool(_done, name=TOOL, finalize_content=finalize))
    return calls


async def test_a_base_exception_from_finalize_content_propagates_after_publication(
    h: Harness,
) -> None:
    calls = _register_fatal_finalize(h)

    with pytest.raises(Fatal):
        await h.registry.execute(h.input())

    assert [ok("done")] == calls
    assert [aborted()] == h.published


async def test_a_base_exception_from_finalize_content_under_ambient_cancellation_still_publishes(
    h: Harness,
) -> None:
    # The call is already on its way out (an enclosing scope was cancelled while a
    # pre-execute hook waited) when finalize_content raises: the call still gets its one
    # result, without finalize_content's say, published before that exception propagates.
    calls = _register_fatal_finalize(h)
    finished: list[ToolResult] = []

    class Recorder:
        def call_started(self, execution: ToolExecution) -> None:
            pass

        def call_finished(self, execution: ToolExecution, result: ToolResult) -> None:
            finished.append(result)

    async def waits(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    h.registry.add_pre_execute(waits)
    h.registry.add_instrument(Recorder())

    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(Fatal) as raised:
            await h.registry.execute(h.input())
        assert isinstance(raised.value.__context__, trio.Cancelled)

    assert [aborted_before_dispatch()] == calls
    assert [aborted_before_dispatch()] == h.published
    assert h.published == finished
    assert 0 == h.signal.statistics().listeners


async def test_a_base_exception_from_finalize_content_after_an_interrupt_still_publishes(
    h: Harness,
) -> None:
    # A KeyboardInterrupt-like exception from a guard, then finalize_content raising too:
    # one result published, and the later exception propagates (the first as its context).
    calls = _register_fatal_finalize(h)

    def interrupts(execution: ToolExecution) -> str | None:
        raise KeyboardInterrupt

    h.registry.add_guard(interrupts)

    with pytest.raises(Fatal) as raised:
        await h.registry.execute(h.input())

    assert isinstance(raised.value.__context__, KeyboardInterrupt)
    assert [aborted_before_dispatch()] == calls
    assert [aborted_before_dispatch()] == h.published


async def test_a_base_exception_from_finalize_content_keeps_the_entrys_decision_published(
    h: Harness,
) -> None:
    # Arguments that are not JSON, an enclosing scope already cancelled: the NOT_JSON result
    # decided at entry is published even though finalize_content raises on it.
    calls = _register_fatal_finalize(h)

    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(Fatal):
            await h.registry.execute(h.input(arguments={"path": {1, 2}}))

    assert [not_json_arguments()] == calls
    assert [not_json_arguments()] == h.published
