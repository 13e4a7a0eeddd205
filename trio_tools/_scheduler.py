"""The batch scheduler: one model step's tool calls, always a balanced transcript.

:func:`run_tool_calls` runs the calls of one model step through a :class:`ToolRegistry`.
One *driver* (the body of the batch's nursery) makes every decision and every journal
write, one step at a time: commit the next result in model order, else close the next
unstarted call synthetically once the batch stops, else start the next call, else wait for
something to change.  Each started call runs the registry's pipeline in its own task and
only reports back (gate passed, settled).  So starts, commits and journal writes happen in
model order by construction, and the journal never sees two writes at once.
"""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal, Protocol, final

import attrs
import trio

from ._input import ToolExecutionInput
from ._json import JSONText
from ._registry import ToolRegistry
from ._results import AdditionalContext, Halt, ToolResult, aborted
from ._signal import CancelReason, CancelSignal
from ._util import leaf_exceptions, logger
from ._wire import WIRE_VERSION, WireReader, json_to_wire

__all__ = [
    "BatchOutcome",
    "DurableJournal",
    "Journal",
    "JournalEvent",
    "MemoryJournal",
    "ToolCall",
    "run_tool_calls",
]

_str = attrs.validators.instance_of(str)


@final
@attrs.frozen
class ToolCall:
    """One tool call as the model asked for it: ``ToolCall(call_id, name, arguments)``.

    ``arguments`` is the model's raw JSON text (a ``str``) or an already-parsed JSON value.
    Raw text is parsed when the call starts, losslessly: integers of any size are kept
    exactly, and empty or whitespace-only text means ``{}``.  Text that is not valid JSON
    (``NaN`` and ``Infinity`` included) is ``INVALID_ARGS`` with the message ``invalid
    arguments: not valid JSON ({reason} at line L column C)``, and a number too large for
    a float (``1e400``) is ``INVALID_ARGS`` at its path (``$.timeout: number out of
    range``); a raw tool (one without an argument type) receives such text unchanged, as
    the ``str``.  Text nested deeper than 512 arrays and objects is ``NOT_JSON``, as the
    same value would be.  To pass a JSON string value, pass its JSON text (``'"text"'``).
    The value is kept as given; the registry takes its frozen snapshot when the call
    starts.

    Unlike most multi-field values of the library, the fields may be given positionally:
    they mirror the ``(id, name, arguments)`` triple every model API returns.
    """

    call_id: str = attrs.field(validator=_str)
    name: str = attrs.field(validator=_str)
    arguments: object

    def to_dict(self) -> dict[str, Any]:
        """The call's wire form: ``{"v": 1, "call_id": ..., "name": ..., "arguments": ...}``.

        A fresh ``dict`` of plain JSON values.  Raw JSON text stays the ``str`` it is;
        parsed arguments are copied as plain JSON (arrays as ``list``, objects as
        ``dict``), so ``ToolCall.from_dict(call.to_dict()) == call`` whenever the arguments
        hold no tuples (JSON has one kind of array, and it comes back as ``list``).

        Raises:
            ValueError: the arguments are not losslessly JSON-serializable.
        """
        arguments = self.arguments
        return {
            "v": WIRE_VERSION,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": arguments
            if type(arguments) is str
            else json_to_wire("ToolCall", "arguments", arguments),
        }

    @classmethod
    def from_dict(cls, data: object) -> ToolCall:
        """The call whose wire form (see :meth:`to_dict`) is ``data``.

        Every key is required.  The arguments are copied (plain JSON), never shared with
        ``data``.

        Raises:
            ValueError: ``data`` is not a wire form of this version: the message names the
                first bad field, also an unknown one.
        """
        reader = WireReader("ToolCall", "", data)
        reader.only(("v", "call_id", "name", "arguments"))
        reader.version()
        return cls(
            reader.typed("call_id", str), reader.typed("name", str), reader.json("arguments")
        )


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


@final
@attrs.frozen(kw_only=True)
class BatchOutcome:
    """What :func:`run_tool_calls` returns for one model step.

    ``results``: one per call, in model order.  ``aborted``: the step's signal had fired
    when the batch returned.  ``halt``: the first halt in model order, or ``None``.
    ``concludes_turn``: some result concludes the turn.  ``contexts``: every result's
    ``additional_contexts``, concatenated in model order.
    """

    results: tuple[ToolResult, ...]
    aborted: bool
    halt: Halt | None
    concludes_turn: bool
    contexts: tuple[AdditionalContext, ...]


def _parse_arguments(arguments: object) -> object:
    """The model's raw JSON text, for the registry to parse at entry (see :class:`ToolCall`);
    other values as given."""
    return JSONText(arguments) if isinstance(arguments, str) else arguments


# Every unstarted call of a stopped batch gets this (frozen, so one object serves them all).
_SYNTHETIC = aborted(body_invoked=False, synthetic=True)


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
    seen: set[str] = set()
    for call in batch_calls:
        if not isinstance(call, ToolCall):
            raise TypeError(f"calls must hold ToolCall objects, got {call!r}")
        if call.call_id in seen:
            raise ValueError(f"call_id {call.call_id!r} appears more than once in the batch")
        seen.add(call.call_id)
    if on_progress is not None and not callable(on_progress):
        raise TypeError(f"on_progress must be callable or None, got {on_progress!r}")
    # Ambient cancellation before anything is journaled; and a schedule point even for an
    # empty batch.
    await trio.lowlevel.checkpoint()

    batch = _Batch(registry, batch_calls, signal, max_parallel, journal, agent, on_progress)
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
            await batch.drive(nursery)
    except BaseException as exc:  # a group, or a lone one with loose exception groups
        error = _one_exception(exc, batch.failures)
        if not batch.failures:
            # An interruption (ambient cancellation, KeyboardInterrupt...), not an internal
            # failure: the transcript must still balance.  Shielded because the journal
            # writes are what the cancellation must not cut short.
            with trio.CancelScope(shield=True):
                await batch.close_after_interruption()
    finally:
        dispose()
    if error is None and batch.failures:
        error = _first_failure(batch.failures)
    if error is not None:
        # Raised outside the handler, so it does not drag the group along as its context.
        raise error
    return batch.outcome()


def _first_failure(failures: list[Exception]) -> Exception:
    for other in failures[1:]:
        logger.error("a further internal failure of the batch", exc_info=other)
    return failures[0]


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
        return _first_failure(failures)
    # Only Cancelled: they are interchangeable (the cancelled scope catches any of them).
    return leaves[0]


@final
class _CallReport:
    """The registry's private hooks for one call of the batch (``_pipeline._CallHooks``)."""

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
