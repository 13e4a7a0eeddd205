"""The driver of a batch: the state of one :func:`~trio_tools.run_tool_calls` and the task
that advances it.

One *driver* (the body of the batch's nursery) makes every journal write, one step at a
time: commit the next result in model order, else close the next unstarted call
synthetically once the batch stops, else start the next call, else wait for something to
change.  Each started call runs the registry's pipeline in its own task and only reports
back (gate passed, slot freed, settled) through its :class:`~._batch_call.BatchCall`.  So starts,
commits and journal writes happen in model order by construction, and the journal never
sees two writes at once.

Without a journal a commit is a counter and a start writes nothing, so while the driver is
parked the reports stand in for it (see :meth:`Batch.changed`): the driver only starts
the first call, closes a stopped batch and returns, and a batch of N calls costs no
context switch into the driver per call.  The start decision still happens where the
woken driver would have taken it (in the next call's own task, once the reporting task
yielded), with the same checks.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable

import trio

from ._batch_call import BatchCall
from ._calls import ToolCall
from ._registry import ToolRegistry
from ._results import ToolResult, aborted
from ._signal import CancelReason, CancelSignal
from ._transcript import Journal
from ._util import logger

# Every unstarted call of a stopped batch gets this (frozen, so one object serves them all).
_SYNTHETIC = aborted(body_invoked=False, synthetic=True)


def _not_driving(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("calls start only once drive() runs")


def _first_failure(failures: list[Exception]) -> Exception:
    for other in failures[1:]:
        logger.error("a further internal failure of the batch", exc_info=other)
    return failures[0]


class Batch:
    """The state of one :func:`run_tool_calls`; only the driver changes the counters."""

    __slots__ = (
        "agent",
        "barrier_for",
        "calls",
        "candidate",
        "committed",
        "context",
        "exclusive_index",
        "failures",
        "gate_passed",
        "halted",
        "in_flight",
        "inputs",
        "journal",
        "marks_dispatch",
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
        "start_soon",
        "waiting",
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
        self.marks_dispatch = self.record_dispatch is not None
        self.agent = agent
        self.on_progress = on_progress
        # Each call's input and hooks, from its classification until it starts.
        self.inputs: list[BatchCall | None] = [None] * count
        self.results: list[ToolResult | None] = [None] * count
        # What the registry published for each call, even if its execute() then raised.
        self.published: list[ToolResult | None] = [None] * count
        self.gate_passed = [False] * count
        self.recorded = 0  # calls whose record_call was written (a prefix, model order)
        self.next: int = 0  # calls started or closed synthetically (a prefix)
        self.committed = 0  # calls whose result was written (a prefix)
        self.in_flight = 0  # parallel calls whose pipeline has not returned
        self.exclusive_index = -1  # the last exclusive call started
        self.barrier_for = -1  # a call classified exclusive, waiting for its barrier
        self.halted = False
        self.failures: list[Exception] = []
        # The driver while it is parked in _wait_changed (see changed()), else None.
        self.waiting: trio.lowlevel.Task | None = None
        self.candidate = False  # a candidate call task is spawned, not yet run
        # Set by drive(): where calls start (the nursery's start_soon), and the context
        # they start in.
        self.start_soon: Callable[..., None] = _not_driving
        self.context = contextvars.Context()

    # -- what the call tasks and the signal report ---------------------------------------

    def on_signal(self, _reason: CancelReason) -> None:
        self._wake()

    def _fail(self, exc: Exception) -> None:
        self.failures.append(exc)
        self._wake()

    def changed(self) -> None:
        """A call task changed the state: a gate passed, a slot freed, a result came.

        If the driver is awake, its next step sees the change.  If it is parked and the
        batch has no journal, its steps need no journal write, and the report stands in
        for waking it: it commits the ready results (a counter, without a journal) and, if
        the next call may start, spawns that call's task as a *candidate*, which makes the
        start decision itself when it first runs (see :meth:`_call`): where the woken
        driver would have made it, one schedule point later, but without the driver's
        context switch and the extra step per call.  The driver is woken for the rest:
        the end of the batch, a stop (a halt, the signal, an internal failure).
        """
        if self.waiting is None:
            return
        if self.journal is None:
            # In one function: this runs twice per call of the batch.
            try:
                results = self.results
                count = len(results)
                index = self.committed
                while index < count and results[index] is not None:
                    index += 1
                self.committed = index
                if not (
                    index == count
                    or self.failures
                    or self.halted
                    or self.signal._reason is not None  # `.cancelled`, without the call
                ):
                    index = self.next
                    if (
                        index < count
                        and not self.candidate
                        and (index == 0 or self.gate_passed[index - 1])
                        and self.exclusive_index < self.committed
                        and self.in_flight < self.max_parallel
                        and (self.barrier_for != index or self.committed == index)
                    ):
                        # What can still keep it from starting is decided when the
                        # candidate runs.  Spawned in the caller's context, like the
                        # driver's starts (a task copies its spawner's context, and this
                        # is a call task).
                        self.candidate = True
                        self.context.run(
                            self.start_soon,
                            self._call,
                            index,
                            None,
                            name=f"tool call {self.calls[index].call_id!r}",
                        )
                    return
            except Exception as exc:  # a bug: an internal failure, as in the driver
                self.failures.append(exc)
        self._wake()

    async def _call(self, index: int, mode: str | None) -> None:
        """The task of call ``index``, started by the driver in ``mode``, or a candidate
        (``mode`` is ``None``) that decides first, as the woken driver's next step would:
        it gives way to the driver if the batch stopped or Trio cancelled the parked driver
        (nothing starts after a cancellation), else the call is classified right before it
        starts; a call that must wait for its barrier gets a new candidate later."""
        if mode is None:
            self.candidate = False
            try:
                if (
                    self.waiting is None
                    or self.failures
                    or self.halted
                    or self.signal._reason is not None  # `.cancelled`, without the call
                ):
                    self._wake()  # the driver takes over: it closes the unstarted calls
                    return
                assert index == self.next  # one candidate at a time, only while parked
                # _may_start held when the candidate was spawned, and still holds.
                call = self.inputs[index]
                if call is None:
                    call = BatchCall(self, index, self.calls[index])
                mode = self.registry._execution_mode(call)
                if mode != "parallel" and self.committed < index:
                    self.inputs[index] = call
                    self.barrier_for = index  # wait until every earlier call is committed
                    return
                self.recorded = index + 1  # no journal: record_call writes nothing
                if mode == "parallel":
                    self.in_flight += 1
                    call._slot_held = True
                else:
                    self.exclusive_index = index
                self.next = index + 1
                self.inputs[index] = None
            except Exception as exc:  # a bug: an internal failure, as in the driver
                self._fail(exc)
                return
        else:
            call = self.inputs[index]
            assert call is not None  # made by _classify
            self.inputs[index] = None  # the call holds it: freed when it returns
            call._slot_held = mode == "parallel"
        result: ToolResult | None = None
        try:
            result = await self.registry._execute(call, call)
            if type(result) is not ToolResult and not isinstance(result, ToolResult):
                raise TypeError(f"registry.execute() returned {result!r}, not a ToolResult")
        except Exception as exc:
            # The registry turns every tool and stage failure into a result: this is a bug,
            # an internal failure of the batch.
            self._fail(exc)
            result = None
        except BaseException:
            # Ambient cancellation, KeyboardInterrupt: the batch is interrupted, and what
            # the registry published is what closing it commits.
            self.published[index] = call.published
            raise
        finally:
            # Also when execute() raises (ambient cancellation, KeyboardInterrupt): the
            # call has settled either way.
            self.gate_passed[index] = True
            if call._slot_held:  # a call that never dispatched frees its slot now
                call.free_slot()
        if result is not None:
            record_settled = self.record_settled
            if record_settled is not None:
                self.changed()  # the gate and the slot, while the result is written
                try:
                    # Durable before the commit, which may wait for slower siblings.
                    with trio.CancelScope(shield=True):
                        await record_settled(self.calls[index], result)
                except Exception as exc:
                    self._fail(exc)
            self.results[index] = result
            if result.halt is not None:
                self.halted = True
        self.changed()

    # -- the driver ----------------------------------------------------------------------

    async def drive(self, nursery: trio.Nursery) -> None:
        """Make progress until every call is committed, or an internal failure stops it.

        Returning lets the nursery drain the started calls without cancelling them.
        """
        self.start_soon = nursery.start_soon
        # Calls start in the context of the caller's task (Trio gives each task a copy of
        # its spawner's), also when a call's report starts the next one (see changed()).
        self.context = contextvars.copy_context()
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
        if self.candidate:
            return False  # the candidate call task decides (see changed())
        mode = self._admit(index)
        if mode is None:
            return False
        await self._record_call(index)
        if self.failures or self.halted or self.signal.cancelled:
            return True  # stopped while the call was being recorded: _step closes it
        await trio.lowlevel.checkpoint_if_cancelled()  # never a schedule point otherwise
        self._launch(nursery, index, mode)
        return True

    def _admit(self, index: int) -> str | None:
        """The mode call ``index`` starts in, if it may start now, else ``None``.

        It may start once the previous call passed its gate or settled, no exclusive call
        holds the batch, a pool slot is free, and (classified exclusive) every earlier call
        is committed.
        """
        return self._classify(index) if self._may_start(index) else None

    def _may_start(self, index: int) -> bool:
        """What :meth:`_admit` checks before classifying.  Once true it stays true until a
        call starts: gates pass, commits advance and slots free, never the other way."""
        return (
            (index == 0 or self.gate_passed[index - 1])
            # An exclusive call holds the batch until it is committed.
            and self.exclusive_index < self.committed
            and self.in_flight < self.max_parallel
            and (self.barrier_for != index or self.committed == index)
        )

    def _classify(self, index: int) -> str | None:
        """The rest of :meth:`_admit` (:meth:`_may_start` holds): classify the call right
        before it starts."""
        # After its barrier, a call is classified again: the calls it waited for may have
        # changed the registry.
        mode = self.registry._execution_mode(self._input(index))
        if mode != "parallel" and self.committed < index:
            self.barrier_for = index  # wait until every earlier call is committed
            return None
        return mode

    def _launch(self, nursery: trio.Nursery, index: int, mode: str) -> None:
        """Start call ``index`` (admitted, recorded) in its own task."""
        self._claim(index, mode)
        nursery.start_soon(self._call, index, mode, name=f"tool call {self.calls[index].call_id!r}")

    def _claim(self, index: int, mode: str) -> None:
        """Count call ``index`` (admitted, recorded) as started in ``mode``."""
        if mode == "parallel":
            self.in_flight += 1
        else:
            self.exclusive_index = index
        self.next = index + 1

    def _synthetic(self, index: int) -> ToolResult:
        """The synthetic result of a call the batch never starts.

        It does not pass through the registry's pipeline, but the registry's instruments
        hear of it (with the view the call would have had), so a trace shows every call.
        """
        if self.registry._stages.instruments is not None:
            self.registry._report_synthetic(self._input(index), _SYNTHETIC)
        return _SYNTHETIC

    def _input(self, index: int) -> BatchCall:
        call = self.inputs[index]
        if call is None:
            call = self.inputs[index] = BatchCall(self, index, self.calls[index])
        return call

    async def _wait_changed(self) -> None:
        """Park the driver until a report or the signal wakes it (or Trio cancels it).

        Called right after a step found nothing to do, with no schedule point in between,
        so no report is lost: every report made while the driver is awake changes the
        state its next step looks at.
        """
        self.waiting = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort_wait)

    def _abort_wait(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        # Cancellation (or KeyboardInterrupt) unparks the driver: from now on the reports
        # wake it instead of standing in for it, so nothing starts after a cancellation.
        self.waiting = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _wake(self) -> None:
        task = self.waiting
        if task is not None:
            self.waiting = None
            trio.lowlevel.reschedule(task)

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
