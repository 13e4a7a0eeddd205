"""Cancellation signals (DESIGN.md §1): CancelSource, CancelSignal and open_signal."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from trio_tools import CancelReason, CancelSignal, CancelSource, open_signal


class _Fatal(BaseException):
    """A non-``Exception`` error, standing in for ``KeyboardInterrupt`` or ``SystemExit``."""


def _listeners(signal: CancelSignal) -> int:
    return signal.statistics().listeners


# --------------------------------------------------------------------------------------
# CancelReason


def test_cancel_reason_is_a_frozen_value_compared_by_its_fields() -> None:
    reason = CancelReason("CANCELLED", "stop")

    assert CancelReason("CANCELLED", "stop") == reason
    assert hash(CancelReason("CANCELLED", "stop")) == hash(reason)
    assert CancelReason("CANCELLED", "other") != reason
    assert CancelReason(code="CANCELLED", message="stop") == reason
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        reason.code = "OTHER"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("code", "message"),
    [(1, "message"), ("CODE", None), (b"CODE", "message"), ("CODE", b"message")],
)
def test_cancel_reason_rejects_non_str_fields(code: object, message: object) -> None:
    with pytest.raises(TypeError):
        CancelReason(code, message)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# CancelSource


def test_source_signal_is_always_the_same_object() -> None:
    source = CancelSource()

    assert source.signal is source.signal


def test_new_source_is_not_cancelled_and_has_no_listeners() -> None:
    signal = CancelSource().signal

    assert signal.cancelled is False
    assert signal.reason is None
    assert signal.statistics().cancelled is False
    assert 0 == _listeners(signal)


def test_cancel_without_reason_gives_message_cancelled_and_code_cancelled() -> None:
    source = CancelSource()

    source.cancel()

    assert source.signal.cancelled is True
    assert CancelReason("CANCELLED", "cancelled") == source.signal.reason
    assert source.signal.statistics().cancelled is True


def test_cancel_with_a_reason_and_a_custom_code() -> None:
    source = CancelSource()

    source.cancel("user pressed stop", code="USER_ABORT")

    assert CancelReason("USER_ABORT", "user pressed stop") == source.signal.reason


def test_cancel_with_an_empty_reason_keeps_the_empty_message() -> None:
    source = CancelSource()

    source.cancel("")

    assert CancelReason("CANCELLED", "") == source.signal.reason


def test_cancel_is_idempotent_and_the_first_reason_wins() -> None:
    source = CancelSource()
    calls: list[CancelReason] = []
    source.signal.add_listener(calls.append)

    source.cancel("first", code="FIRST")
    source.cancel("second", code="SECOND")
    source.cancel()

    assert CancelReason("FIRST", "first") == source.signal.reason
    assert [CancelReason("FIRST", "first")] == calls


@pytest.mark.parametrize("reason", [42, b"bytes", CancelReason("CANCELLED", "x")])
def test_cancel_rejects_a_non_str_reason_and_does_not_fire(reason: object) -> None:
    source = CancelSource()

    with pytest.raises(TypeError):
        source.cancel(reason)  # type: ignore[arg-type]

    assert source.signal.cancelled is False
    assert source.signal.reason is None


@pytest.mark.parametrize("code", [None, 7, b"CODE"])
def test_cancel_rejects_a_non_str_code_and_does_not_fire(code: object) -> None:
    source = CancelSource()

    with pytest.raises(TypeError):
        source.cancel("stop", code=code)  # type: ignore[arg-type]

    assert source.signal.cancelled is False


def test_cancel_rejects_a_non_str_reason_even_after_the_source_fired() -> None:
    source = CancelSource()
    source.cancel("stop")

    with pytest.raises(TypeError):
        source.cancel(42)  # type: ignore[arg-type]


def test_cancel_signal_cannot_be_constructed_directly() -> None:
    with pytest.raises(TypeError):
        CancelSignal()
    with pytest.raises(TypeError):
        CancelSignal(CancelSource())  # type: ignore[call-arg]


def test_cancel_signal_has_no_public_mutating_method() -> None:
    public = {name for name in dir(CancelSource().signal) if not name.startswith("_")}

    assert {
        "cancelled",
        "reason",
        "add_listener",
        "wait_cancelled",
        "open_scope",
        "statistics",
    } == public


def test_signal_attributes_cannot_be_assigned() -> None:
    signal = CancelSource().signal

    with pytest.raises(AttributeError):
        signal.cancelled = True  # type: ignore[misc]
    with pytest.raises(AttributeError):
        signal.reason = CancelReason("CANCELLED", "forged")  # type: ignore[misc]
    with pytest.raises(AttributeError):
        signal.cancel = lambda: None  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        signal.anything = 1  # type: ignore[attr-defined]
    assert signal.cancelled is False


def test_source_attributes_cannot_be_assigned() -> None:
    source = CancelSource()
    other = CancelSource().signal

    with pytest.raises(AttributeError):
        source.signal = other  # type: ignore[misc]
    with pytest.raises(AttributeError):
        source.anything = 1  # type: ignore[attr-defined]
    assert source.signal is not other


def test_statistics_is_a_frozen_record() -> None:
    stats = CancelSource().signal.statistics()

    with pytest.raises(AttributeError):
        stats.listeners = 5  # type: ignore[misc]
    assert 0 == stats.listeners


def test_reprs_mention_trio_tools() -> None:
    source = CancelSource()

    assert "trio_tools.CancelSignal" in repr(source.signal)
    assert "trio_tools.CancelSource" in repr(source)
    source.cancel("stop")
    assert "trio_tools.CancelSignal" in repr(source.signal)
    assert "trio_tools.CancelSource" in repr(source)


# --------------------------------------------------------------------------------------
# add_listener


def test_listener_fires_once_synchronously_with_the_reason() -> None:
    source = CancelSource()
    calls: list[CancelReason] = []
    source.signal.add_listener(calls.append)

    assert [] == calls
    source.cancel("stop", code="STOP")
    assert [CancelReason("STOP", "stop")] == calls
    source.cancel("again")
    assert [CancelReason("STOP", "stop")] == calls


def test_listener_added_after_firing_runs_immediately() -> None:
    source = CancelSource()
    source.cancel("stop")
    calls: list[CancelReason] = []

    dispose = source.signal.add_listener(calls.append)

    assert [CancelReason("CANCELLED", "stop")] == calls
    assert 0 == _listeners(source.signal)
    dispose()
    dispose()
    assert [CancelReason("CANCELLED", "stop")] == calls


def test_every_listener_runs_once_when_the_signal_fires() -> None:
    source = CancelSource()
    calls: list[tuple[str, CancelReason]] = []

    def record(name: str) -> Callable[[CancelReason], None]:
        return lambda reason: calls.append((name, reason))

    for name in ("a", "b", "c"):
        source.signal.add_listener(record(name))

    source.cancel("stop")

    reason = CancelReason("CANCELLED", "stop")
    assert [("a", reason), ("b", reason), ("c", reason)] == sorted(calls)


def test_the_same_function_added_twice_runs_twice() -> None:
    source = CancelSource()
    calls: list[CancelReason] = []
    source.signal.add_listener(calls.append)
    source.signal.add_listener(calls.append)

    source.cancel()

    assert [CancelReason("CANCELLED", "cancelled")] * 2 == calls


def test_disposer_removes_the_listener_and_is_idempotent() -> None:
    source = CancelSource()
    calls: list[CancelReason] = []
    dispose = source.signal.add_listener(calls.append)

    dispose()
    dispose()
    source.cancel()
    dispose()

    assert [] == calls
    assert 0 == _listeners(source.signal)


def test_disposer_only_removes_its_own_listener() -> None:
    source = CancelSource()
    calls: list[str] = []
    dispose_a = source.signal.add_listener(lambda _r: calls.append("a"))
    source.signal.add_listener(lambda _r: calls.append("b"))

    dispose_a()
    dispose_a()

    assert 1 == _listeners(source.signal)
    source.cancel()
    assert ["b"] == calls


def test_disposer_after_firing_is_a_no_op() -> None:
    source = CancelSource()
    calls: list[CancelReason] = []
    dispose = source.signal.add_listener(calls.append)
    source.cancel()

    dispose()
    dispose()

    assert [CancelReason("CANCELLED", "cancelled")] == calls
    assert 0 == _listeners(source.signal)


def test_statistics_counts_attached_listeners() -> None:
    source = CancelSource()
    signal = source.signal
    assert 0 == _listeners(signal)

    dispose_a = signal.add_listener(lambda _r: None)
    dispose_b = signal.add_listener(lambda _r: None)
    assert 2 == _listeners(signal)

    dispose_a()
    assert 1 == _listeners(signal)
    dispose_a()
    assert 1 == _listeners(signal)

    signal.add_listener(lambda _r: None)
    assert 2 == _listeners(signal)

    source.cancel()
    assert 0 == _listeners(signal)
    dispose_b()
    assert 0 == _listeners(signal)


def test_raising_listener_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="trio_tools")
    source = CancelSource()
    calls: list[str] = []
    boom = ZeroDivisionError("listener bug")

    def raising(_reason: CancelReason) -> None:
        calls.append("raising")
        raise boom

    source.signal.add_listener(lambda _r: calls.append("before"))
    source.signal.add_listener(raising)
    source.signal.add_listener(lambda _r: calls.append("after"))

    source.cancel("stop")  # does not raise

    assert ["after", "before", "raising"] == sorted(calls)
    assert CancelReason("CANCELLED", "stop") == source.signal.reason
    assert 0 == _listeners(source.signal)
    records = [r for r in caplog.records if r.name == "trio_tools"]
    assert 1 == len(records)
    assert logging.ERROR == records[0].levelno
    assert records[0].exc_info is not None
    assert boom is records[0].exc_info[1]


def test_raising_listener_added_after_firing_is_logged_and_add_listener_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="trio_tools")
    source = CancelSource()
    source.cancel()
    boom = RuntimeError("late listener bug")

    def raising(_reason: CancelReason) -> None:
        raise boom

    dispose = source.signal.add_listener(raising)
    dispose()

    records = [r for r in caplog.records if r.name == "trio_tools"]
    assert 1 == len(records)
    assert records[0].exc_info is not None
    assert boom is records[0].exc_info[1]


def test_listener_raising_a_base_exception_does_not_stop_the_others() -> None:
    source = CancelSource()
    calls: list[str] = []

    def fatal(_reason: CancelReason) -> None:
        raise _Fatal

    source.signal.add_listener(fatal)
    source.signal.add_listener(lambda _r: calls.append("after"))

    with pytest.raises(_Fatal):
        source.cancel()

    assert ["after"] == calls
    assert 0 == _listeners(source.signal)


def test_listener_disposing_a_later_listener_during_firing_prevents_it_from_running() -> None:
    source = CancelSource()
    calls: list[str] = []
    disposers: dict[str, Callable[[], None]] = {}

    def first(_reason: CancelReason) -> None:
        calls.append("first")
        disposers["second"]()

    disposers["first"] = source.signal.add_listener(first)
    disposers["second"] = source.signal.add_listener(lambda _r: calls.append("second"))
    disposers["third"] = source.signal.add_listener(lambda _r: calls.append("third"))

    source.cancel()

    assert ["first", "third"] == calls
    assert 0 == _listeners(source.signal)


def test_listener_adding_a_listener_during_firing_runs_it_immediately() -> None:
    source = CancelSource()
    calls: list[tuple[str, CancelReason]] = []

    def first(reason: CancelReason) -> None:
        calls.append(("first", reason))
        source.signal.add_listener(lambda r: calls.append(("nested", r)))

    source.signal.add_listener(first)
    source.cancel("stop")

    reason = CancelReason("CANCELLED", "stop")
    assert [("first", reason), ("nested", reason)] == calls
    assert 0 == _listeners(source.signal)


def test_listener_cancelling_again_during_firing_changes_nothing() -> None:
    source = CancelSource()
    calls: list[CancelReason] = []
    source.signal.add_listener(lambda _r: source.cancel("re-entrant", code="AGAIN"))
    source.signal.add_listener(calls.append)

    source.cancel("stop")

    assert [CancelReason("CANCELLED", "stop")] == calls
    assert CancelReason("CANCELLED", "stop") == source.signal.reason


def test_listener_sees_the_signal_already_cancelled() -> None:
    source = CancelSource()
    seen: list[tuple[bool, CancelReason | None]] = []
    source.signal.add_listener(
        lambda _r: seen.append((source.signal.cancelled, source.signal.reason))
    )

    source.cancel("stop")

    assert [(True, CancelReason("CANCELLED", "stop"))] == seen


# --------------------------------------------------------------------------------------
# wait_cancelled


async def test_wait_cancelled_wakes_when_the_signal_fires(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = CancelSource()
    woke_at: list[float] = []

    async def waiter() -> None:
        await source.signal.wait_cancelled()
        woke_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert 1 == _listeners(source.signal)
        assert [] == woke_at
        await trio.sleep(3)
        source.cancel("stop")

    assert [3.0] == woke_at
    assert 0 == _listeners(source.signal)


async def test_wait_cancelled_wakes_every_waiter() -> None:
    source = CancelSource()
    woke: list[int] = []

    async def waiter(i: int) -> None:
        await source.signal.wait_cancelled()
        woke.append(i)

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(waiter, i)
        await trio.testing.wait_all_tasks_blocked()
        assert 3 == _listeners(source.signal)
        source.cancel()

    assert [0, 1, 2] == sorted(woke)
    assert 0 == _listeners(source.signal)


async def test_wait_cancelled_on_a_fired_signal_still_checkpoints() -> None:
    source = CancelSource()
    source.cancel()

    with trio.testing.assert_checkpoints():
        await source.signal.wait_cancelled()

    assert 0 == _listeners(source.signal)


async def test_wait_cancelled_on_a_fired_signal_raises_cancelled_in_a_cancelled_scope() -> None:
    source = CancelSource()
    source.cancel()

    with trio.CancelScope() as scope:
        scope.cancel()
        await source.signal.wait_cancelled()
        pytest.fail("wait_cancelled() should have been a cancel point")  # pragma: no cover

    assert scope.cancelled_caught


async def test_wait_cancelled_on_an_active_signal_checkpoints() -> None:
    source = CancelSource()

    async def cancel_soon() -> None:
        await trio.testing.wait_all_tasks_blocked()
        source.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_soon)
        with trio.testing.assert_checkpoints():
            await source.signal.wait_cancelled()


async def test_wait_cancelled_removes_its_listener_when_cancelled_by_an_outer_scope(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = CancelSource()

    with trio.move_on_after(5) as scope:
        await source.signal.wait_cancelled()

    assert scope.cancelled_caught
    assert source.signal.cancelled is False
    assert 0 == _listeners(source.signal)


async def test_wait_cancelled_in_an_already_cancelled_scope_leaves_no_listener() -> None:
    source = CancelSource()

    with trio.CancelScope() as scope:
        scope.cancel()
        await source.signal.wait_cancelled()

    assert scope.cancelled_caught
    assert 0 == _listeners(source.signal)


# --------------------------------------------------------------------------------------
# open_scope


async def test_open_scope_is_cancelled_when_the_signal_fires(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = CancelSource()
    after: list[float] = []

    async def worker() -> None:
        with source.signal.open_scope() as scope:
            assert scope.cancel_called is False
            await trio.sleep_forever()
        assert scope.cancelled_caught
        after.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker)
        await trio.sleep(2)
        source.cancel("stop")

    assert [2.0] == after


async def test_open_scope_is_cancelled_synchronously_when_the_signal_fires() -> None:
    source = CancelSource()

    with source.signal.open_scope() as scope:
        source.cancel("stop")
        assert scope.cancel_called is True
        await trio.lowlevel.checkpoint()
        pytest.fail("the checkpoint should have raised Cancelled")  # pragma: no cover

    assert scope.cancelled_caught
    assert 0 == _listeners(source.signal)


async def test_open_scope_passes_code_and_message_as_the_trio_cancel_reason() -> None:
    # trio.CancelScope has no public accessor for its cancel reason; trio.Cancelled.reason
    # is the public place where it shows.
    source = CancelSource()
    seen: list[str | None] = []

    with source.signal.open_scope() as scope:
        source.cancel("user pressed stop", code="USER_ABORT")
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as exc:
            seen.append(exc.reason)
            raise

    assert scope.cancelled_caught
    assert ["USER_ABORT: user pressed stop"] == seen


async def test_open_scope_reason_for_a_default_cancel() -> None:
    source = CancelSource()
    seen: list[str | None] = []

    with source.signal.open_scope():
        source.cancel()
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as exc:
            seen.append(exc.reason)
            raise

    assert ["CANCELLED: cancelled"] == seen


async def test_open_scope_on_a_fired_signal_is_cancelled_on_entry_with_the_reason() -> None:
    source = CancelSource()
    source.cancel("earlier", code="EARLY")
    seen: list[str | None] = []

    with source.signal.open_scope() as scope:
        assert scope.cancel_called is True
        assert 0 == _listeners(source.signal)
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as exc:
            seen.append(exc.reason)
            raise

    assert scope.cancelled_caught
    assert ["EARLY: earlier"] == seen
    assert 0 == _listeners(source.signal)


async def test_open_scope_gives_a_fresh_scope_each_time() -> None:
    signal = CancelSource().signal

    with signal.open_scope() as first:
        pass
    with signal.open_scope() as second:
        pass

    assert first is not second


async def test_open_scope_listener_is_removed_on_normal_exit() -> None:
    source = CancelSource()

    with source.signal.open_scope() as scope:
        assert 1 == _listeners(source.signal)
        await trio.lowlevel.checkpoint()

    assert 0 == _listeners(source.signal)
    assert scope.cancelled_caught is False
    source.cancel()
    assert scope.cancel_called is False


async def test_open_scope_listener_is_removed_when_the_block_raises() -> None:
    source = CancelSource()

    async def fail_in_scope() -> None:
        with source.signal.open_scope():
            await trio.lowlevel.checkpoint()
            raise KeyError("boom")

    with pytest.raises(KeyError):
        await fail_in_scope()

    assert 0 == _listeners(source.signal)


async def test_open_scope_listener_is_removed_when_an_outer_scope_cancels() -> None:
    source = CancelSource()

    with trio.CancelScope() as outer, source.signal.open_scope() as inner:
        outer.cancel()
        await trio.lowlevel.checkpoint()

    assert outer.cancelled_caught is True
    # The bound scope catches only its own cancellation, never the outer scope's.
    assert inner.cancelled_caught is False
    assert 0 == _listeners(source.signal)


async def test_open_scope_listener_is_removed_when_the_signal_cancels_it() -> None:
    source = CancelSource()

    with source.signal.open_scope() as scope:
        source.cancel()
        await trio.lowlevel.checkpoint()

    assert scope.cancelled_caught
    assert 0 == _listeners(source.signal)


async def test_nested_open_scopes_on_one_signal_are_all_cancelled() -> None:
    source = CancelSource()

    with source.signal.open_scope() as outer:
        with source.signal.open_scope() as inner:
            assert 2 == _listeners(source.signal)
            source.cancel()
            await trio.lowlevel.checkpoint()
        # The innermost scope caught it; the outer one is cancelled too.
        assert inner.cancelled_caught
        assert outer.cancel_called
        await trio.lowlevel.checkpoint()

    assert outer.cancelled_caught
    assert 0 == _listeners(source.signal)


async def test_reentering_an_open_scope_manager_fails_without_leaking_a_listener() -> None:
    source = CancelSource()
    manager = source.signal.open_scope()
    with manager:
        pass

    with pytest.raises(RuntimeError), manager:
        pass  # pragma: no cover

    assert 0 == _listeners(source.signal)


# --------------------------------------------------------------------------------------
# Cancelling from another thread


async def test_cancel_from_a_worker_thread_fires_the_signal_and_a_bound_scope() -> None:
    source = CancelSource()

    async def cancel_from_thread() -> None:
        await trio.testing.wait_all_tasks_blocked()
        await trio.to_thread.run_sync(
            lambda: trio.from_thread.run_sync(source.cancel, "from thread")
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_from_thread)
        with source.signal.open_scope() as scope:
            await trio.sleep_forever()

    assert scope.cancelled_caught
    assert CancelReason("CANCELLED", "from thread") == source.signal.reason
    assert 0 == _listeners(source.signal)


# --------------------------------------------------------------------------------------
# open_signal: parents


async def test_open_signal_fires_on_the_first_parent_with_its_reason() -> None:
    a, b = CancelSource(), CancelSource()

    async with open_signal(a.signal, b.signal) as derived:
        assert derived.cancelled is False
        assert 1 == _listeners(a.signal)
        assert 1 == _listeners(b.signal)
        b.cancel("b stopped", code="B")
        assert CancelReason("B", "b stopped") == derived.reason
        assert 0 == _listeners(a.signal)
        a.cancel("a stopped", code="A")
        assert CancelReason("B", "b stopped") == derived.reason

    assert 0 == _listeners(a.signal)
    assert 0 == _listeners(b.signal)


async def test_open_signal_parent_propagation_is_synchronous() -> None:
    parent = CancelSource()
    calls: list[CancelReason] = []

    async with open_signal(parent.signal) as derived:
        derived.add_listener(calls.append)
        with derived.open_scope() as scope:
            parent.cancel("stop")
            # No checkpoint between the parent firing and these checks.
            assert derived.cancelled is True
            assert [CancelReason("CANCELLED", "stop")] == calls
            assert scope.cancel_called is True
            await trio.lowlevel.checkpoint()

    assert scope.cancelled_caught


async def test_open_signal_derived_signal_is_a_cancel_signal_not_the_parent() -> None:
    parent = CancelSource()

    async with open_signal(parent.signal) as derived:
        assert isinstance(derived, CancelSignal)
        assert derived is not parent.signal


async def test_open_signal_with_an_already_cancelled_parent_is_cancelled_on_entry() -> None:
    a, b = CancelSource(), CancelSource()
    b.cancel("b stopped", code="B")

    async with open_signal(a.signal, b.signal) as derived:
        assert CancelReason("B", "b stopped") == derived.reason
        assert 0 == _listeners(a.signal)

    assert 0 == _listeners(a.signal)


async def test_open_signal_with_several_cancelled_parents_takes_the_first_in_order() -> None:
    a, b = CancelSource(), CancelSource()
    b.cancel("b stopped", code="B")
    a.cancel("a stopped", code="A")

    async with open_signal(b.signal, a.signal) as derived:
        assert CancelReason("B", "b stopped") == derived.reason


async def test_open_signal_cancelled_parent_at_entry_wins_over_timeout_zero() -> None:
    parent = CancelSource()
    parent.cancel("stop")

    async with open_signal(parent.signal, timeout=0) as derived:
        assert CancelReason("CANCELLED", "stop") == derived.reason


async def test_open_signal_with_the_same_parent_twice() -> None:
    parent = CancelSource()

    async with open_signal(parent.signal, parent.signal) as derived:
        parent.cancel("stop")
        assert CancelReason("CANCELLED", "stop") == derived.reason

    assert 0 == _listeners(parent.signal)


async def test_open_signal_without_parents_or_deadline_never_fires(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_signal() as derived:
        await trio.sleep(3600)
        assert derived.cancelled is False

    assert derived.cancelled is False


async def test_nested_open_signal_chains_propagate_synchronously() -> None:
    root = CancelSource()

    async with (
        open_signal(root.signal) as first,
        open_signal(first) as second,
        open_signal(second) as third,
    ):
        root.cancel("root stopped", code="ROOT")
        expected = CancelReason("ROOT", "root stopped")
        assert [expected, expected, expected] == [first.reason, second.reason, third.reason]

    assert 0 == _listeners(root.signal)


async def test_inner_deadline_in_a_chain_does_not_fire_the_outer_signals(
    autojump_clock: trio.testing.MockClock,
) -> None:
    root = CancelSource()

    async with open_signal(root.signal) as outer:
        async with open_signal(outer, timeout=1) as inner:
            await inner.wait_cancelled()
        assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded after 1s") == inner.reason
        assert outer.cancelled is False
        assert 0 == _listeners(outer)

    assert root.signal.cancelled is False
    assert 0 == _listeners(root.signal)


# --------------------------------------------------------------------------------------
# open_signal: deadlines


async def test_open_signal_timeout_fires_at_exactly_the_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    fired_at: list[float] = []

    async with open_signal(timeout=2) as derived:
        derived.add_listener(lambda _r: fired_at.append(trio.current_time()))
        await trio.sleep(1.999)
        assert derived.cancelled is False
        await derived.wait_cancelled()
        assert start + 2 == trio.current_time()

    assert [start + 2] == fired_at
    assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded after 2s") == derived.reason


async def test_open_signal_timeout_cancels_a_bound_scope_at_the_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    parent = CancelSource()
    start = trio.current_time()
    seen: list[str | None] = []

    async with open_signal(parent.signal, timeout=2.5) as derived:
        with derived.open_scope() as scope:
            try:
                await trio.sleep_forever()
            except trio.Cancelled as exc:
                seen.append(exc.reason)
                raise

    assert scope.cancelled_caught
    assert start + 2.5 == trio.current_time()
    assert ["DEADLINE_EXCEEDED: deadline exceeded after 2.5s"] == seen
    assert parent.signal.cancelled is False
    assert 0 == _listeners(parent.signal)


async def test_open_signal_timeout_with_a_custom_code(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_signal(timeout=0.25, code="TOOL_TIMEOUT") as derived:
        await derived.wait_cancelled()

    assert CancelReason("TOOL_TIMEOUT", "deadline exceeded after 0.25s") == derived.reason


async def test_open_signal_deadline_only_gives_deadline_exceeded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    deadline = trio.current_time() + 3

    async with open_signal(deadline=deadline) as derived:
        await derived.wait_cancelled()
        assert deadline == trio.current_time()

    assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded") == derived.reason


async def test_open_signal_deadline_only_with_a_custom_code(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_signal(deadline=trio.current_time() + 1, code="LATE") as derived:
        await derived.wait_cancelled()

    assert CancelReason("LATE", "deadline exceeded") == derived.reason


async def test_open_signal_with_a_passed_deadline_is_cancelled_on_entry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    await trio.sleep(10)

    async with open_signal(deadline=trio.current_time() - 1) as derived:
        assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded") == derived.reason


async def test_open_signal_earlier_deadline_wins_over_a_later_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()

    async with open_signal(timeout=5, deadline=start + 3) as derived:
        await derived.wait_cancelled()
        assert start + 3 == trio.current_time()

    assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded") == derived.reason


async def test_open_signal_earlier_timeout_wins_over_a_later_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()

    async with open_signal(timeout=2, deadline=start + 3) as derived:
        await derived.wait_cancelled()
        assert start + 2 == trio.current_time()

    assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded after 2s") == derived.reason


async def test_open_signal_timeout_and_deadline_at_the_same_instant_report_the_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Documented in open_signal's docstring: on a tie, the ``timeout`` message.
    start = trio.current_time()

    async with open_signal(timeout=2, deadline=start + 2) as derived:
        await derived.wait_cancelled()
        assert start + 2 == trio.current_time()

    assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded after 2s") == derived.reason


async def test_open_signal_timeout_is_measured_from_entry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    manager = open_signal(timeout=2)
    await trio.sleep(5)
    entered = trio.current_time()

    async with manager as derived:
        assert derived.cancelled is False
        await trio.sleep(1.5)
        assert derived.cancelled is False
        await derived.wait_cancelled()
        assert entered + 2 == trio.current_time()


async def test_open_signal_timeout_zero_fires_on_entry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()

    async with open_signal(timeout=0) as derived:
        assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded after 0s") == derived.reason
        assert start == trio.current_time()


async def test_open_signal_timeout_fires_before_a_later_parent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    parent = CancelSource()

    async with trio.open_nursery() as nursery:

        async def cancel_parent_later() -> None:
            await trio.sleep(3)
            parent.cancel("too late")

        nursery.start_soon(cancel_parent_later)
        async with open_signal(parent.signal, timeout=1) as derived:
            await derived.wait_cancelled()
            assert 0 == _listeners(parent.signal)

    assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded after 1s") == derived.reason


async def test_open_signal_parent_fires_before_a_later_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    parent = CancelSource()
    start = trio.current_time()

    async with open_signal(parent.signal, timeout=5) as derived:
        await trio.sleep(2)
        parent.cancel("early")
        assert CancelReason("CANCELLED", "early") == derived.reason
        await trio.sleep(10)
        assert CancelReason("CANCELLED", "early") == derived.reason

    assert start + 12 == trio.current_time()


async def test_open_signal_with_a_timeout_and_no_parents(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()

    async with open_signal(timeout=7) as derived:
        with derived.open_scope() as scope:
            await trio.sleep_forever()

    assert scope.cancelled_caught
    assert start + 7 == trio.current_time()
    assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded after 7s") == derived.reason


async def test_open_signal_infinite_deadline_never_fires(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_signal(deadline=math.inf) as derived:
        await trio.sleep(3600)
        assert derived.cancelled is False


async def test_many_concurrent_timeouts_each_fire_at_their_own_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    fired: dict[int, float] = {}

    async def timed(seconds: int) -> None:
        async with open_signal(timeout=seconds) as derived:
            await derived.wait_cancelled()
            fired[seconds] = trio.current_time() - start

    async with trio.open_nursery() as nursery:
        for seconds in (5, 1, 4, 2, 3, 1):
            nursery.start_soon(timed, seconds)

    assert {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0, 5: 5.0} == fired


# --------------------------------------------------------------------------------------
# open_signal: leaving the block


async def test_leaving_open_signal_does_not_fire_it_and_detaches_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a, b = CancelSource(), CancelSource()
    calls: list[CancelReason] = []

    async with open_signal(a.signal, b.signal, timeout=2) as derived:
        derived.add_listener(calls.append)
        assert 1 == _listeners(a.signal)
        assert 1 == _listeners(b.signal)

    assert derived.cancelled is False
    assert 0 == _listeners(a.signal)
    assert 0 == _listeners(b.signal)

    await trio.sleep(10)  # past the deadline: the timer was stopped
    a.cancel()
    b.cancel()

    assert derived.cancelled is False
    assert derived.reason is None
    assert [] == calls


async def test_leaving_open_signal_with_a_deadline_stops_the_timer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()

    async with open_signal(deadline=start + 1) as derived:
        pass

    await trio.sleep(5)
    assert derived.cancelled is False


async def test_open_signal_exceptions_from_the_block_propagate_unwrapped() -> None:
    parent = CancelSource()
    error = KeyError("boom")

    with pytest.raises(KeyError) as info:
        async with open_signal(parent.signal, timeout=10):
            raise error

    assert error is info.value
    assert 0 == _listeners(parent.signal)


async def test_open_signal_exception_after_the_derived_signal_fired_propagates_unwrapped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    error = ValueError("boom")

    async def fail_after_the_deadline() -> None:
        async with open_signal(timeout=1) as derived:
            await derived.wait_cancelled()
            raise error

    with pytest.raises(ValueError, match="boom") as info:
        await fail_after_the_deadline()

    assert error is info.value


async def test_open_signal_does_not_swallow_an_outer_cancellation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    parent = CancelSource()

    with trio.move_on_after(1) as outer:
        async with open_signal(parent.signal, timeout=5) as derived:
            await trio.sleep_forever()

    assert outer.cancelled_caught
    assert derived.cancelled is False
    assert 0 == _listeners(parent.signal)


async def test_open_signal_manager_is_single_use() -> None:
    manager = open_signal()
    async with manager:
        pass

    with pytest.raises(RuntimeError):
        async with manager:
            pass  # pragma: no cover


# --------------------------------------------------------------------------------------
# open_signal: argument validation


@pytest.mark.parametrize(
    ("bad_timeout", "bad_deadline"),
    [
        (-1, None),
        (-0.001, None),
        (-math.inf, None),
        (math.nan, None),
        (None, math.nan),
        (1, math.nan),
    ],
)
async def test_open_signal_rejects_bad_numbers_with_value_error(
    bad_timeout: float | None, bad_deadline: float | None
) -> None:
    # Raising when open_signal() is called or when the block is entered are both fine.
    with pytest.raises(ValueError, match=r"timeout|deadline"):
        async with open_signal(timeout=bad_timeout, deadline=bad_deadline):
            pass  # pragma: no cover


@pytest.mark.parametrize(
    "parent",
    [None, "signal", CancelSource(), CancelReason("CANCELLED", "x")],
    ids=["None", "str", "CancelSource", "CancelReason"],
)
async def test_open_signal_rejects_a_non_signal_parent(parent: object) -> None:
    good = CancelSource()

    # Raising when open_signal() is called or when the block is entered are both fine.
    with pytest.raises(TypeError):
        async with open_signal(good.signal, parent):  # type: ignore[arg-type]
            pass  # pragma: no cover

    assert 0 == _listeners(good.signal)


@pytest.mark.parametrize(
    "kwargs",
    [{"timeout": "1"}, {"timeout": True}, {"deadline": "1"}, {"code": 1}, {"code": None}],
)
async def test_open_signal_rejects_wrong_types(kwargs: dict[str, object]) -> None:
    # Raising when open_signal() is called or when the block is entered are both fine.
    with pytest.raises(TypeError):
        async with open_signal(**kwargs):  # type: ignore[arg-type]
            pass  # pragma: no cover


# --------------------------------------------------------------------------------------
# open_signal: a parent firing at the deadline's instant


async def test_parent_firing_at_the_deadline_instant_before_the_timer_reports_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    parent = CancelSource()
    start = trio.current_time()

    async with open_signal(parent.signal, deadline=start + 2) as derived:
        # jump() moves the clock without a checkpoint, so the timer has no chance to run
        # before the parent fires at the deadline's instant.
        autojump_clock.jump(2)
        assert start + 2 == trio.current_time()
        parent.cancel("parent stopped")
        assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded") == derived.reason

    assert 0 == _listeners(parent.signal)


async def test_parent_firing_after_an_unserviced_deadline_reports_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    parent = CancelSource()

    async with open_signal(parent.signal, timeout=2) as derived:
        autojump_clock.jump(3)
        parent.cancel("parent stopped")
        assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded after 2s") == derived.reason


async def test_parent_firing_at_the_deadline_instant_after_the_timer_keeps_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    parent = CancelSource()

    async with open_signal(parent.signal, timeout=2) as derived:
        autojump_clock.jump(2)
        await trio.testing.wait_all_tasks_blocked()  # lets the timer fire first
        assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded after 2s") == derived.reason
        parent.cancel("parent stopped")
        assert CancelReason("DEADLINE_EXCEEDED", "deadline exceeded after 2s") == derived.reason


def _race_parent_against_deadline(canceller_first: bool) -> CancelReason | None:
    """One Trio run where a task cancels the parent at the very instant the deadline passes."""
    parent = CancelSource()
    reasons: list[CancelReason | None] = []

    async def main() -> None:
        deadline = trio.current_time() + 2

        async def canceller() -> None:
            await trio.sleep_until(deadline)
            parent.cancel("parent stopped", code="PARENT")

        async with trio.open_nursery() as nursery:
            if canceller_first:
                nursery.start_soon(canceller)
            async with open_signal(parent.signal, timeout=2, code="TIMEOUT") as derived:
                if not canceller_first:
                    nursery.start_soon(canceller)
                await derived.wait_cancelled()
                assert deadline == trio.current_time()
        reasons.append(derived.reason)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return reasons[0]


@settings(max_examples=50, derandomize=True, deadline=None, database=None)
@given(seed=st.random_module(), canceller_first=st.booleans())
def test_parent_and_deadline_at_the_same_instant_always_report_the_deadline(
    seed: object, canceller_first: bool
) -> None:
    # st.random_module() reseeds Trio's scheduler (registered with Hypothesis), so across the
    # examples the canceller runs both before and after the timer at the shared instant.
    reason = _race_parent_against_deadline(canceller_first)

    assert CancelReason("TIMEOUT", "deadline exceeded after 2s") == reason


# --------------------------------------------------------------------------------------
# Listener hygiene on a long-lived signal


async def test_ten_thousand_open_scopes_leave_no_listener_behind() -> None:
    long_lived = CancelSource()
    signal = long_lived.signal
    signal.add_listener(lambda _r: None)
    before = _listeners(signal)

    for i in range(10_000):
        kind = i % 4
        if kind == 0:
            with signal.open_scope():
                pass
        elif kind == 1:
            with pytest.raises(KeyError), signal.open_scope():
                raise KeyError(i)
        elif kind == 2:
            with trio.CancelScope() as outer, signal.open_scope():
                outer.cancel()
                await trio.lowlevel.checkpoint()
        else:
            other = CancelSource()
            async with open_signal(signal, other.signal) as derived:
                with derived.open_scope() as scope, signal.open_scope():
                    other.cancel()
                    await trio.lowlevel.checkpoint()
                assert scope.cancelled_caught

    assert before == _listeners(signal)
    assert signal.cancelled is False


async def test_ten_thousand_open_signals_leave_no_listener_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    long_lived = CancelSource()
    signal = long_lived.signal
    signal.add_listener(lambda _r: None)
    before = _listeners(signal)

    for i in range(10_000):
        kind = i % 5
        if kind == 0:
            async with open_signal(signal) as derived:
                pass
            assert derived.cancelled is False
        elif kind == 1:
            async with open_signal(signal, timeout=1) as derived:
                pass
            assert derived.cancelled is False
        elif kind == 2:
            async with open_signal(signal, timeout=0) as derived:
                assert derived.cancelled
        elif kind == 3:
            async with open_signal(signal, timeout=0.5) as derived:
                await derived.wait_cancelled()
        else:
            other = CancelSource()
            async with open_signal(signal, other.signal, timeout=1) as derived:
                other.cancel()
                assert derived.cancelled
            assert 0 == _listeners(other.signal)

    assert before == _listeners(signal)
    assert signal.cancelled is False
    # The stopped timers are gone too: a long wait fires nothing and the signal stays quiet.
    await trio.sleep(100)
    assert before == _listeners(signal)


# --------------------------------------------------------------------------------------
# Model-based checks


class CancelSourceMachine(RuleBasedStateMachine):
    """Drive a source and its listeners; compare with a small pure model."""

    listener_ids = Bundle("listener_ids")

    def __init__(self) -> None:
        super().__init__()
        self.source = CancelSource()
        self.disposers: dict[int, Callable[[], None]] = {}
        self.calls: dict[int, list[CancelReason]] = {}
        # The model.
        self.model_reason: CancelReason | None = None
        self.model_attached: set[int] = set()
        self.model_calls: dict[int, list[CancelReason]] = {}

    @rule(target=listener_ids)
    def add_listener(self) -> int:
        i = len(self.disposers)
        self.calls[i] = []
        self.model_calls[i] = []
        self.disposers[i] = self.source.signal.add_listener(self.calls[i].append)
        if self.model_reason is None:
            self.model_attached.add(i)
        else:
            self.model_calls[i].append(self.model_reason)
        return i

    @rule(i=listener_ids)
    def dispose(self, i: int) -> None:
        self.disposers[i]()
        self.model_attached.discard(i)

    @rule(
        reason=st.none() | st.text(max_size=4),
        code=st.none() | st.sampled_from(["CANCELLED", "USER", ""]),
    )
    def cancel(self, reason: str | None, code: str | None) -> None:
        if code is None:
            self.source.cancel(reason)
            code = "CANCELLED"
        else:
            self.source.cancel(reason, code=code)
        if self.model_reason is None:
            self.model_reason = CancelReason(code, "cancelled" if reason is None else reason)
            for i in self.model_attached:
                self.model_calls[i].append(self.model_reason)
            self.model_attached.clear()

    @invariant()
    def agrees_with_the_model(self) -> None:
        signal = self.source.signal
        assert self.model_reason == signal.reason
        assert (self.model_reason is not None) is signal.cancelled
        assert len(self.model_attached) == signal.statistics().listeners
        assert self.model_calls == self.calls


TestCancelSourceMachine = CancelSourceMachine.TestCase
TestCancelSourceMachine.settings = settings(
    max_examples=60, stateful_step_count=25, derandomize=True, deadline=None, database=None
)


def _expected_first_cause(
    parent_times: list[int | None],
    timeout: int | None,
    deadline: int | None,
    code: str,
) -> tuple[int, set[CancelReason]] | None:
    """The model of open_signal: when it fires (relative to entry) and the allowed reasons."""
    limits = [t for t in (timeout, deadline) if t is not None]
    deadline_at = min(limits) if limits else None
    fired = [(t, i) for i, t in enumerate(parent_times) if t is not None]
    first_parent = min(t for t, _ in fired) if fired else None
    if deadline_at is not None and (first_parent is None or deadline_at <= first_parent):
        if timeout is not None and (deadline is None or timeout <= deadline):
            message = f"deadline exceeded after {timeout:g}s"
        else:
            message = "deadline exceeded"
        return max(deadline_at, 0), {CancelReason(code, message)}
    if first_parent is None:
        return None
    # Parents firing at the same instant race; any of them may win.
    return first_parent, {
        CancelReason(f"P{i}", f"parent {i}") for t, i in fired if t == first_parent
    }


@settings(max_examples=150, derandomize=True, deadline=None, database=None)
@given(
    parent_times=st.lists(st.none() | st.integers(0, 6), max_size=3),
    timeout=st.none() | st.integers(0, 6),
    deadline=st.none() | st.integers(-1, 6),
    exit_after=st.integers(0, 6),
    code=st.sampled_from(["DEADLINE_EXCEEDED", "TOOL_TIMEOUT"]),
)
def test_open_signal_reports_the_first_cause_like_a_simple_model(
    parent_times: list[int | None],
    timeout: int | None,
    deadline: int | None,
    exit_after: int,
    code: str,
) -> None:
    sources = [CancelSource() for _ in parent_times]
    observed: list[tuple[float, CancelReason]] = []
    exit_at = exit_after + 0.5  # never ties with a parent or a deadline

    async def main() -> None:
        start = trio.current_time()

        async def fire(i: int, at: int) -> None:
            await trio.sleep_until(start + at)
            sources[i].cancel(f"parent {i}", code=f"P{i}")

        async with trio.open_nursery() as nursery:
            for i, at in enumerate(parent_times):
                if at is not None:
                    nursery.start_soon(fire, i, at)
            async with open_signal(
                *(s.signal for s in sources),
                timeout=timeout,
                deadline=None if deadline is None else start + deadline,
                code=code,
            ) as derived:
                derived.add_listener(lambda r: observed.append((trio.current_time() - start, r)))
                await trio.sleep_until(start + exit_at)
            for source in sources:
                assert 0 == _listeners(source.signal)
        # Every parent has fired by now; none of it reached the detached signal.
        assert len(observed) <= 1

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    expected = _expected_first_cause(parent_times, timeout, deadline, code)
    if expected is None or expected[0] > exit_at:
        assert [] == observed
    else:
        at, reasons = expected
        assert 1 == len(observed)
        assert at == observed[0][0]
        assert observed[0][1] in reasons
