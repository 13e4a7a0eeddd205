"""open_sigint_cancel: the first Ctrl-C stops the turn, the second one interrupts.

Each test calls ``trio.run`` itself and sends a real SIGINT to its own process
(``signal.raise_signal``) from inside the run, the way a terminal's Ctrl-C arrives.  An
unexpected ``KeyboardInterrupt`` is turned into a test failure (it would otherwise stop the
whole pytest session), and every test checks that the SIGINT handler in place before the run
is in place after it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import trio
import trio.lowlevel
import trio.testing
from test_command import assert_group_gone, poll_until, wait_for_group

from trio_tools import (
    CancelReason,
    CancelSource,
    MemoryJournal,
    ToolCall,
    ToolRegistry,
    ToolRunContext,
    open_sigint_cancel,
    run_command,
    run_tool_calls,
)
from trio_tools._util import leaf_exceptions

T = TypeVar("T")

registry = ToolRegistry()
release_cleanup = trio.Event()  # replaced per test that uses it


@registry.tool(concurrency_safe=True)
async def work(args: object, ctx: ToolRunContext) -> str:
    """Runs until cancelled."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


@registry.tool(concurrency_safe=True)
async def slow_to_stop(args: object, ctx: ToolRunContext) -> str:
    """Runs until cancelled, then takes its time to clean up (until released)."""
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):  # an uncooperative cleanup: the stop waits for it
            with trio.move_on_after(10):  # (bounded, so that a failing test cannot hang)
                await release_cleanup.wait()
    raise AssertionError("unreachable")


@registry.tool
async def write(args: object, ctx: ToolRunContext) -> str:
    """Exclusive: waits for the calls before it, so it has not started when Ctrl-C comes."""
    return "written"


def calls(name: str) -> list[ToolCall]:
    return [
        ToolCall("c1", name, "{}"),
        ToolCall("c2", name, "{}"),
        ToolCall("c3", "write", "{}"),
    ]


@pytest.fixture(autouse=True)
def sigint_handler_is_restored() -> Iterator[None]:
    before = signal.getsignal(signal.SIGINT)
    yield
    assert before is signal.getsignal(signal.SIGINT)


def run(fn: Callable[[], Awaitable[T]]) -> T:
    """``trio.run(fn)``; an unexpected KeyboardInterrupt fails the test."""
    try:
        return trio.run(fn)
    except BaseException as exc:
        if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaf_exceptions(exc)):
            pytest.fail(f"unexpected KeyboardInterrupt: {exc!r}")
        raise


def run_expecting_interrupt(fn: Callable[[], Awaitable[object]]) -> None:
    """``trio.run(fn)`` must end with a KeyboardInterrupt (alone, or in a group)."""
    with pytest.raises(BaseException) as info:  # noqa: PT011 - checked just below
        trio.run(fn)
    leaves = leaf_exceptions(info.value)
    assert [KeyboardInterrupt] == [type(leaf) for leaf in leaves], repr(info.value)


async def press_ctrl_c_when_blocked() -> None:
    await trio.testing.wait_all_tasks_blocked()
    signal.raise_signal(signal.SIGINT)


# Both started calls aborted; the exclusive one, never started, closed by the scheduler.
STOPPED = [
    ("c1", "ABORTED", False),
    ("c2", "ABORTED", False),
    ("c3", "ABORTED_BEFORE_DISPATCH", True),
]


def codes(journal: MemoryJournal) -> list[tuple[str, str | None, bool]]:
    return [
        (event.call.call_id, event.result.code, event.result.synthetic)
        for event in journal.events
        if event.result is not None
    ]


def test_first_ctrl_c_stops_the_turn_and_the_journal_balances() -> None:
    journal = MemoryJournal()
    source = CancelSource()

    async def main() -> bool:
        with open_sigint_cancel(source):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(press_ctrl_c_when_blocked)
                outcome = await run_tool_calls(
                    registry, calls("work"), signal=source.signal, journal=journal
                )
            # Still inside the block, still running: the program goes on after a stop.
            await trio.lowlevel.checkpoint()
        return outcome.aborted

    assert run(main) is True
    assert CancelReason("CANCELLED", "interrupted") == source.signal.reason
    assert STOPPED == codes(journal)
    journal.assert_balanced()


def test_reason_is_the_given_one() -> None:
    source = CancelSource()

    async def main() -> None:
        with open_sigint_cancel(source, reason="the user pressed Ctrl-C"):
            signal.raise_signal(signal.SIGINT)
            await source.signal.wait_cancelled()

    run(main)
    assert CancelReason("CANCELLED", "the user pressed Ctrl-C") == source.signal.reason


def test_second_ctrl_c_raises_keyboard_interrupt_and_the_journal_still_balances() -> None:
    """The stop hangs in an uncooperative cleanup; the second press interrupts the run."""
    global release_cleanup
    release_cleanup = trio.Event()
    journal = MemoryJournal()
    source = CancelSource()

    async def press_twice() -> None:
        try:
            await press_ctrl_c_when_blocked()  # the turn is stopping...
            await source.signal.wait_cancelled()
            await press_ctrl_c_when_blocked()  # ...but the cleanups are stuck: press again
            await trio.sleep_forever()
        finally:
            release_cleanup.set()  # KeyboardInterrupt is on its way: let the cleanups end

    async def main() -> None:
        with open_sigint_cancel(source):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(press_twice)
                await run_tool_calls(
                    registry, calls("slow_to_stop"), signal=source.signal, journal=journal
                )
        raise AssertionError("unreachable: the second Ctrl-C interrupts")

    run_expecting_interrupt(main)
    assert STOPPED == codes(journal)
    journal.assert_balanced()


def test_ctrl_c_after_the_source_was_cancelled_otherwise_interrupts_at_once() -> None:
    source = CancelSource()
    source.cancel("stop button")

    async def main() -> None:
        with open_sigint_cancel(source):
            signal.raise_signal(signal.SIGINT)
            await trio.sleep_forever()

    run_expecting_interrupt(main)
    assert CancelReason("CANCELLED", "stop button") == source.signal.reason


def test_ctrl_c_after_the_block_interrupts_as_usual() -> None:
    source = CancelSource()

    async def main() -> None:
        with open_sigint_cancel(source):
            pass
        signal.raise_signal(signal.SIGINT)
        await trio.sleep_forever()

    run_expecting_interrupt(main)
    assert not source.signal.cancelled


def test_handler_is_restored_when_the_block_raises() -> None:
    inside: list[object] = []

    def blow_up() -> None:
        with open_sigint_cancel(CancelSource()):
            inside.append(signal.getsignal(signal.SIGINT))
            raise ValueError("boom")

    async def main() -> None:
        before = signal.getsignal(signal.SIGINT)
        with pytest.raises(ValueError, match="boom"):
            blow_up()
        assert before is signal.getsignal(signal.SIGINT)
        assert before is not inside[0]

    run(main)


def test_nested_blocks_cancel_inner_then_outer_then_interrupt() -> None:
    outer, inner = CancelSource(), CancelSource()

    async def main() -> None:
        with open_sigint_cancel(outer, reason="outer"), open_sigint_cancel(inner, reason="inner"):
            signal.raise_signal(signal.SIGINT)
            await inner.signal.wait_cancelled()
            assert not outer.signal.cancelled
            signal.raise_signal(signal.SIGINT)
            await outer.signal.wait_cancelled()
            signal.raise_signal(signal.SIGINT)
            await trio.sleep_forever()

    run_expecting_interrupt(main)
    assert ("inner", "outer") == (
        inner.signal.reason.message if inner.signal.reason else None,
        outer.signal.reason.message if outer.signal.reason else None,
    )


def test_ignored_sigint_stays_ignored_after_the_first_press() -> None:
    source = CancelSource()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:

        async def main() -> None:
            with open_sigint_cancel(source):
                signal.raise_signal(signal.SIGINT)
                await source.signal.wait_cancelled()
                signal.raise_signal(signal.SIGINT)  # goes to SIG_IGN: nothing happens
                await trio.lowlevel.checkpoint()

        run(main)
        assert signal.SIG_IGN == signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)


class UnhashableHandler:
    """A handler object that defines ``__eq__`` only (so it is unhashable); counts presses."""

    def __init__(self) -> None:
        self.presses = 0

    def __eq__(self, other: object) -> bool:
        return self is other

    def __call__(self, signum: int, frame: object) -> None:
        self.presses += 1


def test_an_unhashable_previous_handler_gets_the_second_press() -> None:
    source = CancelSource()
    handler = UnhashableHandler()
    previous = signal.signal(signal.SIGINT, handler)
    try:

        async def main() -> None:
            with open_sigint_cancel(source):
                signal.raise_signal(signal.SIGINT)
                await source.signal.wait_cancelled()
                signal.raise_signal(signal.SIGINT)  # goes to the handler before the block
                await trio.lowlevel.checkpoint()

        run(main)
        assert 1 == handler.presses
        assert handler is signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_outside_trio_run_raises() -> None:
    with pytest.raises(RuntimeError), open_sigint_cancel(CancelSource()):
        pass


def test_outside_the_main_thread_raises() -> None:
    errors: list[BaseException] = []

    async def main() -> None:
        try:
            with open_sigint_cancel(CancelSource()):
                pass
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=trio.run, args=(main,))
    thread.start()
    thread.join(timeout=10)
    assert ["open_sigint_cancel() must be used in the main thread"] == [str(exc) for exc in errors]


@pytest.mark.slow
def test_ctrl_c_stops_a_shell_command_and_its_whole_group() -> None:
    """The REPL story: Ctrl-C reaches only us; the stop takes the command's group down."""
    shell = ToolRegistry()

    @shell.tool
    async def bash(args: object, ctx: ToolRunContext) -> str:
        result = await run_command(["bash", "-c", "sh -c 'sleep 30; true'; true"], ctx=ctx)
        return result.stdout

    source = CancelSource()
    journal = MemoryJournal()
    pgids: list[int] = []

    async def main() -> None:
        with open_sigint_cancel(source):
            async with trio.open_nursery() as nursery:

                async def press() -> None:
                    members = await wait_for_group("sleep")
                    pgids.append(members[0].pgrp)
                    signal.raise_signal(signal.SIGINT)

                nursery.start_soon(press)
                await run_tool_calls(
                    shell, [ToolCall("c1", "bash", "{}")], signal=source.signal, journal=journal
                )

    run(main)
    assert_group_gone(pgids[0])
    assert [("c1", "ABORTED", False)] == codes(journal)
    journal.assert_balanced()


@pytest.mark.slow
def test_keyboard_interrupt_during_the_grace_period_kills_the_group_at_once(
    tmp_path: Path,
) -> None:
    """A second Ctrl-C while a command ignores SIGTERM: SIGKILL now, not after the grace."""
    ready, terminated = tmp_path / "ready", tmp_path / "got-term"
    # sleep ignores SIGTERM; bash notes it got one (a trap runs when `wait` is interrupted).
    script = f"trap '' TERM; sleep 30 & trap 'echo > {terminated}' TERM; echo > {ready}; wait; wait"
    pgids: list[int] = []

    def press_ctrl_c_once_terminated() -> None:
        """From a thread: SIGINT reaches the main thread while Trio waits (protected code),
        so Trio delivers KeyboardInterrupt to the main task, inside run_command's stop."""
        deadline = time.monotonic() + 10
        while not terminated.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)

    async def main() -> None:
        scope = trio.CancelScope()

        async def stop_once_ready() -> None:
            pgids.append((await wait_for_group("sleep"))[0].pgrp)
            await poll_until(ready.exists)
            threading.Thread(target=press_ctrl_c_once_terminated, daemon=True).start()
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_once_ready)
            with scope:
                await run_command(["bash", "-c", script], grace_period=30)

    started = time.monotonic()
    run_expecting_interrupt(main)
    assert time.monotonic() - started < 10  # not the 30 s grace period
    assert_group_gone(pgids[0])


@pytest.mark.slow
def test_second_ctrl_c_cuts_the_grace_period_of_a_command_in_a_tool_body(tmp_path: Path) -> None:
    """The REPL story with a command that ignores SIGTERM, run by the batch scheduler (the
    body is not Trio's main task, so the KeyboardInterrupt is not raised in it): the first
    Ctrl-C starts the stop, the second one kills the group at once, not after the grace."""
    shell = ToolRegistry()
    ready = tmp_path / "ready"
    script = f"trap '' TERM; sleep 30 & echo > {ready}; wait; wait"

    @shell.tool
    async def bash(args: object, ctx: ToolRunContext) -> str:
        result = await run_command(["bash", "-c", script], ctx=ctx, grace_period=30)
        return result.stdout

    source = CancelSource()
    pgids: list[int] = []

    async def main() -> None:
        with open_sigint_cancel(source):
            async with trio.open_nursery() as nursery:

                async def press_twice() -> None:
                    pgids.append((await wait_for_group("sleep"))[0].pgrp)
                    await poll_until(ready.exists)
                    signal.raise_signal(signal.SIGINT)  # the stop: SIGTERM, ignored
                    await poll_until(lambda: source.signal.cancelled)
                    await trio.sleep(0.05)  # the group's grace period has begun
                    signal.raise_signal(signal.SIGINT)  # and this one interrupts

                nursery.start_soon(press_twice)
                await run_tool_calls(shell, [ToolCall("c1", "bash", "{}")], signal=source.signal)

    started = time.monotonic()
    run_expecting_interrupt(main)
    assert time.monotonic() - started < 10  # not the 30 s grace period
    assert_group_gone(pgids[0])
