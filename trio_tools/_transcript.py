"""The transcript of a batch: the :class:`Journal` protocols and :class:`MemoryJournal`."""

from __future__ import annotations

from typing import Literal, Protocol, final

import attrs
import trio

from ._calls import ToolCall
from ._results import ToolResult

__all__ = ["DurableJournal", "Journal", "JournalEvent", "MemoryJournal"]


def _check_event(instance: JournalEvent, _attribute: object, result: ToolResult | None) -> None:
    if instance.kind == "call" and result is not None:
        raise ValueError(f"a 'call' event has no result, got {result!r}")
    if instance.kind == "result" and not isinstance(result, ToolResult):
        raise TypeError(f"a 'result' event needs a ToolResult, got {result!r}")


@final
@attrs.frozen
class JournalEvent:
    """One entry of a :class:`MemoryJournal`: a recorded call, or a committed result.

    ``kind`` is ``"call"`` (``result`` is ``None``) or ``"result"`` (``result`` is the
    committed :class:`ToolResult`).  The fields may be given positionally, in the order
    ``JournalEvent(kind, call, result)``.
    """

    kind: Literal["call", "result"] = attrs.field(
        validator=attrs.validators.in_(("call", "result"))
    )
    call: ToolCall = attrs.field(validator=attrs.validators.instance_of(ToolCall))
    result: ToolResult | None = attrs.field(default=None, validator=_check_event)


class Journal(Protocol):
    """Where :func:`run_tool_calls` records the transcript of a batch, durably if it likes.

    ``record_call(call)`` is awaited when a call starts (or, for a call the batch never
    starts, right before its synthetic result), in model order; ``record_result(call,
    result)`` when its result is committed, in model order.  The scheduler never runs two
    writes at once and shields each write from cancellation, so a write that began always
    completes.  A raising write is an internal failure of the batch (see
    :func:`run_tool_calls`).
    """

    async def record_call(self, call: ToolCall) -> None:
        """Record that ``call`` starts (or is about to be closed synthetically)."""
        ...

    async def record_result(self, call: ToolCall, result: ToolResult) -> None:
        """Record the one committed result of ``call``."""
        ...


class DurableJournal(Journal, Protocol):
    """A :class:`Journal` that lets a batch be recovered after its process died.

    :func:`run_tool_calls` uses each of these methods that the journal has, on top of
    ``record_call`` and ``record_result`` (which keep their meaning):

    * ``record_batch(calls)``: the step's whole call list, in model order, awaited before
      anything of the batch runs (so the model's unstarted calls are known too);
    * ``record_dispatch(call)``: awaited immediately before the call's body is invoked, from
      the call's own task: the write-ahead marker that the body may have run.  If it
      raises, the body is not invoked and the batch raises that error as an internal
      failure;
    * ``record_settled(call, result)``: the call's final result as soon as it is
      published, in whatever order calls finish, from the call's own task (so a finished
      call's result does not wait for a slower sibling's commit).

    Unlike the two :class:`Journal` methods, these are called concurrently (several calls
    dispatch and settle at once): a durable journal must accept concurrent writes.  Every
    write is shielded from cancellation; a raising write is an internal failure of the
    batch.
    """

    async def record_batch(self, calls: tuple[ToolCall, ...]) -> None:
        """Record the step's whole call list, before anything of the batch runs."""
        ...

    async def record_dispatch(self, call: ToolCall) -> None:
        """Record, durably, that the body of ``call`` is about to be invoked."""
        ...

    async def record_settled(self, call: ToolCall, result: ToolResult) -> None:
        """Record the final result of ``call`` as soon as it is published."""
        ...


@final
class MemoryJournal:
    """A :class:`Journal` that keeps its events in memory, with a balance check.

    Each write is a schedule point but never raises ``trio.Cancelled``: a journal write is
    not interrupted by cancellation.
    """

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: list[JournalEvent] = []

    def __repr__(self) -> str:
        return f"<trio_tools.MemoryJournal with {len(self._events)} event(s)>"

    @property
    def events(self) -> tuple[JournalEvent, ...]:
        """Every event so far, in the order it was recorded."""
        return tuple(self._events)

    async def record_call(self, call: ToolCall) -> None:
        """Append a ``"call"`` event for ``call``."""
        self._events.append(JournalEvent("call", call))
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def record_result(self, call: ToolCall, result: ToolResult) -> None:
        """Append a ``"result"`` event for ``call``."""
        self._events.append(JournalEvent("result", call, result))
        await trio.lowlevel.cancel_shielded_checkpoint()

    def assert_balanced(self) -> None:
        """Check that the transcript is balanced, or raise ``AssertionError``.

        Balanced means: every call is recorded once and has exactly one result, recorded
        after it; every result belongs to the call it follows (the same :class:`ToolCall`
        object: calls are compared by identity, so arguments that do not equal themselves,
        like a NaN, are fine); and results come in the order of their calls (model order).
        Calls are told apart by ``call_id`` while they are open; once a call has its
        result, a later call may reuse its id (local model servers number ``call_0`` in
        every step).

        Raises:
            AssertionError: describing the first violation, in journal order.
        """
        open_calls: dict[str, tuple[int, ToolCall]] = {}  # recorded, no result yet
        closed: set[str] = set()
        order: list[str] = []
        answered = 0  # calls, in call order, whose result was recorded
        for index, event in enumerate(self._events):
            call_id = event.call.call_id

            def fail(problem: str, index: int = index) -> None:
                raise AssertionError(f"journal is not balanced: event #{index}: {problem}")

            if event.kind == "call":
                if call_id in open_calls:
                    fail(f"call {call_id!r} is recorded twice")
                open_calls[call_id] = (len(order), event.call)
                order.append(call_id)
                continue
            if call_id not in open_calls:
                if call_id in closed:
                    fail(f"call {call_id!r} has more than one result")
                fail(f"result for call {call_id!r} without a call")
            position, call = open_calls[call_id]
            if call is not event.call:
                fail(f"result for call {call_id!r} carries {event.call!r}, not {call!r}")
            if position > answered:
                fail(
                    f"result for call {call_id!r} is out of model order: "
                    f"call {order[answered]!r} has no result yet"
                )
            del open_calls[call_id]
            closed.add(call_id)
            answered += 1
        if answered < len(order):
            raise AssertionError(f"journal is not balanced: call {order[answered]!r} has no result")
