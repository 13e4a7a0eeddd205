"""The shared deadline timer of a Trio run: every derived signal's deadline, one system task."""

from __future__ import annotations

import heapq
import itertools
import math
from heapq import heappush
from typing import Protocol

import trio

from ._util import logger


class Expiring(Protocol):
    """What a timer holds: told once when its deadline passes, unless cancelled first."""

    def expired(self) -> None:
        """The deadline passed (called in the timer task)."""


class TimerService:
    """Fires every derived signal's deadline of one Trio run from a single system task.

    A per-call task would cost a spawn and a nursery per timed call; one heap and one cancel
    scope whose deadline tracks the earliest timer cost a push.  Most deadlines never fire
    (the call finishes first), so arming and disarming one is what every timed call pays:
    a heap entry holds only ``(deadline, key)``, and the armed objects live in ``armed``,
    so disarming is ``armed.pop(key, None)`` (no method call) and frees the object at once.
    The entries left behind are skipped when they come up, and compacted by :meth:`arm`
    once they dominate the heap.
    """

    __slots__ = ("_heap", "_keys", "_scope", "_wake", "armed", "clock")

    def __init__(self) -> None:
        # The run's clock, read directly: cheaper than trio.current_time() per timed call.
        self.clock = trio.lowlevel.current_clock()
        self._heap: list[tuple[float, int]] = []
        self.armed: dict[int, Expiring] = {}
        self._keys = itertools.count()  # also breaks ties between equal deadlines, FIFO
        self._scope: trio.CancelScope | None = None
        # The scope's deadline (a float, cheaper to compare than the scope's property);
        # -inf while run() fires timers, outside the scope.
        self._wake = -math.inf

    def arm(self, deadline: float, target: Expiring) -> int:
        """Call ``target.expired()`` once ``deadline`` passes; return its key in ``armed``."""
        key = next(self._keys)
        armed = self.armed
        heap = self._heap
        if len(heap) >= 64:  # below, there cannot be 64 disarmed entries
            stale = len(heap) - len(armed)
            if stale >= 64 and stale * 2 > len(heap):
                # In place: run() may be iterating this very list.
                if armed:
                    heap[:] = [entry for entry in heap if entry[1] in armed]
                    heapq.heapify(heap)
                else:  # every entry is dead (one timed call at a time, say): none to keep
                    heap.clear()
        armed[key] = target
        heappush(heap, (deadline, key))
        if deadline < self._wake:
            self._wake = deadline
            assert self._scope is not None  # set whenever _wake is above -inf
            self._scope.deadline = deadline
        return key

    def statistics(self) -> tuple[int, int]:
        """``(armed timers, heap entries)``: for tests."""
        return len(self.armed), len(self._heap)

    async def run(self) -> None:
        heap = self._heap
        armed = self.armed
        while True:
            wake = heap[0][0] if heap else math.inf
            with trio.CancelScope(deadline=wake) as scope:
                self._scope, self._wake = scope, wake
                await trio.sleep_forever()
            self._scope, self._wake = None, -math.inf
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                target = armed.pop(heapq.heappop(heap)[1], None)
                if target is None:
                    continue  # disarmed
                try:
                    target.expired()
                except Exception:  # pragma: no cover - expired() only fires a signal, which logs
                    logger.exception("deadline of %r raised", target)


timer_service: trio.lowlevel.RunVar[TimerService] = trio.lowlevel.RunVar("trio_tools_timers")


def run_timers() -> TimerService:
    """The current Trio run's timer service, started on first use."""
    try:
        return timer_service.get()
    except LookupError:
        service = TimerService()
        timer_service.set(service)
        trio.lowlevel.spawn_system_task(service.run, name="trio_tools deadline timers")
        return service
