"""Instruments: code that sees every tool call start and finish (tracing, metrics, logs).

An around-execute wrapper cannot do this job: it never sees the calls that end before
dispatch (unknown, invalid, denied, pre-aborted) nor the batch scheduler's synthetic
results.  The registry calls each instrument at entry and once the call's result is final,
for every call; the scheduler reports its synthetic results the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Literal, Protocol, cast

import trio

from ._util import logger

if TYPE_CHECKING:
    from ._execution import ToolExecution
    from ._results import ToolResult

__all__ = ["Instrument"]


class Instrument(Protocol):
    """What :meth:`ToolRegistry.add_instrument` takes: two synchronous methods.

    ``call_started(exec)`` runs when a call enters the registry, before any stage (also for
    calls that end at once: arguments that are not JSON, a pre-aborted caller, an unknown
    tool), in the task that awaits ``execute``.  It may return a context manager: the
    registry enters it right away and exits it right after ``call_finished``, so whatever
    it makes current -- an OpenTelemetry span, a context variable -- is current for every
    stage of the call, for the body, and for the tasks the body starts (Trio tasks inherit
    the context of the task that starts them), and no longer once the call is over.

    ``call_finished(exec, result)`` runs once with the call's one final result, before the
    result observers, also when ``execute`` then raises (ambient cancellation,
    ``KeyboardInterrupt``).  It is called only if ``call_started`` returned normally.

    Instruments start in registration order and finish in reverse order (the first
    registered is outermost).  Both methods are synchronous: they cannot wait, and so can
    never be interrupted.  An exception from either method, or from the context manager, is
    logged and changes nothing: the call and its result are the same as without the
    instrument.  A ``KeyboardInterrupt`` (or other ``BaseException``) from
    ``call_finished`` propagates out of ``execute`` only once the other instruments finished
    and the result observers saw the result.
    """

    def call_started(self, exec: ToolExecution) -> AbstractContextManager[object] | None:
        """A call entered the registry; optionally return a context manager for its span."""
        ...

    def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
        """The call's result is final; ``result`` is the object ``execute`` returns."""
        ...


# What an instrument may raise that is logged: its methods are synchronous, so a
# ``trio.Cancelled`` from one is stray (no scope of the call's is waiting for it).
_FAILURES = (Exception, trio.Cancelled)

_Entry = AbstractContextManager[object] | Literal[False] | None
"""One instrument's state during a call: the entered context manager, ``None`` (none
returned), or ``False`` (``call_started`` raised, so no ``call_finished``)."""


def check_instrument(instrument: object) -> None:
    """Raise ``TypeError`` unless ``instrument`` has callable ``call_started`` and
    ``call_finished`` methods."""
    for method in ("call_started", "call_finished"):
        if not callable(getattr(instrument, method, None)):
            raise TypeError(f"an instrument needs a callable {method}() method, got {instrument!r}")


def _start(instrument: Instrument, execution: ToolExecution) -> _Entry:
    try:
        manager = instrument.call_started(execution)
    except _FAILURES:
        logger.exception("instrument %r raised in call_started", instrument)
        return False
    if manager is not None:
        try:
            manager.__enter__()
        except _FAILURES:
            logger.exception("the context manager of instrument %r raised", instrument)
            return None
    return manager


def _finish(
    instrument: Instrument, entry: _Entry, execution: ToolExecution, result: ToolResult
) -> None:
    """Finish one instrument: its context manager is exited even when ``call_finished``
    raised a ``BaseException`` (which then propagates)."""
    if entry is False:
        return
    try:
        instrument.call_finished(execution, result)
    except _FAILURES:
        logger.exception("instrument %r raised in call_finished", instrument)
    finally:
        if entry is not None:
            try:
                entry.__exit__(None, None, None)
            except _FAILURES:
                logger.exception("the context manager of instrument %r raised", instrument)


class Instruments:
    """The registry's instruments, as each call captures them at entry.

    The registry drives them in steps, so that one instrument (the usual case) costs two
    plain method calls: ``state = start(view)`` (``start_failed()`` in the ``except`` block
    if it raised), ``enter(state)`` when that is not ``None``, and at the end
    ``finished(view, result)`` when the state is ``None`` (``finish_failed()`` if it raised)
    or else ``finish(state, view, result)``, which handles every state.  The state is the
    one instrument's :data:`_Entry`, or with several a list of them (never ``None``).
    """

    __slots__ = ("_all", "_one", "finished", "start")

    def __init__(self, instruments: tuple[Instrument, ...]) -> None:
        self._all = instruments
        one = instruments[0] if len(instruments) == 1 else None
        self._one = one
        # The instrument's own bound methods: no wrapper frame on the hot path.
        self.start: Callable[[ToolExecution], object] = (
            self._start_all if one is None else one.call_started
        )
        self.finished: Callable[[ToolExecution, ToolResult], None] = (
            self._finish_all if one is None else one.call_finished
        )

    def start_failed(self) -> Literal[False]:
        """Log the exception :attr:`start` raised (call it in the ``except`` block)."""
        logger.exception("instrument %r raised in call_started", self._one)
        return False

    def enter(self, state: object) -> object:
        """The state once :attr:`start` returned: a context manager it returned, entered.

        Raises:
            BaseException: what interrupted :attr:`start` of several instruments (see
                :class:`_Interrupted`): the state stays what :attr:`start` returned.
        """
        if self._one is None or state is False:
            if type(state) is _Interrupted:
                raise state.interrupt
            return state
        try:
            cast("AbstractContextManager[object]", state).__enter__()
        except _FAILURES:
            logger.exception("the context manager of instrument %r raised", self._one)
            return None
        return state

    def finish_failed(self) -> None:
        """Log the exception :attr:`finished` raised (call it in the ``except`` block)."""
        logger.exception("instrument %r raised in call_finished", self._one)

    def finish(self, state: object, execution: ToolExecution, result: ToolResult) -> None:
        """``call_finished`` of each started instrument in reverse order, each followed by
        the exit of its context manager; for any state.

        A ``KeyboardInterrupt`` or other ``BaseException`` from one instrument does not
        stop the others from finishing: the first one is re-raised once they all have.
        """
        one = self._one
        if one is None:
            entries = cast("list[_Entry]", state)
            fatal: BaseException | None = None
            for instrument, entry in zip(reversed(self._all), reversed(entries), strict=True):
                try:
                    _finish(instrument, entry, execution, result)
                except BaseException as exc:
                    if fatal is None:
                        fatal = exc
            if fatal is not None:
                try:
                    raise fatal
                finally:
                    del fatal  # this frame is in its traceback: hold none of it
        else:
            _finish(one, cast(_Entry, state), execution, result)

    def report(self, execution: ToolExecution, result: ToolResult) -> None:
        """A call that starts and finishes at once (the batch scheduler's synthetic ones)."""
        one = self._one
        state = self._start_all(execution) if one is None else _start(one, execution)
        self.finish(state, execution, result)
        if type(state) is _Interrupted:
            raise state.interrupt

    def _start_all(self, execution: ToolExecution) -> list[_Entry]:
        entries: list[_Entry] = []
        for index, instrument in enumerate(self._all):
            try:
                entries.append(_start(instrument, execution))
            except BaseException as exc:
                # The later instruments do not start; those that did still finish.
                unstarted: list[_Entry] = [False] * (len(self._all) - index)
                return _Interrupted(entries + unstarted, exc)
        return entries

    def _finish_all(self, execution: ToolExecution, result: ToolResult) -> None:
        self.finish([None for _ in self._all], execution, result)


class _Interrupted(list[_Entry]):
    """The entries of several instruments whose starting a ``KeyboardInterrupt`` (or other
    ``BaseException``) from one of them cut short, and that exception.

    Those started before it finish with the call's one result, like any started
    instrument; the exception propagates once they have (:meth:`Instruments.enter`).
    """

    __slots__ = ("interrupt",)

    def __init__(self, entries: list[_Entry], interrupt: BaseException) -> None:
        super().__init__(entries)
        self.interrupt = interrupt
