"""The batch scheduler's entry: :func:`run_tool_calls`, one model step's tool calls, always a
balanced transcript.

It checks the arguments, writes the durable journal's batch record, runs the driver
(``_batch.py``) in the batch's nursery, and builds the outcome, or turns what the nursery
raised into the one exception the caller sees, after balancing the transcript of an
interrupted batch.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from itertools import chain, repeat
from typing import cast

import trio

from ._batch import Batch
from ._calls import BatchOutcome, ToolCall
from ._driver import drive, first_failure, record_call, record_result
from ._registry import ToolRegistry
from ._results import AdditionalContext, Halt, ToolResult, aborted
from ._signal import CancelSignal
from ._transcript import Journal
from ._util import leaf_exceptions, logger

# ToolCall and BatchOutcome are re-exported: the batch's values, imported from here by the
# providers.
__all__ = ["BatchOutcome", "ToolCall", "run_tool_calls"]


async def run_tool_calls(
    registry: ToolRegistry,
    calls: Iterable[ToolCall],
    *,
    signal: CancelSignal,
    max_parallel: int = 10,
    journal: Journal | None = None,
    agent: object | None = None,
    on_progress: Callable[[str, object], None] | None = None,
) -> BatchOutcome:
    """Run one model step's tool calls and return their results in model order.

    Each call gets its own :class:`ToolExecutionInput` with the step's ``signal``, ``agent``
    and, when ``on_progress`` is given, a receiver calling ``on_progress(call_id,
    progress)``.

    **Scheduling.**  Calls start in model order.  Right before a call starts it is
    classified with ``registry.execution_mode``: an *exclusive* call waits until every
    started call has settled and been committed, then runs alone; nothing else starts until
    it has finished post-execute and been committed.  *Parallel* calls share a rolling pool
    of at most ``max_parallel`` calls; a slot frees when a call's dispatch (the
    around-execute chain and the body) settles, before its post-execute.  Gates
    (pre-execute, guards, approval) run one at a time in model order: the next call starts
    only once the previous one passed its gate (it then dispatches at once) or settled.

    **Transcript.**  ``journal.record_call(call)`` is awaited when a call starts, and
    ``journal.record_result(call, result)`` when its result is committed; results are
    committed in model order (a later call that finishes first waits for the earlier
    commits).  Journal writes are shielded from cancellation.

    **Stopping.**  When ``signal`` fires, or a result carries a halt (``Deny(halt=...)``,
    ``Accept``/``Block`` with a halt, ``ctx.halt_turn``), no further call starts.  Started
    calls are drained (awaited; on cancellation the registry makes them ``ABORTED`` or
    ``ABORTED_BEFORE_DISPATCH``; a halt does not cancel them) and committed, then every
    unstarted call is recorded and committed with a synthetic ``ABORTED_BEFORE_DISPATCH``
    result (``synthetic=True``) that never passes through the registry (no observers, no
    ``finalize_content``).  ``ctx.conclude_turn()`` stops nothing.

    **Failures.**  Tools and policy stages never raise out of here: they become results.
    An *internal failure* (the journal raising, or a bug of the scheduler or registry)
    stops new starts and further journal writes, drains the started calls without
    cancelling them, then is raised as is (never inside an ``ExceptionGroup``); no
    synthetic result is invented for it.  If several happen, the first is raised and the
    others are logged on the ``"trio_tools"`` logger.

    **Ambient cancellation** (a Trio scope around this call, not ``signal``) propagates as
    ``trio.Cancelled``, never swallowed; so do ``KeyboardInterrupt`` and other
    ``BaseException``\\ s (a lone one unwrapped; several at once in a
    ``BaseExceptionGroup``).  The transcript still balances: before the exception
    propagates, the scheduler (shielded) commits every started call with the result the
    registry published for it (``ABORTED`` or ``ABORTED_BEFORE_DISPATCH``, or whatever it
    had finished with) and records every unstarted call with a synthetic
    ``ABORTED_BEFORE_DISPATCH``, in model order.

    Args:
        registry: the tools and policies to run the calls through.
        calls: the step's calls, in model order.
        signal: the step's lifetime, owned by the caller.
        max_parallel: the pool size for parallel calls.
        journal: where to record the transcript, or ``None``.
        agent: the opaque owner passed to every call.
        on_progress: ``on_progress(call_id, progress)`` for the bodies' progress reports.

    Returns:
        A frozen :class:`BatchOutcome`.

    Raises:
        ValueError: ``max_parallel`` is not an ``int`` >= 1 (a ``bool`` or a non-``int``
            included), or two calls share a ``call_id`` (the journal would be ambiguous).
        TypeError: an item of ``calls`` is not a :class:`ToolCall`, or ``on_progress`` is
            not callable.
        trio.Cancelled: ambient cancellation.
    """
    if isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1:
        raise ValueError(f"max_parallel must be an int >= 1, got {max_parallel!r}")
    batch_calls = tuple(calls)
    # The usual batch, checked without a Python loop: exactly ToolCall objects, distinct ids.
    only_calls = not set(map(type, batch_calls)) - _TOOL_CALL
    if not only_calls or len(set(map(_call_id, batch_calls))) != len(batch_calls):
        _check_calls(batch_calls)
    if on_progress is not None and not callable(on_progress):
        raise TypeError(f"on_progress must be callable or None, got {on_progress!r}")
    # Ambient cancellation before anything is journaled; and a schedule point even for an
    # empty batch.
    await trio.lowlevel.checkpoint()

    batch = Batch(registry, batch_calls, signal, max_parallel, journal, agent, on_progress)
    record_batch = getattr(journal, "record_batch", None)
    if record_batch is not None:
        # Before anything of the batch runs: a raise here is an internal failure with
        # nothing to drain.  Shielded: a write that began always completes.
        with trio.CancelScope(shield=True):
            await record_batch(batch_calls)
    error: BaseException | None = None
    dispose = signal.add_listener(batch.on_signal)
    try:
        async with trio.open_nursery() as nursery:
            await drive(batch, nursery)
    except BaseException as exc:  # a group, or a lone one with loose exception groups
        error = _one_exception(exc, batch.failures)
        if not batch.failures:
            # An interruption (ambient cancellation, KeyboardInterrupt...), not an internal
            # failure: the transcript must still balance.  Shielded because the journal
            # writes are what the cancellation must not cut short.
            with trio.CancelScope(shield=True):
                await _close_after_interruption(batch)
    finally:
        dispose()
    if error is None and batch.failures:
        error = first_failure(batch.failures)
    if error is not None:
        # Raised outside the handler, so it does not drag the group along as its context.
        raise error
    return _outcome(batch)


_TOOL_CALL = {ToolCall}
_call_id = operator.attrgetter("call_id")
_concludes_turn = operator.attrgetter("concludes_turn")
_contexts = operator.attrgetter("additional_contexts")


def _check_calls(calls: tuple[object, ...]) -> None:
    """Raise for the first call that is not a :class:`ToolCall` or repeats a ``call_id``."""
    seen: set[str] = set()
    for call in calls:
        if not isinstance(call, ToolCall):
            raise TypeError(f"calls must hold ToolCall objects, got {call!r}")
        if call.call_id in seen:
            raise ValueError(f"call_id {call.call_id!r} appears more than once in the batch")
        seen.add(call.call_id)


def _one_exception(group: BaseException, failures: list[Exception]) -> BaseException:
    """The one exception :func:`run_tool_calls` raises for what its nursery raised.

    The scheduler catches every ``Exception`` itself (into ``failures``), so the group holds
    ``trio.Cancelled`` and other ``BaseException``\\ s (``KeyboardInterrupt``...).
    """
    leaves = leaf_exceptions(group)
    serious = [leaf for leaf in leaves if not isinstance(leaf, trio.Cancelled)]
    if serious:
        if failures:
            for failure in failures:
                logger.error("an internal failure of the batch", exc_info=failure)
        # Cancelled leaves were the nursery tearing down around these.
        return serious[0] if len(serious) == 1 else group
    if failures:
        # Like Trio with a group of Cancelled and an error: the error is what propagates.
        return first_failure(failures)
    # Only Cancelled: they are interchangeable (the cancelled scope catches any of them).
    return leaves[0]


async def _close_after_interruption(batch: Batch) -> None:
    """Balance the journal after an interruption, before it propagates.

    Started calls are committed with the result the registry published for them (also
    when ``execute`` then raised); unstarted calls get ``record_call`` and the synthetic
    ``ABORTED_BEFORE_DISPATCH``.  A failing journal write is logged and ends this.
    """
    try:
        for index in range(batch.committed, len(batch.calls)):
            if index < batch.next:
                result = batch.results[index] or batch.published[index]
                if result is None:  # pragma: no cover - the registry always publishes
                    result = aborted(body_invoked=True, synthetic=True)
            else:
                if batch.recorded <= index:
                    await record_call(batch, index)
                result = batch._synthetic(index)
            batch.results[index] = result
            await record_result(batch, index, result)
            batch.committed = index + 1
    except Exception:
        logger.exception("the journal failed while closing an interrupted batch")


def _outcome(batch: Batch) -> BatchOutcome:
    """The outcome of a batch whose every call is committed."""
    assert batch.committed == len(batch.calls)
    given = tuple(batch.results)
    # Every call has its result (checked in C, by identity: no result's __eq__ runs).
    assert not any(map(operator.is_, given, repeat(None)))
    results = cast("tuple[ToolResult, ...]", given)
    # Iterated in C (map, filter, chain): this looks at every result of the batch.
    concludes_turn = any(map(_concludes_turn, results))
    contexts: tuple[AdditionalContext, ...] = tuple(
        chain.from_iterable(filter(None, map(_contexts, results)))
    )
    halt: Halt | None = None
    if batch.halted:  # only a halted batch has a halt to look for
        halt = next((result.halt for result in results if result.halt is not None), None)
    return BatchOutcome(
        results=results,
        aborted=batch.signal.cancelled,
        halt=halt,
        concludes_turn=concludes_turn,
        contexts=contexts,
    )
