"""The one thread that owns a journal's database connection, and its group commit.

Trio tasks submit jobs and wait (uninterruptibly) for them; the thread runs the jobs
submitted while it was busy in one transaction (group commit), commits, and wakes every
waiter with one call into Trio.  If a job fails, the transaction is rolled back and each job
of the group runs again in a transaction of its own, so the failing job fails alone and
nothing is half-applied.  A job's waiter returns only after the transaction holding it
committed.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import AsyncGenerator, Callable
from typing import Any, Generic, TypeVar, cast

import trio

from ._store import Store

__all__ = ["Writer", "WriterClosedError", "running_writer"]

T = TypeVar("T")
S = TypeVar("S", bound=Store)


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
