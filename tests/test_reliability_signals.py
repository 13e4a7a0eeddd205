"""Signals under stress: deep derivation chains, and interrupts raised by listeners when a
deadline (not a task) fires the signal."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import trio
from helpers_registry import TOOL, Harness

from trio_tools import (
    CancelReason,
    CancelSignal,
    CancelSource,
    ToolRunContext,
    open_signal,
    timeout_policy,
)

# -- deep chains --------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [400, 3000])
async def test_cancel_reaches_every_signal_of_a_deep_chain(depth: int, autojump_clock: Any) -> None:
    source = CancelSource()
    heard: list[int] = []
    async with contextlib.AsyncExitStack() as stack:
        signals: list[CancelSignal] = [source.signal]
        for level in range(depth):
            derived = await stack.enter_async_context(open_signal(signals[-1]))
            derived.add_listener(lambda reason, level=level: heard.append(level))
            signals.append(derived)
        with signals[-1].open_scope() as scope:
            source.cancel("stop")
            await trio.sleep(1)
        assert scope.cancelled_caught
        assert all(signal.cancelled for signal in signals)
        assert {CancelReason("CANCELLED", "stop")} == {signal.reason for signal in signals}
        assert list(range(depth)) == heard
        assert all(signal.statistics().listeners == 0 for signal in signals)


async def test_a_deadline_reaches_every_signal_of_a_deep_chain(autojump_clock: Any) -> None:
    async with contextlib.AsyncExitStack() as stack:
        root = await stack.enter_async_context(open_signal(timeout=1))
        signals = [root]
        for _ in range(2000):
            signals.append(await stack.enter_async_context(open_signal(signals[-1])))
        with trio.fail_after(100):
            await signals[-1].wait_cancelled()
        assert {root.reason} == {signal.reason for signal in signals}


async def test_propagation_keeps_the_order_of_a_recursive_walk() -> None:
    """A derived signal's listeners run where its link sits among its parent's listeners."""
    source = CancelSource()
    order: list[str] = []
    source.signal.add_listener(lambda reason: order.append("parent first"))
    async with open_signal(source.signal) as child:
        child.add_listener(lambda reason: order.append("child"))
        async with open_signal(child) as grandchild:
            grandchild.add_listener(lambda reason: order.append("grandchild"))
            child.add_listener(lambda reason: order.append("child last"))
            source.signal.add_listener(lambda reason: order.append("parent last"))
            source.cancel()
    assert ["parent first", "child", "grandchild", "child last", "parent last"] == order


async def test_a_listener_interrupt_deep_in_a_chain_reaches_everyone_then_raises() -> None:
    source = CancelSource()
    heard: list[str] = []

    def interrupt(reason: CancelReason) -> None:
        raise KeyboardInterrupt

    async with open_signal(source.signal) as child, open_signal(child) as grandchild:
        grandchild.add_listener(interrupt)
        grandchild.add_listener(lambda reason: heard.append("grandchild"))
        source.signal.add_listener(lambda reason: heard.append("parent"))
        with pytest.raises(KeyboardInterrupt):
            source.cancel()
    assert ["grandchild", "parent"] == heard


# -- interrupts from listeners when a deadline fires -------------------------------------------


@pytest.mark.parametrize("fatal", [KeyboardInterrupt, SystemExit])
async def test_a_listener_interrupt_at_a_deadline_surfaces_from_the_block(
    fatal: type[BaseException], autojump_clock: Any
) -> None:
    """The other listeners hear it, the run goes on (no TrioInternalError), and leaving the
    ``open_signal`` block raises the interrupt itself."""
    heard: list[CancelReason] = []

    def interrupt(reason: CancelReason) -> None:
        raise fatal

    scopes: list[trio.CancelScope] = []

    async def wait_for_the_deadline() -> None:
        async with open_signal(timeout=1) as signal:
            signal.add_listener(interrupt)
            signal.add_listener(heard.append)
            with signal.open_scope() as scope:
                scopes.append(scope)
                await trio.sleep(10)

    with pytest.raises(fatal):
        await wait_for_the_deadline()
    assert scopes[0].cancelled_caught
    assert [CancelReason("DEADLINE_EXCEEDED", "deadline exceeded after 1s")] == heard
    # The timer task survived: later deadlines still fire.
    async with open_signal(timeout=1) as later:
        with trio.fail_after(100):
            await later.wait_cancelled()


async def test_a_listener_interrupt_on_a_derived_signal_at_a_deadline_surfaces(
    autojump_clock: Any,
) -> None:
    heard: list[str] = []

    def interrupt(reason: CancelReason) -> None:
        raise KeyboardInterrupt

    async def wait_for_the_deadline() -> None:
        async with open_signal(timeout=1) as outer, open_signal(outer) as inner:
            inner.add_listener(interrupt)
            outer.add_listener(lambda reason: heard.append("outer"))
            with trio.fail_after(100):
                await inner.wait_cancelled()

    with pytest.raises(KeyboardInterrupt):
        await wait_for_the_deadline()
    assert ["outer"] == heard


async def test_a_listener_interrupt_at_a_tool_timeout_propagates_after_publication(
    autojump_clock: Any,
) -> None:
    h = Harness()
    h.registry.add_around_execute(timeout_policy())

    def interrupt(reason: CancelReason) -> None:
        raise KeyboardInterrupt

    @h.registry.tool(name=TOOL, timeout=1)
    async def body(args: object, ctx: ToolRunContext) -> str:
        ctx.signal.add_listener(interrupt)
        await trio.sleep(10)
        return "done"

    with pytest.raises(KeyboardInterrupt):
        await h.registry.execute(h.input())
    assert ["ABORTED"] == [result.code for result in h.published]
