"""Durable journals: the machinery every database backend shares.

A backend (SQLite in ``_sqlite.py``, PostgreSQL in ``_postgres.py``) provides a
:class:`Store`: synchronous operations on one connection, used only by the journal's writer
thread; :class:`SqlStore` holds the SQL both backends share.  This module provides the rest:

* :class:`Writer`: the one thread that owns the connection.  Trio tasks submit jobs and
  wait (uninterruptibly) for them; the thread runs the jobs submitted while it was busy
  in one transaction (group commit), commits, and wakes every waiter with one call into
  Trio.
  If a job fails, the transaction is rolled back and each job of the group runs again in
  a transaction of its own, so the failing job fails alone and nothing is half-applied.  A job's
  waiter returns only after the transaction holding it committed.
* :class:`StoreJournal`: the :class:`~trio_tools.DurableJournal` methods, ``history()`` and
  ``recover()`` on top of a store, with the recovery classification.
* :class:`BatchRecord`: what ``history()`` returns.

Rows hold the wire forms of calls and results (``to_dict``) as compact JSON text.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar, cast, final

import attrs
import trio

from ._json import from_json_text, to_compact_json
from ._results import Halt, ToolResult, aborted
from ._scheduler import BatchOutcome, ToolCall

__all__ = [
    "LIVE",
    "RECOVERED",
    "BatchRecord",
    "SqlStore",
    "Store",
    "StoreJournal",
    "StoredBatch",
    "StoredCall",
    "Writer",
    "recovered_result",
    "running_writer",
]

T = TypeVar("T")
S = TypeVar("S", bound="Store")

# A batch's state in the store.  Whether it is complete is in its calls: every call has
# a committed result (so concurrent commits never have to agree on which one is last).
LIVE = 0  # written by record_batch (and maybe completed by its own commits)
RECOVERED = 1  # closed by recover()


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


@attrs.frozen
class StoredCall:
    """One call row as a store returns it: wire JSON text, flags."""

    call: str
    dispatched: bool
    settled: str | None
    committed: bool
    result: str | None  # the committed result when it is not the settled one


@attrs.frozen
class StoredBatch:
    """One batch as a store returns it, its calls in model order."""

    seq: int
    state: int
    calls: tuple[StoredCall, ...]


class Store(Protocol):
    """A backend's synchronous operations on its connection (writer thread only).

    ``seq`` numbers a session's batches from 1; ``position`` is a call's index in its
    batch.  Every method but the transaction ones runs inside a transaction the writer
    opened with :meth:`begin`.
    """

    def begin(self) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...

    def add_batch(self, calls: Sequence[str]) -> int:
        """Insert a ``LIVE`` batch and its calls (none dispatched or committed); its seq."""
        ...

    def set_dispatched(self, seq: int, position: int) -> None: ...
    def set_settled(self, seq: int, position: int, result: str) -> None: ...

    def set_committed(self, seq: int, position: int, result: str | None) -> None:
        """Commit a call's result: ``None`` means the settled one (already stored)."""
        ...

    def set_recovered(self, seq: int) -> None:
        """Mark the batch as closed by recovery."""
        ...

    def batches(self) -> list[StoredBatch]:
        """Every batch of the session, in seq order."""
        ...


class SqlStore:
    """The :class:`Store` operations in SQL, shared by the database backends.

    A backend subclass provides the transaction methods, ``close`` and :meth:`_execute`
    (one statement with ``?`` placeholders; returns the rows, or the row count of a
    statement without rows); the tables are ``trio_tools_batches`` and
    ``trio_tools_calls`` in both.  Booleans are written as ``TRUE`` and read with
    ``bool()``, which fits SQLite's integers and PostgreSQL's booleans alike.
    """

    __slots__ = ("_session",)

    def __init__(self, session: str) -> None:
        self._session = session

    def _execute(self, sql: str, args: Sequence[object]) -> list[tuple[Any, ...]] | int:
        raise NotImplementedError

    def _executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        for row in rows:
            self._execute(sql, row)

    def _rows(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        rows = self._execute(sql, args)
        assert isinstance(rows, list), "a query returns rows"
        return rows

    def _update(self, sql: str, *args: object) -> None:
        if self._execute(sql, args) != 1:
            raise RuntimeError(f"journal row not found for {args[-2:]!r}")

    def add_batch(self, calls: Sequence[str]) -> int:
        session = self._session
        ((last,),) = self._rows(
            "SELECT COALESCE(MAX(seq), 0) FROM trio_tools_batches WHERE session = ?", session
        )
        seq = int(last) + 1
        self._execute(
            "INSERT INTO trio_tools_batches (session, seq, state) VALUES (?, ?, ?)",
            (session, seq, LIVE),
        )
        self._executemany(
            "INSERT INTO trio_tools_calls (session, seq, position, call) VALUES (?, ?, ?, ?)",
            [(session, seq, position, call) for position, call in enumerate(calls)],
        )
        return seq

    def set_dispatched(self, seq: int, position: int) -> None:
        self._update(
            "UPDATE trio_tools_calls SET dispatched = TRUE"
            " WHERE session = ? AND seq = ? AND position = ?",
            self._session,
            seq,
            position,
        )

    def set_settled(self, seq: int, position: int, result: str) -> None:
        self._update(
            "UPDATE trio_tools_calls SET settled = ?"
            " WHERE session = ? AND seq = ? AND position = ?",
            result,
            self._session,
            seq,
            position,
        )

    def set_committed(self, seq: int, position: int, result: str | None) -> None:
        self._update(
            "UPDATE trio_tools_calls SET committed = TRUE, result = ?"
            " WHERE session = ? AND seq = ? AND position = ?",
            result,
            self._session,
            seq,
            position,
        )

    def set_recovered(self, seq: int) -> None:
        self._update(
            "UPDATE trio_tools_batches SET state = ? WHERE session = ? AND seq = ?",
            RECOVERED,
            self._session,
            seq,
        )

    def batches(self) -> list[StoredBatch]:
        calls: dict[int, list[StoredCall]] = {}
        for seq, call, dispatched, settled, committed, result in self._rows(
            "SELECT seq, call, dispatched, settled, committed, result FROM trio_tools_calls"
            " WHERE session = ? ORDER BY seq, position",
            self._session,
        ):
            calls.setdefault(seq, []).append(
                StoredCall(call, bool(dispatched), settled, bool(committed), result)
            )
        return [
            StoredBatch(seq, state, tuple(calls.get(seq, ())))
            for seq, state in self._rows(
                "SELECT seq, state FROM trio_tools_batches WHERE session = ? ORDER BY seq",
                self._session,
            )
        ]


class WriterClosedError(RuntimeError):
    """The journal was closed (or its writer thread died)."""


class _Job:
    __slots__ = ("error", "fn", "task", "value")

    def __init__(self, fn: Callable[[Any], object], task: trio.lowlevel.Task) -> None:
        self.fn = fn
        self.task = task  # parked until the job's transaction is over
        self.value: object = None
        self.error: BaseException | None = None


def _refuse_abort(_raise_cancel: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED


class Writer(Generic[S]):
    """The one thread that owns a store's connection; group-commits submitted jobs.

    At most one group of jobs is with the thread at a time: jobs submitted while it runs
    one wait on the Trio side and go to the thread together, as the next group, the moment
    the current one committed.  So a lone write goes at once, and under load the groups
    grow by themselves (fewer hand-offs between the threads, fewer commits).

    Created and started in Trio (it captures the Trio token to wake waiters); closed with
    :meth:`aclose`, which lets the submitted jobs finish first.
    """

    def __init__(
        self, store: S, *, name: str, describe: str, errors: tuple[type[Exception], ...]
    ) -> None:
        self._store = store
        self._describe = describe
        self._errors = errors
        # Groups for the thread; None tells it to stop.
        self._queue: queue.SimpleQueue[list[_Job] | None] = queue.SimpleQueue()
        # Trio-thread state: the jobs waiting for the next group, whether a group is with
        # the thread, whether aclose() was called.
        self._pending: list[_Job] = []
        self._in_flight = False
        self._closed = False
        # Counted by the thread, read by tests and benchmarks.
        self.transactions = 0
        self.jobs = 0
        self._token = trio.lowlevel.current_trio_token()
        self._stopped = trio.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    async def run(self, fn: Callable[[S], T]) -> T:
        """Run ``fn(store)`` on the writer thread inside a transaction; return its value.

        Returns only once the transaction holding the job committed.  Shielded from
        cancellation: a job that was submitted always completes, and its outcome is
        what this returns or raises.

        Raises:
            RuntimeError: the journal is closed; or the commit failed (chained from the
                backend's error), in which case nothing of the job was applied.
            Exception: whatever ``fn`` raised (its transaction was rolled back).
        """
        if self._closed:
            raise WriterClosedError(f"{self._describe} is closed")
        job = _Job(fn, trio.lowlevel.current_task())
        if self._in_flight:
            self._pending.append(job)
        else:
            self._in_flight = True
            self._queue.put([job])
        # The job runs whatever happens to this task: wait for its outcome, so that the
        # caller learns it (a durable write that began must be reported, not abandoned).
        # Refusing the abort is a shield without a cancel scope: a cancellation is
        # delivered at the caller's next checkpoint instead.
        await trio.lowlevel.wait_task_rescheduled(_refuse_abort)
        if job.error is not None:
            raise job.error
        return cast(T, job.value)  # fn's value, set by the thread

    def _group_done(self, group: list[_Job]) -> None:
        """In Trio, once the thread finished ``group``: wake its jobs, send the next one."""
        for job in group:
            trio.lowlevel.reschedule(job.task)
        pending = self._pending
        if pending:
            self._pending = []
            self._queue.put(pending)
        else:
            self._in_flight = False
            if self._closed:
                self._queue.put(None)

    async def aclose(self) -> None:
        """Stop accepting jobs, let the submitted ones finish, stop the thread, close."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        if not self._in_flight:
            self._queue.put(None)
        # (else the last group's _group_done tells the thread to stop.)
        # Shielded: the connection must be closed by its thread before we return.
        with trio.CancelScope(shield=True):
            await self._stopped.wait()

    # -- the thread ------------------------------------------------------------------

    def _run(self) -> None:
        store = self._store
        try:
            while True:
                group = self._queue.get()
                if group is None:
                    break
                self._run_group(store, group)
        finally:
            try:
                store.close()
            finally:
                self._token.run_sync_soon(self._stopped.set)

    def _run_group(self, store: S, group: list[_Job]) -> None:
        """Run ``group`` in one transaction; if a job fails, each job in its own."""
        self.transactions += 1
        self.jobs += len(group)
        try:
            self._transaction(store, group)
        except Exception as exc:
            if len(group) == 1:
                group[0].value = None
                group[0].error = self._failure(exc)
                return
            # Nothing of the group was applied: give every job its own transaction, so
            # one failing job fails alone and none is half-applied.
            for job in group:
                job.value = job.error = None
                try:
                    self._transaction(store, [job])
                except Exception as exc:
                    job.error = self._failure(exc)
        finally:
            self._token.run_sync_soon(self._group_done, group)

    @staticmethod
    def _transaction(store: S, jobs: list[_Job]) -> None:
        """Run ``jobs`` and commit; on any failure roll back and raise it."""
        try:
            store.begin()
            for job in jobs:
                job.value = job.fn(store)
            store.commit()
        except Exception:
            # The connection may be unusable: the first error is the one to report.
            with contextlib.suppress(Exception):
                store.rollback()
            raise

    def _failure(self, exc: Exception) -> Exception:
        """A database error as a ``RuntimeError`` naming the journal; others as they are."""
        if not isinstance(exc, self._errors):
            return exc
        error = RuntimeError(f"{self._describe}: write failed: {exc}")
        error.__cause__ = exc
        return error


@contextlib.asynccontextmanager
async def running_writer(
    store: S, *, name: str, describe: str, errors: tuple[type[Exception], ...]
) -> AsyncGenerator[Writer[S]]:
    """A :class:`Writer` for ``store`` for the block; closed (the store too) on exit."""
    writer = Writer(store, name=name, describe=describe, errors=errors)
    try:
        yield writer
    finally:
        await writer.aclose()


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
