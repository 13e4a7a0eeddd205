"""The driver of a batch: the task that advances one :func:`~trio_tools.run_tool_calls`
(the body of the batch's nursery), and the journal writes it makes.

The driver makes every journal write, one step at a time: commit the next result in model
order, else close the next unstarted call synthetically once the batch stops, else start
the next call, else wait for something to change.  Each started call runs the registry's
pipeline in its own task and only reports back (gate passed, slot freed, settled) through
its :class:`~._batch.BatchCall`.  So starts, commits and journal writes happen in model
order by construction, and the journal never sees two writes at once.

Without a journal a commit is a counter and a start writes nothing, so while the driver is
parked the reports stand in for it (see :meth:`~._batch.Batch.changed`): the driver only
starts the first call, closes a stopped batch and returns, and a batch of N calls costs no
context switch into the driver per call.  The start decision still happens where the
woken driver would have taken it (in the next call's own task, once the reporting task
yielded), with the same checks.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false

from __future__ import annotations

import contextvars

import trio

from ._batch import Batch
from ._results import ToolResult
from ._util import logger

__all__ = ["drive", "first_failure", "record_call", "record_result"]


async def drive(batch: Batch, nursery: trio.Nursery) -> None:
    """Make progress until every call is committed, or an internal failure stops it.

    Returning lets the nursery drain the started calls without cancelling them.
    """
    batch.start_soon = nursery.start_soon
    # Calls start in the context of the caller's task (Trio gives each task a copy of its
    # spawner's), also when a call's report starts the next one (see Batch.changed()).
    batch.context = contextvars.copy_context()
    try:
        while not batch.failures and await _step(batch, nursery):
            pass
    except Exception as exc:
        batch._fail(exc)


def first_failure(failures: list[Exception]) -> Exception:
    """The internal failure to raise, the first; the others are logged."""
    for other in failures[1:]:
        logger.error("a further internal failure of the batch", exc_info=other)
    return failures[0]


async def _step(batch: Batch, nursery: trio.Nursery) -> bool:
    """One step of progress; ``False`` once every call is committed."""
    # Ambient cancellation stops the batch at its next step: a journal write that was in
    # progress has completed (shielded), nothing more is written or started.
    await trio.lowlevel.checkpoint_if_cancelled()
    index = batch.committed
    if index == len(batch.calls):
        return False
    result = batch.results[index]
    if result is not None:
        end = index + 1
        if batch.record_settled is not None:
            # A durable journal accepts concurrent writes: commit every result that is
            # ready, in one round of overlapping writes (each result is durable already,
            # from record_settled; what the commits add is that they are final).
            results = batch.results
            while end < len(results) and results[end] is not None:
                end += 1
        if end == index + 1:
            await record_result(batch, index, result)
        else:
            await _record_results(batch, index, end)
        batch.committed = end
    elif batch.halted or batch.signal.cancelled:
        if index < batch.next:
            await batch._wait_changed()  # drain: started calls settle on their own
        elif batch.recorded == index:
            await record_call(batch, index)
        else:
            batch.results[index] = batch._synthetic(index)
            batch.next = index + 1
    elif batch.next == len(batch.calls) or not await _try_start(batch, nursery):
        await batch._wait_changed()
    return True


async def _try_start(batch: Batch, nursery: trio.Nursery) -> bool:
    """Start the next call if it may start now; ``True`` if anything was done.

    The call is classified right before it starts; ``record_call`` is written between the
    two, so a recorded call without a result is one that may have run.
    """
    index = batch.next
    if batch.candidate:
        return False  # the candidate call task decides (see Batch.changed())
    mode = _admit(batch, index)
    if mode is None:
        return False
    await record_call(batch, index)
    if batch.failures or batch.halted or batch.signal.cancelled:
        return True  # stopped while the call was being recorded: _step closes it
    await trio.lowlevel.checkpoint_if_cancelled()  # never a schedule point otherwise
    # Start the call (admitted, recorded) in its own task.
    batch._claim(index, mode)
    nursery.start_soon(batch._call, index, mode, name=f"tool call {batch.calls[index].call_id!r}")
    return True


def _admit(batch: Batch, index: int) -> str | None:
    """The mode call ``index`` starts in, if it may start now, else ``None``.

    It may start once the previous call passed its gate or settled, no exclusive call holds
    the batch, a pool slot is free, and (classified exclusive) every earlier call is
    committed.
    """
    return batch._classify(index) if batch._may_start(index) else None


async def record_call(batch: Batch, index: int) -> None:
    """Write ``record_call`` of call ``index``, if the batch has a journal."""
    journal = batch.journal
    if journal is not None:
        # A journal write that began must complete: a half-written transcript is what the
        # journal exists to prevent, whatever is being cancelled around us.
        with trio.CancelScope(shield=True):
            await journal.record_call(batch.calls[index])
    batch.recorded = index + 1


async def record_result(batch: Batch, index: int, result: ToolResult) -> None:
    """Write ``record_result`` of call ``index``, if the batch has a journal."""
    journal = batch.journal
    if journal is not None:
        # Same as record_call: a started write always completes.
        with trio.CancelScope(shield=True):
            await journal.record_result(batch.calls[index], result)


async def _record_results(batch: Batch, start: int, end: int) -> None:
    """Commit the ready results ``start:end`` with overlapping journal writes."""
    journal = batch.journal
    assert journal is not None
    failures: list[Exception] = []

    async def write(index: int, result: ToolResult) -> None:
        try:
            await journal.record_result(batch.calls[index], result)
        except Exception as exc:
            failures.append(exc)

    # Same as record_call: a started write always completes.
    with trio.CancelScope(shield=True):
        async with trio.open_nursery() as nursery:
            for index in range(start, end):
                result = batch.results[index]
                assert result is not None  # the caller checked: every one is ready
                nursery.start_soon(write, index, result)
    if failures:
        raise first_failure(failures)
