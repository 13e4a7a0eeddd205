"""The per-call fast paths keep the exact behaviour of what they replace.

``checkpoint_due()`` is Trio's own "would this checkpoint raise?", read without awaiting:
``execute`` awaits ``checkpoint_if_cancelled()`` after a successful dispatch only when it is
due, so it must say yes exactly when the await would raise, for cancellation and for a
``KeyboardInterrupt`` waiting for the main task.  A signal binds a scope as its own key and
listener; anything else stays an ordinary listener.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

import pytest
import trio
import trio.lowlevel

from trio_tools import CancelSource, ToolExecutionInput, ToolRegistry, ToolRunContext
from trio_tools._util import checkpoint_due


async def raises_at_checkpoint() -> bool:
    try:
        await trio.lowlevel.checkpoint_if_cancelled()
    except trio.Cancelled:
        return True
    return False


async def test_not_due_outside_a_cancelled_scope() -> None:
    assert not checkpoint_due()
    assert not await raises_at_checkpoint()


async def test_due_in_a_cancelled_scope_and_the_checkpoint_raises() -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        assert checkpoint_due()
        assert await raises_at_checkpoint()


async def test_due_in_a_scope_inside_a_cancelled_one() -> None:
    with trio.CancelScope() as outer:
        outer.cancel()
        with trio.CancelScope():
            assert checkpoint_due()
            assert await raises_at_checkpoint()


async def test_not_due_under_a_shield() -> None:
    with trio.CancelScope() as outer:
        outer.cancel()
        with trio.CancelScope(shield=True):
            assert not checkpoint_due()
            assert not await raises_at_checkpoint()


async def test_not_due_once_the_deadline_has_not_yet_passed() -> None:
    with trio.move_on_after(3600):
        assert not checkpoint_due()
        assert not await raises_at_checkpoint()


def test_due_for_a_pending_keyboard_interrupt_and_execute_delivers_it() -> None:
    """A Ctrl-C that arrives during a body that returns without a checkpoint waits for the
    main task's next checkpoint: ``execute``'s check after dispatch is that checkpoint."""
    seen: list[object] = []
    registry = ToolRegistry()

    @registry.tool
    async def interrupted(args: object, ctx: ToolRunContext) -> str:
        """Gets a Ctrl-C and returns at once."""
        signal.raise_signal(signal.SIGINT)
        return "done"

    async def main() -> None:
        source = CancelSource()
        call = ToolExecutionInput(
            call_id="c1", name="interrupted", arguments={}, signal=source.signal
        )
        try:
            seen.append(await registry.execute(call))
        finally:
            seen.append("execute left")

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        trio.run(main, restrict_keyboard_interrupt_to_checkpoints=True)
    assert before == signal.getsignal(signal.SIGINT)
    assert ["execute left"] == seen  # raised from inside execute: it returned nothing


def test_a_pending_keyboard_interrupt_is_due_in_the_main_task() -> None:
    due: list[object] = []

    async def main() -> None:
        signal.raise_signal(signal.SIGINT)  # pending until the main task's next checkpoint
        due.append(checkpoint_due())
        await trio.lowlevel.checkpoint_if_cancelled()
        due.append("not reached")

    with pytest.raises(KeyboardInterrupt):
        trio.run(main, restrict_keyboard_interrupt_to_checkpoints=True)
    assert [True] == due


def test_a_pending_keyboard_interrupt_is_not_due_in_another_task() -> None:
    """Trio delivers a pending Ctrl-C to the main task only."""
    due: list[bool] = []

    async def other_task() -> None:
        signal.raise_signal(signal.SIGINT)
        due.append(checkpoint_due())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other_task)

    with pytest.raises(KeyboardInterrupt):
        trio.run(main, restrict_keyboard_interrupt_to_checkpoints=True)
    assert [False] == due


async def test_a_bound_scope_is_cancelled_with_the_reason_text() -> None:
    source = CancelSource()
    with source.signal.open_scope() as scope:
        assert 1 == source.signal.statistics().listeners
        source.cancel("stop", code="USER")
        assert scope.cancel_called
        await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert 0 == source.signal.statistics().listeners


async def test_a_scope_given_to_add_listener_is_an_ordinary_listener(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only the registry's own binding cancels a scope directly: a scope passed where a
    callable belongs fails like any raising listener (logged), and stays uncancelled."""
    source = CancelSource()
    scope = trio.CancelScope()
    not_a_listener: Any = scope
    source.signal.add_listener(not_a_listener)
    with caplog.at_level(logging.ERROR, logger="trio_tools"):
        source.cancel()
    assert not scope.cancel_called
    assert ["cancel listener %r raised"] == [record.msg for record in caplog.records]
