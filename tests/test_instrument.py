"""The instrument hook: ``registry.add_instrument`` sees every call start and finish.

Every call -- also one that ends before any stage runs, and the batch scheduler's synthetic
results -- reaches ``call_started(exec)`` then ``call_finished(exec, result)`` with the one
final result; a context manager returned by ``call_started`` is current for every stage,
the body and the tasks it starts, and never outlives the call; a raising instrument changes
nothing.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from helpers_registry import (
    TOOL,
    Harness,
    PostNext,
    PreNext,
    a_stray_cancelled,
    aborted,
    aborted_before_dispatch,
    denied,
    not_json_arguments,
    ok,
    unknown_tool,
)

from trio_tools import (
    Block,
    Deny,
    Instrument,
    MemoryJournal,
    TextBlock,
    ToolCall,
    ToolExecution,
    ToolResult,
    ToolRunContext,
    run_tool_calls,
)

CURRENT: contextvars.ContextVar[str] = contextvars.ContextVar("CURRENT", default="caller")


class Recorder:
    """Records what it hears; ``current`` makes ``CURRENT`` hold ``value`` for the call."""

    def __init__(self, name: str, log: list[tuple[str, ...]], *, value: str | None = None):
        self.name = name
        self.log = log
        self.value = value
        self.started: list[ToolExecution] = []
        self.finished: list[tuple[ToolExecution, ToolResult]] = []

    def call_started(self, exec: ToolExecution) -> AbstractContextManager[object] | None:
        self.started.append(exec)
        self.log.append((self.name, "started", exec.call_id))
        return None if self.value is None else self._current(self.value)

    @contextmanager
    def _current(self, value: str) -> Iterator[None]:
        token = CURRENT.set(value)
        try:
            yield
        finally:
            CURRENT.reset(token)
            self.log.append((self.name, "reset"))

    def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
        self.finished.append((exec, result))
        self.log.append((self.name, "finished", exec.call_id, CURRENT.get()))


def recorder(harness: Harness, **kwargs: Any) -> Recorder:
    instrument = Recorder("rec", [], **kwargs)
    harness.registry.add_instrument(instrument)
    return instrument


async def echo(args: object, ctx: ToolRunContext) -> str:
    """Returns "done"."""
    return "done"


def test_recorder_is_an_instrument() -> None:
    """The protocol accepts both return forms of ``call_started`` (checked statically)."""
    instrument: Instrument = Recorder("rec", [])
    assert callable(instrument.call_started)


# -- every call, the one result ------------------------------------------------------------


async def test_a_call_starts_then_finishes_with_the_result_execute_returns() -> None:
    harness = Harness()
    harness.registry.tool(echo, name=TOOL)
    rec = recorder(harness)

    result = await harness.execute(arguments={"x": [1, 2]})

    assert ok("done") == result
    [view] = rec.started
    [(finished_view, finished_result)] = rec.finished
    assert finished_view is view
    assert finished_result is result
    assert harness.executions[0] is view  # the same view the observers get
    assert ("call-1", TOOL, {"x": (1, 2)}) == (view.call_id, view.name, view.arguments)
    assert harness.registry.get(TOOL) is view.definition


def _raise_in_body() -> Callable[[object, ToolRunContext], Any]:
    async def body(args: object, ctx: ToolRunContext) -> str:
        raise ValueError("boom")

    return body


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("not_json", not_json_arguments()),
        ("pre_aborted", aborted_before_dispatch()),
        ("unknown", unknown_tool("missing")),
        ("denied", denied("no")),
        ("aborted", aborted()),
    ],
)
async def test_calls_that_end_early_are_instrumented_too(case: str, expected: ToolResult) -> None:
    """Also the calls no around-execute wrapper would see: each gets both callbacks, with
    the result the caller receives."""
    harness = Harness()
    name, arguments = TOOL, {}

    async def cancelling_body(args: object, ctx: ToolRunContext) -> str:
        harness.source.cancel("stop")
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    harness.registry.tool(cancelling_body if case == "aborted" else echo, name=TOOL)
    if case == "not_json":
        arguments = {"bad": {1, 2}}
    elif case == "pre_aborted":
        harness.source.cancel("early")
    elif case == "unknown":
        name = "missing"
    elif case == "denied":

        async def deny(exec: ToolExecution, call_next: PreNext) -> Deny:
            return Deny("no")

        harness.registry.add_pre_execute(deny)
    rec = recorder(harness)

    result = await harness.execute(name, arguments)

    assert expected == result
    assert 1 == len(rec.started)
    assert [(rec.started[0], result)] == [(v, r) for v, r in rec.finished]
    assert rec.finished[0][1] is result


async def test_instruments_start_in_order_and_finish_in_reverse_before_observers() -> None:
    harness = Harness()
    log: list[tuple[str, ...]] = []
    harness.registry.tool(echo, name=TOOL)
    harness.registry.add_instrument(Recorder("outer", log, value="outer"))
    harness.registry.add_instrument(Recorder("inner", log, value="inner"))

    async def pre(exec: ToolExecution, call_next: PreNext) -> Any:
        log.append(("pre", CURRENT.get()))
        return await call_next()

    async def post(exec: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        log.append(("post", CURRENT.get()))
        return await call_next()

    def observer(exec: ToolExecution, result: ToolResult) -> None:
        log.append(("observer", CURRENT.get()))

    harness.registry.add_pre_execute(pre)
    harness.registry.add_post_execute(post)
    harness.registry.add_observer(observer)

    await harness.execute()

    assert [
        ("outer", "started", "call-1"),
        ("inner", "started", "call-1"),
        ("pre", "inner"),
        ("post", "inner"),
        # Each instrument finishes while its own context is still current.
        ("inner", "finished", "call-1", "inner"),
        ("inner", "reset"),
        ("outer", "finished", "call-1", "outer"),
        ("outer", "reset"),
        ("observer", "caller"),
    ] == log


# -- the context an instrument makes current -------------------------------------------------


async def test_context_is_current_in_the_body_and_its_tasks_and_reset_for_the_caller() -> None:
    harness = Harness()
    seen: list[tuple[str, str]] = []

    async def task() -> None:
        await trio.lowlevel.checkpoint()
        seen.append(("task", CURRENT.get()))

    async def body(args: object, ctx: ToolRunContext) -> str:
        seen.append(("body", CURRENT.get()))
        ctx.start_soon(task)
        return "done"

    async def wrapper(exec: Any, call_next: Callable[[], Any]) -> ToolResult:
        seen.append(("wrapper", CURRENT.get()))
        result: ToolResult = await call_next()
        return result

    harness.registry.tool(body, name=TOOL)
    harness.registry.add_around_execute(wrapper)
    recorder(harness, value="span")

    assert ok("done") == await harness.execute()
    assert [("wrapper", "span"), ("body", "span"), ("task", "span")] == seen
    assert "caller" == CURRENT.get()


async def test_nested_calls_see_the_outer_context_and_restore_it() -> None:
    harness = Harness()
    log: list[tuple[str, ...]] = []

    class Nesting(Recorder):
        def call_started(self, exec: ToolExecution) -> AbstractContextManager[object] | None:
            super().call_started(exec)
            return self._current(f"{CURRENT.get()}/{exec.call_id}")

    async def inner(args: object, ctx: ToolRunContext) -> str:
        """Inner."""
        return CURRENT.get()

    async def outer(args: object, ctx: ToolRunContext) -> str:
        """Outer."""
        result = await harness.registry.execute(
            harness.input("inner", call_id="call-2", signal=ctx.signal, parent=ctx.token)
        )
        [block] = result.content
        assert isinstance(block, TextBlock)
        return f"{block.text} then {CURRENT.get()}"

    harness.registry.tool(inner)
    harness.registry.tool(outer)
    rec = Nesting("rec", log)
    harness.registry.add_instrument(rec)

    result = await harness.registry.execute(harness.input("outer"))

    assert ok("caller/call-1/call-2 then caller/call-1") == result
    assert ["call-1", "call-2"] == [view.call_id for view in rec.started]
    assert "caller" == CURRENT.get()


async def test_ambient_cancellation_still_finishes_the_instruments_and_resets_the_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    harness = Harness()

    async def body(args: object, ctx: ToolRunContext) -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    harness.registry.tool(body, name=TOOL)
    rec = recorder(harness, value="span")

    with trio.move_on_after(1) as scope:
        await harness.registry.execute(harness.input())

    assert scope.cancelled_caught
    assert [aborted()] == [result for _, result in rec.finished]
    assert [aborted()] == harness.published
    assert ("rec", "reset") == rec.log[-1]
    assert "caller" == CURRENT.get()


# -- raising instruments change nothing ------------------------------------------------------


class Raising:
    """Raises from ``where``: "started", "finished", "enter" or "exit"."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.finished = 0

    def call_started(self, exec: ToolExecution) -> AbstractContextManager[object] | None:
        if self.where == "started":
            raise RuntimeError("started")
        return self._manager()

    @contextmanager
    def _manager(self) -> Iterator[None]:
        if self.where == "enter":
            raise RuntimeError("enter")
        token = CURRENT.set("raising")
        yield
        CURRENT.reset(token)
        if self.where == "exit":
            raise RuntimeError("exit")

    def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
        self.finished += 1
        if self.where == "finished":
            raise RuntimeError("finished")


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "beside_another"])
@pytest.mark.parametrize("where", ["started", "finished", "enter", "exit"])
async def test_a_raising_instrument_is_logged_and_changes_no_result(
    where: str, alone: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Alone (the registry's fast path for one instrument) and beside another one."""
    harness = Harness()

    async def post(exec: ToolExecution, result: ToolResult, call_next: PostNext) -> Block:
        return Block("blocked")

    harness.registry.tool(echo, name=TOOL)
    harness.registry.add_post_execute(post)
    baseline = await harness.execute()
    raising = Raising(where)
    harness.registry.add_instrument(raising)
    rec = None if alone else recorder(harness)

    with caplog.at_level(logging.ERROR, logger="trio_tools"):
        result = await harness.execute()

    assert baseline == result
    if rec is not None:
        assert [result] == [r for _, r in rec.finished]  # the other instrument is unaffected
    assert (0 if where == "started" else 1) == raising.finished
    assert "caller" == CURRENT.get()
    assert [f"{where}"] == [str(record.exc_info[1]) for record in caplog.records if record.exc_info]


class Interrupt(BaseException):
    """Stands in for a ``KeyboardInterrupt`` landing in an instrument."""


class Interrupting:
    """An instrument whose ``call_finished`` raises :class:`Interrupt`; with ``value``,
    after making ``CURRENT`` hold it for the call, as ``Recorder`` does."""

    def __init__(self, value: str | None = None) -> None:
        self.value = value

    def call_started(self, exec: ToolExecution) -> AbstractContextManager[object] | None:
        return None if self.value is None else Recorder("", [])._current(self.value)

    def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
        raise Interrupt


@pytest.mark.parametrize("ambient", [False, True], ids=["returning", "ambient_cancellation"])
@pytest.mark.parametrize(
    ("manager", "alone"),
    [(False, True), (True, True), (False, False), (True, False)],
    ids=["alone", "alone_with_context", "beside_another", "beside_another_with_context"],
)
async def test_an_interrupt_in_an_instrument_still_publishes_and_finishes_the_others(
    manager: bool, alone: bool, ambient: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """A ``BaseException`` from ``call_finished`` propagates only once every instrument
    finished (contexts reset) and every observer saw the one result."""
    harness = Harness()

    async def body(args: object, ctx: ToolRunContext) -> str:
        if ambient:
            await trio.sleep_forever()
        return "done"

    harness.registry.tool(body, name=TOOL)
    rec = None if alone else recorder(harness, value="outer")
    harness.registry.add_instrument(Interrupting("inner" if manager else None))
    expected = aborted() if ambient else ok("done")

    with pytest.raises(Interrupt), trio.move_on_after(1):
        await harness.registry.execute(harness.input())

    assert [expected] == harness.published
    if rec is not None:
        assert [expected] == [result for _, result in rec.finished]
        assert ("rec", "reset") == rec.log[-1]
    assert "caller" == CURRENT.get()


class InterruptingStart:
    """An instrument whose ``call_started`` raises :class:`Interrupt`."""

    def __init__(self) -> None:
        self.finished = 0

    def call_started(self, exec: ToolExecution) -> AbstractContextManager[object] | None:
        raise Interrupt

    def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
        self.finished += 1


async def test_an_interrupt_while_instruments_start_still_finishes_those_started() -> None:
    """The instruments that started before one's ``call_started`` raised a ``BaseException``
    finish with the published result (contexts reset); the later ones never start, the one
    that raised never finishes; then the exception propagates."""
    harness = Harness()
    harness.registry.tool(echo, name=TOOL)
    rec = recorder(harness, value="outer")
    interrupting = InterruptingStart()
    harness.registry.add_instrument(interrupting)
    later = Recorder("later", [])
    harness.registry.add_instrument(later)

    with pytest.raises(Interrupt):
        await harness.registry.execute(harness.input())

    assert [aborted_before_dispatch()] == harness.published
    assert harness.published == [result for _, result in rec.finished]
    assert ("rec", "reset") == rec.log[-1]
    assert "caller" == CURRENT.get()
    assert (0, [], []) == (interrupting.finished, later.started, later.finished)


class RaisingStray(Raising):
    """Raises a stray ``trio.Cancelled`` (one no scope of the call is waiting for) from
    ``where``, as :class:`Raising` raises its ``RuntimeError``."""

    def __init__(self, where: str, stray: trio.Cancelled) -> None:
        super().__init__(where)
        self.stray = stray

    def call_started(self, exec: ToolExecution) -> AbstractContextManager[object] | None:
        if self.where == "started":
            raise self.stray
        return self._stray_manager()

    @contextmanager
    def _stray_manager(self) -> Iterator[None]:
        if self.where == "enter":
            raise self.stray
        yield
        if self.where == "exit":
            raise self.stray

    def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
        self.finished += 1
        if self.where == "finished":
            raise self.stray


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "beside_another"])
@pytest.mark.parametrize("where", ["started", "finished", "enter", "exit"])
async def test_a_stray_cancelled_from_an_instrument_is_logged_and_changes_no_result(
    where: str, alone: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Its methods are synchronous: a ``trio.Cancelled`` from one is stray, an ordinary
    failure of the instrument (as from an observer), never the call's cancellation."""
    harness = Harness()
    harness.registry.tool(echo, name=TOOL)
    harness.registry.add_instrument(RaisingStray(where, await a_stray_cancelled()))
    rec = None if alone else recorder(harness)

    with caplog.at_level(logging.ERROR, logger="trio_tools"):
        try:
            result: object = await harness.execute()
        except BaseException as exc:  # (a Cancelled escaping the test would end it quietly)
            result = exc

    assert ok("done") == result
    if rec is not None:
        assert [result] == [r for _, r in rec.finished]
    assert "caller" == CURRENT.get()
    assert 1 == sum(isinstance(r.exc_info[1], trio.Cancelled) for r in caplog.records if r.exc_info)


async def test_registration_removes_the_instrument() -> None:
    harness = Harness()
    harness.registry.tool(echo, name=TOOL)
    rec = Recorder("rec", [])
    registration = harness.registry.add_instrument(rec)
    await harness.execute()
    registration()
    await harness.execute()

    assert 1 == len(rec.finished)


def test_add_instrument_requires_both_methods() -> None:
    harness = Harness()

    class HalfInstrument:
        def call_started(self, exec: ToolExecution) -> None:
            pass

    with pytest.raises(TypeError, match="call_finished"):
        harness.registry.add_instrument(HalfInstrument())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="call_started"):
        harness.registry.add_instrument(object())  # type: ignore[arg-type]


# -- the batch scheduler's synthetic results -------------------------------------------------


async def test_synthetic_results_of_a_cancelled_batch_are_reported_with_their_view() -> None:
    harness = Harness()
    harness.registry.tool(echo, name=TOOL)
    rec = recorder(harness, value="span")
    harness.source.cancel("stop")
    calls = [ToolCall("a", TOOL, '{"n": 1}'), ToolCall("b", "missing", "{}")]

    outcome = await run_tool_calls(harness.registry, calls, signal=harness.signal)

    assert [True, True] == [result.synthetic for result in outcome.results]
    assert [(v.call_id, v.name, v.arguments) for v in rec.started] == [
        ("a", TOOL, {"n": 1}),
        ("b", "missing", {}),
    ]
    assert harness.registry.get(TOOL) is rec.started[0].definition
    assert rec.started[1].definition is None
    assert list(outcome.results) == [result for _, result in rec.finished]
    assert [] == harness.published  # synthetic results never reach the observers
    assert "caller" == CURRENT.get()


async def test_every_call_of_an_interrupted_batch_is_reported_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ambient cancellation mid-batch: the started call finishes through the registry,
    the unstarted one as a synthetic result; both reach the instrument exactly once."""
    harness = Harness()

    async def sleeper(args: object, ctx: ToolRunContext) -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    harness.registry.tool(sleeper, name=TOOL)
    rec = recorder(harness)
    journal = MemoryJournal()
    calls = [ToolCall("a", TOOL, "{}"), ToolCall("b", TOOL, "{}")]

    with trio.move_on_after(1):
        await run_tool_calls(harness.registry, calls, signal=harness.signal, journal=journal)

    journal.assert_balanced()
    committed = [event.result for event in journal.events if event.kind == "result"]
    assert ["a", "b"] == [view.call_id for view, _ in rec.finished]
    assert committed == [result for _, result in rec.finished]
    assert [False, True] == [result.synthetic for _, result in rec.finished]
