"""Durable journals over a store: the ``DurableJournal`` methods, history and recovery.

:class:`StoreJournal` is what every database backend's journal is: the
:class:`~trio_tools.DurableJournal` methods, ``history()`` and ``recover()`` on top of a
:class:`~trio_tools._store.Store`, written through the backend's
:class:`~trio_tools._writer.Writer`, with the recovery classification
(:func:`recovered_result`).  :class:`BatchRecord` is what ``history()`` returns.
"""

# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar, final

import attrs
import trio

from ._calls import BatchOutcome, ToolCall
from ._json import from_json_text, to_compact_json
from ._results import Halt, ToolResult, aborted
from ._store import RECOVERED, Store, StoredBatch, StoredCall
from ._writer import Writer

__all__ = ["BatchRecord", "StoreJournal", "recovered_result"]

S = TypeVar("S", bound=Store)


@final
@attrs.frozen(kw_only=True)
class BatchRecord:
    """One batch of a durable journal's session, as ``history()`` returns it.

    ``calls``: the step's calls in model order (as ``record_batch`` received them, through
    their wire form).  ``results[i]``: the committed result of ``calls[i]``, or ``None``
    while it is uncommitted.  ``dispatched[i]``: the call's write-ahead dispatch marker was
    written (its body may have run).  ``complete``: every call has its committed result
    (the batch finished, or ``recover()`` closed it).
    """

    calls: tuple[ToolCall, ...]
    results: tuple[ToolResult | None, ...]
    dispatched: tuple[bool, ...]
    complete: bool


def recovered_result(call: StoredCall) -> ToolResult:
    """The result recovery commits for an uncommitted call of an incomplete batch.

    A settled result is the real one (not synthetic); a dispatch marker without one means
    the body may have run (synthetic ``ABORTED``); otherwise the body never ran (synthetic
    ``ABORTED_BEFORE_DISPATCH``).
    """
    if call.settled is not None:
        return _result(call.settled)
    return aborted(body_invoked=call.dispatched, synthetic=True)


def _call(text: str) -> ToolCall:
    return ToolCall.from_dict(from_json_text(text))


def _result(text: str) -> ToolResult:
    return ToolResult.from_dict(from_json_text(text))


def _committed(call: StoredCall) -> ToolResult | None:
    if not call.committed:
        return None
    text = call.result if call.result is not None else call.settled
    assert text is not None, "a committed call holds its result or its settled one"
    return _result(text)


def _outcome(results: Sequence[ToolResult]) -> BatchOutcome:
    halt: Halt | None = next((r.halt for r in results if r.halt is not None), None)
    return BatchOutcome(
        results=tuple(results),
        # The batch was cut short: its process died before it returned.
        aborted=True,
        halt=halt,
        concludes_turn=any(r.concludes_turn for r in results),
        contexts=tuple(c for r in results for c in r.additional_contexts),
    )


@attrs.define
class _OpenBatch:
    """The batch being written: its seq, and each call's position and settled result."""

    seq: int
    calls: tuple[ToolCall, ...]
    positions: dict[str, int]
    settled: list[ToolResult | None]


class StoreJournal(Generic[S]):
    """The :class:`~trio_tools.DurableJournal` of a database session, over a store.

    One batch at a time: ``record_batch`` opens a batch, the other writes name calls of
    that batch.  Every write is a transaction of its own (shared with the writes that are
    queued at the same moment) and returns once it committed.
    """

    __slots__ = ("_batch", "_describe", "_writer")

    def __init__(self, writer: Writer[S], describe: str) -> None:
        self._writer = writer
        self._describe = describe
        self._batch: _OpenBatch | None = None

    def _position(self, call: ToolCall) -> tuple[_OpenBatch, int]:
        batch = self._batch
        if batch is not None:
            position = batch.positions.get(call.call_id)
            if position is not None and batch.calls[position] == call:
                return batch, position
        raise ValueError(f"{self._describe}: {call!r} is not a call of the open batch")

    async def record_batch(self, calls: Iterable[ToolCall]) -> None:
        """Store the step's whole call list as a new batch of the session.

        Raises:
            TypeError: an item is not a :class:`ToolCall`.
            ValueError: two calls share a ``call_id``, or a call's arguments are not
                losslessly JSON-serializable (nothing is written).
            RuntimeError: the write failed, or the journal is closed.
        """
        batch_calls = tuple(calls)
        positions: dict[str, int] = {}
        for position, call in enumerate(batch_calls):
            if not isinstance(call, ToolCall):
                raise TypeError(f"calls must hold ToolCall objects, got {call!r}")
            if call.call_id in positions:
                raise ValueError(f"call_id {call.call_id!r} appears more than once in the batch")
            positions[call.call_id] = position
        texts = [to_compact_json(call.to_dict()) for call in batch_calls]
        seq = await self._writer.run(lambda store: store.add_batch(texts))
        self._batch = _OpenBatch(seq, batch_calls, positions, [None] * len(batch_calls))

    async def record_call(self, call: ToolCall) -> None:
        """Check that ``call`` belongs to the open batch; nothing new to store.

        ``record_batch`` already stored the call; whether its body may have run is what
        ``record_dispatch`` stores.
        """
        self._position(call)
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def record_dispatch(self, call: ToolCall) -> None:
        """Store the write-ahead marker: the body of ``call`` is about to be invoked."""
        batch, position = self._position(call)
        seq = batch.seq
        await self._writer.run(lambda store: store.set_dispatched(seq, position))

    async def record_settled(self, call: ToolCall, result: ToolResult) -> None:
        """Store the final result of ``call``, in whatever order calls finish."""
        batch, position = self._position(call)
        text = to_compact_json(result.to_dict())
        seq = batch.seq
        await self._writer.run(lambda store: store.set_settled(seq, position, text))
        batch.settled[position] = result

    async def record_result(self, call: ToolCall, result: ToolResult) -> None:
        """Commit the result of ``call`` (the batch is complete once every call is)."""
        batch, position = self._position(call)
        # The settled result is stored already: commit it by reference.
        text = None if batch.settled[position] is result else to_compact_json(result.to_dict())
        seq = batch.seq
        await self._writer.run(lambda store: store.set_committed(seq, position, text))

    async def history(self) -> tuple[BatchRecord, ...]:
        """Every batch of the session, in order (see :class:`BatchRecord`)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        stored = await self._writer.run(lambda store: store.batches())
        return tuple(
            BatchRecord(
                calls=tuple(_call(call.call) for call in batch.calls),
                results=tuple(_committed(call) for call in batch.calls),
                dispatched=tuple(call.dispatched for call in batch.calls),
                complete=all(call.committed for call in batch.calls),
            )
            for batch in stored
        )

    async def recover(self) -> tuple[BatchOutcome, ...]:
        """Close every incomplete batch; the outcomes of every batch recovery closed.

        Each uncommitted call of an incomplete batch is committed with
        :func:`recovered_result`, in one transaction.  Returns, in batch order, the
        outcome of every batch of the session that recovery closed, now or earlier, so a
        second call (also after reopening) returns the same and changes nothing.
        """

        def recover(store: S) -> list[tuple[StoredBatch, list[ToolResult]]]:
            closed: list[tuple[StoredBatch, list[ToolResult]]] = []
            for batch in store.batches():
                if batch.state != RECOVERED and all(call.committed for call in batch.calls):
                    continue  # completed by its own commits
                results: list[ToolResult] = []
                for position, call in enumerate(batch.calls):
                    result = _committed(call)
                    if result is None:
                        result = recovered_result(call)
                        # A settled result is stored already: commit it by reference.
                        text = (
                            None if call.settled is not None else to_compact_json(result.to_dict())
                        )
                        store.set_committed(batch.seq, position, text)
                    results.append(result)
                if batch.state != RECOVERED:
                    store.set_recovered(batch.seq)
                closed.append((batch, results))
            return closed

        await trio.lowlevel.checkpoint_if_cancelled()
        closed = await self._writer.run(recover)
        # Whatever batch was open is closed now.
        self._batch = None
        return tuple(_outcome(results) for _batch, results in closed)
