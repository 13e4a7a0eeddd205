"""The state of one :func:`~trio_tools.run_tool_calls` (:class:`Batch`) and what its calls
do with it: each call's input and hooks (:class:`BatchCall`), the call tasks, and the
reports with which they advance the batch while its driver (``_driver.py``) is parked.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import contextvars
import functools
from collections.abc import Awaitable, Callable
from typing import final

import trio

from ._calls import ToolCall
from ._input import ExecutionToken, ToolExecutionInput
from ._json import JSONText
from ._registry import ToolRegistry
from ._results import ToolResult, aborted
from ._signal import CancelReason, CancelSignal
from ._transcript import Journal

# Every unstarted call of a stopped batch gets this (frozen, so one object serves them all).
_SYNTHETIC = aborted(body_invoked=False, synthetic=True)
_EMPTY_OBJECT_TEXT = JSONText("{}")


def _not_driving(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("calls start only once the driver runs")


@final
class BatchCall:
    """Call ``index`` of a batch: the registry's input for it (``_stages.CallInput``) and
    its private hooks (``_stages.CallHooks``).

    The input has the fields a :class:`ToolExecutionInput` would have: the model's raw
    JSON text (a ``str``) as :class:`~trio_tools._json.JSONText`, for the registry to parse
    at entry, the batch's signal and agent, no parent, and ``on_progress`` bound to the
    call's id.  Nothing outside the library sees it (the registry reads each field once at
    entry, and classification the name and the arguments), so the batch builds this one
    plain object per call rather than a frozen input plus its hooks.
    """

    __slots__ = (
        "_batch",
        "_index",
        "agent",
        "arguments",
        "call_id",
        "holds_slot",
        "marks_dispatch",
        "name",
        "on_progress",
        "parent",
        "published",
        "signal",
    )

    def __init__(self, batch: Batch, index: int, call: ToolCall) -> None:
        """
        Raises:
            TypeError: what ``ToolExecutionInput`` raises for the call's id or name.
        """
        call_id, name, arguments = call.call_id, call.name, call.arguments
        if type(arguments) is str and arguments == "{}":
            # A model's most common arguments: one text, parsed once, serves every such call
            # (its parse is the same shared empty object whichever text object it comes from).
            arguments = _EMPTY_OBJECT_TEXT
        elif isinstance(arguments, str):
            arguments = JSONText(arguments)
        on_progress = batch.on_progress
        if type(call_id) is not str or type(name) is not str:
            # What the input's constructor rejects: let it raise its own error.
            ToolExecutionInput(call_id=call_id, name=name, arguments=arguments, signal=batch.signal)
        self.call_id = call_id
        self.name = name
        self.arguments: object = arguments
        self.signal: CancelSignal = batch.signal
        self.agent: object | None = batch.agent
        self.parent: ExecutionToken | None = None
        self.on_progress: Callable[[object], None] | None = (
            None if on_progress is None else functools.partial(on_progress, call_id)
        )
        self._batch = batch
        self._index = index
        # Set when the call starts in a slot of a pool that can fill up.
        self.holds_slot = False
        # Only a journal with `record_dispatch` has a marker to write before the body.
        self.marks_dispatch = batch.marks_dispatch
        self.published: ToolResult | None = None  # set by the registry (see CallHooks)

    # -- the hooks -----------------------------------------------------------------------

    def gate_passed(self) -> None:
        batch = self._batch
        batch.gate_passed[self._index] = True
        if batch.waiting is not None:  # an awake driver sees it at its next step
            batch.changed()

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
        # The pool slot frees here, before post-execute.
        if self.free_slot():
            self._batch.changed()

    def free_slot(self) -> bool:
        """Free the call's pool slot if it still holds one (at most once); ``True`` if a
        start may have been waiting for it (the pool was full)."""
        if not self.holds_slot:
            return False
        self.holds_slot = False
        batch = self._batch
        batch.in_flight -= 1
        # Below a full pool, the slot decides nothing: every other change reports itself.
        return batch.in_flight + 1 >= batch.max_parallel


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
        "pooled",
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
        # Only a pool that can fill up counts its slots: with no more calls than slots, a
        # start never waits for one, and the calls skip the counting.
        self.pooled = max_parallel < count
        self.in_flight = 0  # parallel calls holding a counted slot
        self.exclusive_index = -1  # the last exclusive call started
        self.barrier_for = -1  # a call classified exclusive, waiting for its barrier
        self.halted = False
        self.failures: list[Exception] = []
        # The driver while it is parked in _wait_changed (see changed()), else None.
        self.waiting: trio.lowlevel.Task | None = None
        self.candidate = False  # a candidate call task is spawned, not yet run
        # Set by the driver: where calls start (the nursery's start_soon), and the context
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
                if self._stopped():
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
                if self._stopped():
                    # Stopped during classification (a concurrency_safe callable fired the
                    # signal or cancelled the batch): as after the driver's classification,
                    # the call does not start, and the driver closes it.
                    self.inputs[index] = call
                    self._wake()
                    return
                self.recorded = index + 1  # no journal: record_call writes nothing
                # What _claim does, inline: this runs once per call of the batch.
                if mode != "parallel":
                    self.exclusive_index = index
                elif self.pooled:
                    self.in_flight += 1
                    call.holds_slot = True
                self.next = index + 1
                self.inputs[index] = None
            except Exception as exc:  # a bug: an internal failure, as in the driver
                self._fail(exc)
                return
        else:
            call = self.inputs[index]
            assert call is not None  # made by _classify
            self.inputs[index] = None  # the call holds it: freed when it returns
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
            if call.holds_slot:  # a call that never dispatched frees its slot now
                call.free_slot()
        if result is not None:
            if result.halt is not None:
                # Known from now on, not only once the result is written: nothing may start
                # while a durable journal settles it.
                self.halted = True
            record_settled = self.record_settled
            if record_settled is not None:
                self.changed()  # the gate and the slot, while the result is written
                try:
                    # Durable before the commit, which may wait for slower siblings.
                    with trio.CancelScope(shield=True):
                        await record_settled(self.calls[index], result)
                except Exception as exc:
                    self._fail(exc)
                except BaseException:
                    # The write raised KeyboardInterrupt or similar: the call is published
                    # (and maybe settled), and closing the batch commits that result.
                    self.published[index] = result
                    raise
            self.results[index] = result
        self.changed()

    def _stopped(self) -> bool:
        """Whether a candidate must give way to the driver: the driver is no longer parked
        (Trio cancelled it, or a report woke it), or the batch stopped."""
        return (
            self.waiting is None
            or bool(self.failures)
            or self.halted
            or self.signal._reason is not None  # `.cancelled`, without the call
        )

    # -- what the driver and the call tasks share -----------------------------------

    def _may_start(self, index: int) -> bool:
        """Whether call ``index`` may start now, before it is classified: the previous call
        passed its gate or settled, no exclusive call holds the batch, a pool slot is free,
        and no barrier keeps it waiting.  Once true it stays true until a call starts:
        gates pass, commits advance and slots free, never the other way."""
        return (
            (index == 0 or self.gate_passed[index - 1])
            # An exclusive call holds the batch until it is committed.
            and self.exclusive_index < self.committed
            and self.in_flight < self.max_parallel
            and (self.barrier_for != index or self.committed == index)
        )

    def _classify(self, index: int) -> str | None:
        """The mode call ``index`` starts in (:meth:`_may_start` holds), classified right
        before it starts, or ``None`` if, exclusive, it must wait until every earlier call
        is committed."""
        # After its barrier, a call is classified again: the calls it waited for may have
        # changed the registry.
        mode = self.registry._execution_mode(self._input(index))
        if mode != "parallel" and self.committed < index:
            self.barrier_for = index  # wait until every earlier call is committed
            return None
        return mode

    def _claim(self, index: int, mode: str) -> None:
        """Count call ``index`` (admitted, recorded, its input made) as started in
        ``mode``."""
        if mode != "parallel":
            self.exclusive_index = index
        elif self.pooled:
            self.in_flight += 1
            self._input(index).holds_slot = True
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
