"""The gate's cancel scope, entered only once a step waits, behaves as one entered first.

The gate (pre-execute hooks, guards, the approver) runs as under
``with caller_signal.open_scope():``.  The registry enters that scope when a step first
suspends, placed below any scopes the step entered before it (``with trio.fail_after``,
a nursery, a shield); every test here runs both that way and with the scope entered before
the steps start (what a Trio without the internals the placement needs gets), and expects
the same outcome from both.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing
from helpers_registry import (
    TOOL,
    Harness,
    PreNext,
    aborted_before_dispatch,
    error,
    ok,
)

import trio_tools._lazy_scope as lazy_scope
from trio_tools import (
    ApprovalAnswer,
    ApprovalRequest,
    Ask,
    CancelSource,
    PreDecision,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolRunContext,
    define_tool,
)

Hook = Callable[[ToolExecution, PreNext], Awaitable[PreDecision]]


class GateHarness(Harness):
    """A harness whose tool records each run of its body."""

    def __init__(self) -> None:
        super().__init__()
        self.body_runs: list[str] = []

        async def body(args: object, ctx: ToolRunContext) -> str:
            self.body_runs.append("body")
            return "done"

        self.registry.register(define_tool(body, name=TOOL))


@pytest.fixture(params=[True, False], ids=["scope entered at the first wait", "scope first"])
def h(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> GateHarness:
    if request.param:
        assert lazy_scope.LAZY, "this Trio lacks the internals the lazy scope needs"
    monkeypatch.setattr(lazy_scope, "LAZY", request.param)
    return GateHarness()


async def cancel_once_blocked(h: GateHarness) -> None:
    await trio.testing.wait_all_tasks_blocked()
    h.source.cancel("stop")


async def run_cancelled(h: GateHarness, hook: Hook) -> Any:
    """Execute with ``hook`` as the one pre-execute hook; cancel once everything blocks."""
    h.registry.add_pre_execute(hook)
    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await cancel_once_blocked(h)
    assert pending.done
    return pending.result


async def test_a_hook_waiting_at_its_first_checkpoint_is_interrupted(h: GateHarness) -> None:
    seen: list[str] = []

    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            seen.append("cancelled")
            raise
        raise AssertionError("unreachable")

    assert aborted_before_dispatch() == await run_cancelled(h, hook)
    assert ["cancelled"] == seen
    assert [] == h.body_runs
    assert 0 == h.signal.statistics().listeners


async def test_a_hook_waiting_inside_its_own_scope_is_interrupted_through_it(
    h: GateHarness,
) -> None:
    scopes: list[trio.CancelScope] = []

    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        with trio.fail_after(3600) as scope:  # would raise TooSlowError had it caught it
            scopes.append(scope)
            with trio.CancelScope():
                await trio.sleep_forever()
        raise AssertionError("unreachable")

    assert aborted_before_dispatch() == await run_cancelled(h, hook)
    assert not scopes[0].cancelled_caught
    assert not scopes[0].cancel_called
    assert [] == h.body_runs


async def test_a_hook_whose_own_scope_fires_first_goes_on(
    h: GateHarness, autojump_clock: trio.testing.MockClock
) -> None:
    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        with trio.move_on_after(1) as scope:
            await trio.sleep_forever()
        assert scope.cancelled_caught
        await trio.sleep(1)  # a checkpoint under the gate's scope again, not cancelled
        return await call_next()

    h.registry.add_pre_execute(hook)
    assert ok("done") == await h.execute()
    assert ["body"] == h.body_runs
    assert 0 == h.signal.statistics().listeners


async def test_a_hook_that_waits_in_its_own_scope_and_allows_dispatches(h: GateHarness) -> None:
    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        with trio.CancelScope():
            await trio.lowlevel.checkpoint()
            assert 1 == execution.signal.statistics().listeners
        await trio.lowlevel.checkpoint()
        return await call_next()

    h.registry.add_pre_execute(hook)
    assert ok("done") == await h.execute()
    assert ["body"] == h.body_runs
    # Cancelling now reaches nothing left over from the gate.
    assert 0 == h.signal.statistics().listeners
    h.source.cancel("late")


async def test_the_children_of_a_hooks_nursery_hear_the_signal(h: GateHarness) -> None:
    seen: list[str] = []

    async def child() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            seen.append("child cancelled")
            raise

    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
        raise AssertionError("unreachable")

    assert aborted_before_dispatch() == await run_cancelled(h, hook)
    assert ["child cancelled"] == seen


async def test_a_hooks_nursery_parent_waiting_in_it_is_interrupted(h: GateHarness) -> None:
    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            await trio.sleep_forever()
        raise AssertionError("unreachable")

    assert aborted_before_dispatch() == await run_cancelled(h, hook)


async def test_a_shield_in_a_hook_holds_until_it_ends(h: GateHarness) -> None:
    release = trio.Event()
    seen: list[str] = []

    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        with trio.CancelScope(shield=True):
            await release.wait()
            seen.append("shielded wait done")
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled:
            seen.append("cancelled after the shield")
            raise
        return await call_next()

    h.registry.add_pre_execute(hook)
    async with trio.open_nursery() as nursery:
        pending = h.start_execute(nursery)
        await cancel_once_blocked(h)
        await trio.testing.wait_all_tasks_blocked()
        assert not pending.done
        release.set()
    assert aborted_before_dispatch() == pending.result
    assert ["shielded wait done", "cancelled after the shield"] == seen


async def test_a_signal_fired_by_a_hook_interrupts_its_next_checkpoint(h: GateHarness) -> None:
    seen: list[str] = []

    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        h.source.cancel("from the hook")
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled:
            seen.append("cancelled")
            raise
        raise AssertionError("unreachable")

    h.registry.add_pre_execute(hook)
    assert aborted_before_dispatch() == await h.execute()
    assert ["cancelled"] == seen


async def test_a_signal_fired_by_a_hook_that_allows_aborts_before_dispatch(h: GateHarness) -> None:
    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        h.source.cancel("from the hook")
        return await call_next()

    h.registry.add_pre_execute(hook)
    assert aborted_before_dispatch() == await h.execute()
    assert [] == h.body_runs


async def test_a_hook_failing_after_firing_the_signal_is_a_failure(h: GateHarness) -> None:
    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        h.source.cancel("from the hook")
        raise ValueError("broken")

    h.registry.add_pre_execute(hook)
    assert error("ValueError", "PRE_EXECUTE_FAILED", "broken") == await h.execute()


async def test_a_hook_failing_in_its_cleanup_is_a_failure(h: GateHarness) -> None:
    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        with trio.fail_after(3600):
            try:
                await trio.sleep_forever()
            finally:
                raise ValueError("cleanup failed")
        raise AssertionError("unreachable")

    assert error("ValueError", "PRE_EXECUTE_FAILED", "cleanup failed") == await run_cancelled(
        h, hook
    )


async def test_the_listener_is_attached_for_the_whole_gate(h: GateHarness) -> None:
    seen: list[int] = []

    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        seen.append(h.signal.statistics().listeners)  # before any checkpoint
        with trio.CancelScope():
            await trio.lowlevel.checkpoint()
            seen.append(h.signal.statistics().listeners)
        return await call_next()

    h.registry.add_pre_execute(hook)
    assert ok("done") == await h.execute()
    assert [1, 1, 0] == [*seen, h.signal.statistics().listeners]


async def test_a_second_hook_waiting_in_its_scope_is_interrupted(h: GateHarness) -> None:
    order: list[str] = []

    async def first(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        order.append("first")
        async with trio.open_nursery():
            return await call_next()

    async def second(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        order.append("second")
        with trio.move_on_after(3600):
            await trio.sleep_forever()
        raise AssertionError("unreachable")

    h.registry.add_pre_execute(first)
    assert aborted_before_dispatch() == await run_cancelled(h, second)
    assert ["first", "second"] == order


async def test_an_approver_waiting_in_its_own_scope_is_interrupted(h: GateHarness) -> None:
    async def approver(request: ApprovalRequest) -> ApprovalAnswer:
        with trio.fail_after(3600):
            await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def ask(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        return Ask("check")

    h.registry.set_approver(approver)
    assert aborted_before_dispatch() == await run_cancelled(h, ask)
    assert [] == h.body_runs


async def test_ambient_cancellation_of_a_hook_in_its_scope_is_raised(h: GateHarness) -> None:
    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        with trio.fail_after(3600):
            await trio.sleep_forever()
        raise AssertionError("unreachable")

    h.registry.add_pre_execute(hook)
    with trio.CancelScope() as outer:
        async with trio.open_nursery() as nursery:
            h.start_execute(nursery)
            await trio.testing.wait_all_tasks_blocked()
            outer.cancel()
    assert outer.cancelled_caught
    assert [aborted_before_dispatch()] == h.published
    assert not h.signal.cancelled
    assert 0 == h.signal.statistics().listeners


def test_this_trio_gets_the_lazy_scope() -> None:
    """The project's pinned Trio has what the placement needs: the fast path is taken."""
    assert lazy_scope.LAZY


def interrupted_in_main_task(hook: Hook) -> list[str | None]:
    """Execute one call gated by ``hook`` in ``trio.run``'s main task (where Trio delivers
    ``KeyboardInterrupt``), expecting it to end in ``KeyboardInterrupt``; return the codes
    published."""
    registry = ToolRegistry()
    published: list[str | None] = []
    registry.add_observer(lambda execution, result: published.append(result.code))

    async def body(args: object, ctx: ToolRunContext) -> str:
        return "done"

    registry.register(define_tool(body, name=TOOL))
    registry.add_pre_execute(hook)

    async def main() -> None:
        await registry.execute(
            ToolExecutionInput(call_id="c", name=TOOL, arguments={}, signal=CancelSource().signal)
        )

    with pytest.raises(KeyboardInterrupt):
        trio.run(main)
    return published


@pytest.mark.parametrize("where", ["status", "splice"])
def test_ctrl_c_as_a_waiting_gate_takes_its_scope_is_delivered_at_the_wait(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGINT that Trio turns into ``KeyboardInterrupt`` arriving while the registry
    places the gate's scope (after the hook suspended, before Trio parks the task) must not
    strand the hook's own scopes: it is delivered at the hook's wait, the call publishes
    ``ABORTED_BEFORE_DISPATCH`` and the ``KeyboardInterrupt`` leaves ``trio.run`` alone."""
    real = getattr(lazy_scope, "_splice" if where == "splice" else "status")
    raised: list[str] = []

    def interrupting(*args: Any) -> Any:
        if not raised:
            raised.append("SIGINT")
            signal.raise_signal(signal.SIGINT)
        return real(*args)

    monkeypatch.setattr(lazy_scope, "_splice" if where == "splice" else "status", interrupting)
    seen: list[str] = []

    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        with trio.fail_after(3600):
            try:
                await trio.sleep(1)
            except KeyboardInterrupt:
                seen.append("interrupted at the wait")
                raise
        return await call_next()

    assert ["ABORTED_BEFORE_DISPATCH"] == interrupted_in_main_task(hook)
    assert ["SIGINT"] == raised
    assert ["interrupted at the wait"] == seen


@pytest.mark.parametrize("waits_first", [False, True], ids=["at once", "after a wait"])
def test_a_hook_is_not_protected_from_ctrl_c(waits_first: bool) -> None:
    """The gate's own bookkeeping defers Trio's ``KeyboardInterrupt`` to the next
    checkpoint; a hook's code does not: it is interrupted where it runs, as before."""
    seen: list[str] = []

    async def hook(execution: ToolExecution, call_next: PreNext) -> PreDecision:
        if waits_first:
            with trio.fail_after(3600):
                await trio.lowlevel.checkpoint()
        assert not trio.lowlevel.currently_ki_protected()
        try:
            signal.raise_signal(signal.SIGINT)
            seen.extend("still running" for _ in range(3))
        except KeyboardInterrupt:
            seen.append("interrupted in the hook")
            raise
        return await call_next()

    assert ["ABORTED_BEFORE_DISPATCH"] == interrupted_in_main_task(hook)
    assert ["interrupted in the hook"] == seen
