"""The driver of a batch: the state of one :func:`~trio_tools.run_tool_calls` and the task
that advances it.

One *driver* (the body of the batch's nursery) makes every decision and every journal
write, one step at a time: commit the next result in model order, else close the next
unstarted call synthetically once the batch stops, else start the next call, else wait for
something to change.  Each started call runs the registry's pipeline in its own task and
only reports back (gate passed, settled) through its :class:`_CallReport`.  So starts,
commits and journal writes happen in model order by construction, and the journal never
sees two writes at once.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import final

import trio

from ._calls import BatchOutcome, ToolCall
from ._input import ToolExecutionInput
from ._json import JSONText
from ._registry import ToolRegistry
from ._results import ToolResult, aborted
from ._signal import CancelReason, CancelSignal
from ._transcript import Journal
from ._util import logger


def _parse_arguments(arguments: object) -> object:
    """The model's raw JSON text, for the registry to parse at entry (see :class:`ToolCall`);
    other values as given."""
    return JSONText(arguments) if isinstance(arguments, str) else arguments


# Every unstarted call of a stopped batch gets this (frozen, so one object serves them all).
_SYNTHETIC = aborted(body_invoked=False, synthetic=True)


def _first_failure(failures: list[Exception]) -> Exception:
    for other in failures[1:]:
        logger.error("a further internal failure of the batch", exc_info=other)
    return failures[0]


@final
class _CallReport:
    """The registry's private hooks for one call of the batch (``_stages.CallHooks``)."""

    __slots__ = ("_batch", "_index", "_slot_held")

    def __init__(self, batch: _Batch, index: int, parallel: bool) -> None:
        self._batch = batch
        self._index = index
        self._slot_held = parallel

    def gate_passed(self) -> None:
        self._batch.gate_passed[self._index] = True
        self._batch.changed.set()

    async def dispatching(self) -> bool:
        batch = self._batch
        record_dispatch = batch.record_dispatch
        if record_dispatch is None:
            return True
        try:
            # The write-ahead marker: a write that began always completes.
            with trio.CancelScope(shield=True):
                await record_dispatch(batch.calls[self._index])
        except Exception as exc:
            batch._fail(exc)
            return False
        return True

    def dispatch_settled(self) -> None:
        # The pool slot frees here, before post-execute; at most once.
        if self._slot_held:
            self._slot_held = False
            self._batch.in_flight -= 1
            self._batch.changed.set()

    def published(self, result: ToolResult) -> None:
        self._batch.published[self._index] = result


class _Batch:
    """The state of one :func:`run_tool_calls`; only the driver changes the counters."""

    __slots__ = (
        "agent",
        "barrier_for",
        "calls",
        "changed",
        "committed",
        "exclusive_index",
        "failures",
        "gate_passed",
        "halted",
        "in_flight",
        "inputs",
        "journal",
        "max_parallel",
        "next",
        "on_progress",
        "published",
        "record_dispatch",
        "record_settled",
        "recorded",
        "registry",
        "results",
        "signal",
    )

    def __init__(
        self,
        registry: ToolRegistry,
        calls: tuple[ToolCall, ...],
        signal: CancelSignal,
        max_parallel: int,
        journal: Journal | None,
        agent: object | None,
        on_progress: Callable[[str, object], None] | None,
    ) -> None:
        count = len(calls)
        self.registry = registry
        self.calls = calls
        self.signal = signal
        self.max_parallel = max_parallel
        self.journal = journal
        # A DurableJournal's extra methods, each used when the journal has it.
        self.record_dispatch: Callable[[ToolCall], Awaitable[None]] | None = getattr(
            journal, "record_dispatch", None
        )
        self.record_settled: Callable[[ToolCall, ToolResult], Awaitable[None]] | None = getattr(
            journal, "record_settled", None
        )
        self.agent = agent
        self.on_progress = on_progress
        self.inputs: list[ToolExecutionInput | None] = [None] * count
        self.results: list[ToolResult | None] = [None] * count
        # What the registry published for each call, even if its execute() then raised.
        self.published: list[ToolResult | None] = [None] * count
        self.gate_passed = [False] * count
        self.recorded = 0  # calls whose record_call was written (a prefix, model order)
        self.next = 0  # calls started or closed synthetically (a prefix)
        self.committed = 0  # calls whose result was written (a prefix)
        self.in_flight = 0  # parallel calls whose pipeline has not returned
        self.exclusive_index = -1  # the last exclusive call started
        self.barrier_for = -1  # a call classified exclusive, waiting for its barrier
        self.halted = False
        self.failures: list[Exception] = []
        self.changed = trio.Event()

    # -- what the call tasks and the signal report ---------------------------------------

    def on_signal(self, _reason: CancelReason) -> None:
        self.changed.set()

    def _fail(self, exc: Exception) -> None:
        self.failures.append(exc)
        self.changed.set()

    async def _run_call(self, index: int, input: ToolExecutionInput, parallel: bool) -> None:
        report = _CallReport(self, index, parallel)
        result: ToolResult | None = None
        try:
            result = await self.registry._execute(input, report)
            if not isinstance(result, ToolResult):
                raise TypeError(f"registry.execute() returned {result!r}, not a ToolResult")
        except Exception as exc:
            # The registry turns every tool and stage failure into a result: this is a bug,
            # an internal failure of the batch.
            self._fail(exc)
            result = None
        finally:
            # Also when execute() raises (ambient cancellation, KeyboardInterrupt): the
            # call has settled either way.
            self.gate_passed[index] = True
            report.dispatch_settled()  # a call that never dispatched frees its slot now
        if result is not None:
            record_settled = self.record_settled
            if record_settled is not None:
                try:
                    # Durable before the commit, which may wait for slower siblings.
                    with trio.CancelScope(shield=True):
                        await record_settled(self.calls[index], result)
                except Exception as exc:
                    self._fail(exc)
            self.results[index] = result
            if result.halt is not None:
                self.halted = True
        self.changed.set()

    async def close_after_interruption(self) -> None:
        """Balance the journal after an interruption, before it propagates.

        Started calls are committed with the result the registry published for them (also
        when ``execute`` then raised); unstarted calls get ``record_call`` and the synthetic
        ``ABORTED_BEFORE_DISPATCH``.  A failing journal write is logged and ends this.
        """
        try:
            for index in range(self.committed, len(self.calls)):
                if index < self.next:
                    result = self.results[index] or self.published[index]
                    if result is None:  # pragma: no cover - the registry always publishes
                        result = aborted(body_invoked=True, synthetic=True)
                else:
                    if self.recorded <= index:
                        await self._record_call(index)
                    result = self._synthetic(index)
                self.results[index] = result
                await self._record_result(index, result)
                self.committed = index + 1
        except Exception:
            logger.exception("the journal failed while closing an interrupted batch")

    # -- the driver ----------------------------------------------------------------------

    async def drive(self, nursery: trio.Nursery) -> None:
        """Make progress until every call is committed, or an internal failure stops it.

        Returning lets the nursery drain the started calls without cancelling them.
        """
        try:
            while not self.failures and await self._step(nursery):
                pass
        except Exception as exc:
            self._fail(exc)

    async def _step(self, nursery: trio.Nursery) -> bool:
        """One step of progress; ``False`` once every call is committed."""
        # Ambient cancellation stops the batch at its next step: a journal write that was
        # in progress has completed (shielded), nothing more is written or started.
        await trio.lowlevel.checkpoint_if_cancelled()
        index = self.committed
        if index == len(self.calls):
            return False
        result = self.results[index]
        if result is not None:
            end = index + 1
            if self.record_settled is not None:
                # A durable journal accepts concurrent writes: commit every result that is
                # ready, in one round of overlapping writes (each result is durable
                # already, from record_settled; what the commits add is that they are
                # final).
                results = self.results
                while end < len(results) and results[end] is not None:
                    end += 1
            if end == index + 1:
                await self._record_result(index, result)
            else:
                await self._record_results(index, end)
            self.committed = end
        elif self.halted or self.signal.cancelled:
            if index < self.next:
                await self._wait_changed()  # drain: started calls settle on their own
            elif self.recorded == index:
                await self._record_call(index)
            else:
                self.results[index] = self._synthetic(index)
                self.next = index + 1
        elif self.next == len(self.calls) or not await self._try_start(nursery):
            await self._wait_changed()
        return True

    async def _try_start(self, nursery: trio.Nursery) -> bool:
        """Start the next call if it may start now; ``True`` if anything was done.

        The call is classified right before it starts; ``record_call`` is written between
        the two, so a recorded call without a result is one that may have run.
        """
        index = self.next
        if index > 0 and not self.gate_passed[index - 1]:
            return False
        if self.exclusive_index >= self.committed:
            return False  # an exclusive call holds the batch until it is committed
        if self.in_flight >= self.max_parallel:
            return False
        input = self._input(index)
        if self.barrier_for != index:
            mode = self.registry.execution_mode(input)
            if mode != "parallel" and self.committed < index:
                self.barrier_for = index
                return False
        elif self.committed < index:
            return False
        else:
            # Classified again: the calls it waited for may have changed the registry.
            mode = self.registry.execution_mode(input)
        await self._record_call(index)
        if self.failures or self.halted or self.signal.cancelled:
            return True  # stopped while the call was being recorded: _step closes it
        await trio.lowlevel.checkpoint_if_cancelled()  # never a schedule point otherwise
        parallel = mode == "parallel"
        if parallel:
            self.in_flight += 1
        else:
            self.exclusive_index = index
        self.next = index + 1
        nursery.start_soon(
            self._run_call, index, input, parallel, name=f"tool call {input.call_id!r}"
        )
        return True

    def _synthetic(self, index: int) -> ToolResult:
        """The synthetic result of a call the batch never starts.

        It does not pass through the registry's pipeline, but the registry's instruments
        hear of it (with the view the call would have had), so a trace shows every call.
        """
        if self.registry._stages.instruments is not None:
            self.registry._report_synthetic(self._input(index), _SYNTHETIC)
        return _SYNTHETIC

    def _input(self, index: int) -> ToolExecutionInput:
        input = self.inputs[index]
        if input is None:
            call = self.calls[index]
            on_progress = self.on_progress
            input = self.inputs[index] = ToolExecutionInput(
                call_id=call.call_id,
                name=call.name,
                arguments=_parse_arguments(call.arguments),
                signal=self.signal,
                agent=self.agent,
                on_progress=None
                if on_progress is None
                else functools.partial(on_progress, call.call_id),
            )
        return input

    async def _wait_changed(self) -> None:
        await self.changed.wait()
        # Reset before looking at the state again: a report made from now on sets the new
        # event, so none is lost.
        self.changed = trio.Event()

    async def _record_call(self, index: int) -> None:
        journal = self.journal
        if journal is not None:
            # A journal write that began must complete: a half-written transcript is what
            # the journal exists to prevent, whatever is being cancelled around us.
            with trio.CancelScope(shield=True):
                await journal.record_call(self.calls[index])
        self.recorded = index + 1

    async def _record_result(self, index: int, result: ToolResult) -> None:
        journal = self.journal
        if journal is not None:
            # Same as _record_call: a started write always completes.
            with trio.CancelScope(shield=True):
                await journal.record_result(self.calls[index], result)

    async def _record_results(self, start: int, end: int) -> None:
        """Commit the ready results ``start:end`` with overlapping journal writes."""
        journal = self.journal
        assert journal is not None
        failures: list[Exception] = []

        async def write(index: int, result: ToolResult) -> None:
            try:
                await journal.record_result(self.calls[index], result)
            except Exception as exc:
                failures.append(exc)

        # Same as _record_call: a started write always completes.
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for index in range(start, end):
                    result = self.results[index]
                    assert result is not None  # the caller checked: every one is ready
                    nursery.start_soon(write, index, result)
        if failures:
            raise _first_failure(failures)

    def outcome(self) -> BatchOutcome:
        results = tuple(result for result in self.results if result is not None)
        assert len(results) == len(self.calls)
        return BatchOutcome(
            results=results,
            aborted=self.signal.cancelled,
            halt=next((r.halt for r in results if r.halt is not None), None),
            concludes_turn=any(r.concludes_turn for r in results),
            contexts=tuple(c for r in results for c in r.additional_contexts),
        )
