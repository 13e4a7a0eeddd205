"""The shared deadline timer of a Trio run: every derived signal's deadline, one system task."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable

import trio

from ._util import logger

# Breaks ties between equal deadlines in the heap (a Timer does not compare).
_sequence = itertools.count()


class Timer:
    """One armed deadline: ``fn()`` runs in the timer task when it passes, unless cancelled."""

    __slots__ = ("active", "deadline", "fn")

    def __init__(self, deadline: float, fn: Callable[[], None]) -> None:
        self.deadline = deadline
        self.fn = fn
        self.active = True


class TimerService:
    """Fires every ``open_signal`` deadline of one Trio run from a single system task.

    A per-call task would cost a spawn and a nursery per timed call; one heap and one cancel
    scope whose deadline tracks the earliest timer cost a push.  Cancelled timers are dropped
    lazily and the heap is compacted when they dominate it.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timer]] = []
        self._scope: trio.CancelScope | None = None
        self._inactive = 0

    def schedule(self, deadline: float, fn: Callable[[], None]) -> Timer:
        timer = Timer(deadline, fn)
        heapq.heappush(self._heap, (deadline, next(_sequence), timer))
        scope = self._scope
        if scope is not None and deadline < scope.deadline:
            scope.deadline = deadline
        return timer

    def cancel(self, timer: Timer) -> None:
        if timer.active:
            timer.active = False
            self._inactive += 1
            if self._inactive > 64 and self._inactive * 2 > len(self._heap):
                # In place: run() may be iterating this very list.
                self._heap[:] = [entry for entry in self._heap if entry[2].active]
                heapq.heapify(self._heap)
                self._inactive = 0

    async def run(self) -> None:
        heap = self._heap
        while True:
            with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as scope:
                self._scope = scope
                await trio.sleep_forever()
            self._scope = None
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                timer = heapq.heappop(heap)[2]
                if not timer.active:
                    self._inactive -= 1
                    continue
                timer.active = False
                try:
                    timer.fn()
                except Exception:  # pragma: no cover - fn only fires a source, which logs
                    logger.exception("deadline callback %r raised", timer.fn)


timer_service: trio.lowlevel.RunVar[TimerService] = trio.lowlevel.RunVar("trio_tools_timers")


def run_timers() -> TimerService:
    try:
        return timer_service.get()
    except LookupError:
        service = TimerService()
        timer_service.set(service)
        trio.lowlevel.spawn_system_task(service.run, name="trio_tools deadline timers")
        return service
