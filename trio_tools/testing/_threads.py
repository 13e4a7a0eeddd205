"""The contract machine's thread limiter: the virtual clock holds still while a thread runs."""

from __future__ import annotations

from typing import Final, final

import trio
import trio.testing

__all__ = ["ThreadsHoldTheClock"]

# Real seconds the virtual clock waits for a sync tool's worker thread before it jumps.
_THREAD_CUSHION: Final = 1.0


@final
class ThreadsHoldTheClock:
    """The registry's thread limiter, keeping the virtual clock still while a thread runs.

    ``MockClock(autojump_threshold=0)`` jumps to the next deadline as soon as every task is
    blocked, and a task waiting for a worker thread counts as blocked: a sync tool that
    works for a moment in its thread would see the machine's ``settle_within`` deadline
    (and its own timeout) pass at once, and count as hung.  While a sync body's thread
    holds the limiter, the clock jumps only after ``_THREAD_CUSHION`` real seconds without
    progress (so a sync body waiting for its timeout still gets it).  Delegates to the
    registry's own limiter, or to Trio's default one (per run).

    It also records the tasks whose thread started: a sync body is invoked only once its
    thread got a token (cancelled while the limiter is full, it never runs).
    """

    __slots__ = ("_busy", "_limiter", "clock", "started")

    def __init__(self, limiter: trio.CapacityLimiter | None) -> None:
        self._limiter = limiter
        self._busy = 0
        self.clock: trio.testing.MockClock | None = None  # the running rule's clock
        self.started: set[trio.lowlevel.Task] = set()

    def _target(self) -> trio.CapacityLimiter:
        limiter = self._limiter
        return trio.to_thread.current_default_thread_limiter() if limiter is None else limiter

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        await self._target().acquire_on_behalf_of(borrower)
        self.started.add(trio.lowlevel.current_task())
        self._busy += 1
        if self.clock is not None:
            self.clock.autojump_threshold = _THREAD_CUSHION

    def release_on_behalf_of(self, borrower: object) -> None:
        self._target().release_on_behalf_of(borrower)
        self._busy -= 1
        if not self._busy and self.clock is not None:
            self.clock.autojump_threshold = 0
