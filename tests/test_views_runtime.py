"""The signal on inputs and views at run time (DESIGN.md §2), mirroring the static contract.

``tests/typing/`` proves with pyright and mypy that ``signal`` is required on
``ToolExecutionInput``, read-only on ``ToolExecution`` and ``ToolRunContext``, and assignable
only to a ``CancelSignal`` on ``ToolDispatchExecution``.  These tests check that a real call
behaves the same way for code that bypasses the type checker: every stage sees a
``CancelSignal``, and the mutations the checkers reject raise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

import attrs
import pytest

import trio_tools
from trio_tools import (
    ApprovalRequest,
    CancelSignal,
    CancelSource,
    PostDecision,
    PreDecision,
    TextBlock,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
)

Outcome = tuple[str, type[BaseException] | None]


def _raised(action: Callable[[], object]) -> type[BaseException] | None:
    """The type of the exception ``action()`` raises, or ``None`` when it succeeds."""
    try:
        action()
    except Exception as exc:
        return type(exc)
    return None


@attrs.frozen
class Seen:
    """What one stage saw of its view's ``signal``, and what mutating it did."""

    stage: str
    view: type[object]
    signal: type[object]
    is_caller_signal: bool
    mutations: tuple[Outcome, ...]
    unchanged: bool


def _probe_read_only(
    stage: str, view: ToolExecution | ToolRunContext, caller: CancelSignal
) -> Seen:
    """Try every mutation of ``view.signal`` a checker rejects on a read-only view."""
    before = view.signal
    stranger = CancelSource().signal
    loose: Any = view  # what code that bypasses the type checker can do

    def assign() -> None:
        loose.signal = stranger

    def assign_none() -> None:
        loose.signal = None

    def delete() -> None:
        del loose.signal

    mutations = (
        ("signal = <CancelSignal>", _raised(assign)),
        ("signal = None", _raised(assign_none)),
        ("del signal", _raised(delete)),
    )
    return Seen(stage, type(view), type(before), before is caller, mutations, view.signal is before)


def _probe_dispatch(view: ToolDispatchExecution, caller: CancelSignal) -> Seen:
    """Try the mutations a checker rejects on the wrapper's view (only a signal fits)."""
    before = view.signal
    loose: Any = view

    def assign_none() -> None:
        loose.signal = None

    def assign_source() -> None:
        loose.signal = CancelSource()

    def delete() -> None:
        del loose.signal

    mutations = (
        ("signal = None", _raised(assign_none)),
        ("signal = <CancelSource>", _raised(assign_source)),
        ("del signal", _raised(delete)),
    )
    return Seen(
        "around-execute",
        type(view),
        type(before),
        before is caller,
        mutations,
        view.signal is before,
    )


READ_ONLY = (
    ("signal = <CancelSignal>", AttributeError),
    ("signal = None", AttributeError),
    ("del signal", AttributeError),
)


def _read_only(stage: str, view: type[object], *, is_caller_signal: bool = True) -> Seen:
    return Seen(stage, view, CancelSignal, is_caller_signal, READ_ONLY, True)


def _input(signal: CancelSignal, name: str = "probe") -> ToolExecutionInput:
    return ToolExecutionInput(call_id="call-1", name=name, arguments={}, signal=signal)


OK = ToolResult(content=(TextBlock("ok"),))


class _Recorder:
    """Installs a probe at every stage of a registry and collects what each one saw."""

    def __init__(self, registry: ToolRegistry, caller: CancelSignal) -> None:
        self.caller = caller
        self.seen: list[Seen] = []
        self.narrowed: list[bool] = []
        registry.register(trio_tools.define_tool(self.body, name="probe"))

    async def pre_hook(
        self, execution: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        self.seen.append(_probe_read_only("pre-execute", execution, self.caller))
        return await call_next()

    async def asking_pre_hook(
        self, execution: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        self.seen.append(_probe_read_only("pre-execute", execution, self.caller))
        return trio_tools.Ask("confirm")

    def guard(self, execution: ToolExecution) -> str | None:
        self.seen.append(_probe_read_only("guard", execution, self.caller))
        return None

    async def approver(
        self, request: ApprovalRequest
    ) -> Literal["granted", "rejected", "cancelled"]:
        self.seen.append(_probe_read_only("approver", request.execution, self.caller))
        return "granted"

    async def wrapper(
        self, execution: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
    ) -> ToolResult:
        self.seen.append(_probe_dispatch(execution, self.caller))
        async with trio_tools.open_signal(execution.signal, timeout=1) as narrowed:
            execution.signal = narrowed
            self.narrowed.append(execution.signal is narrowed)
            return await call_next()

    async def body(self, args: object, ctx: ToolRunContext) -> str:
        self.seen.append(_probe_read_only("body", ctx, self.caller))
        return "ok"

    async def post_hook(
        self,
        execution: ToolExecution,
        result: ToolResult,
        call_next: Callable[[], Awaitable[PostDecision]],
    ) -> PostDecision:
        self.seen.append(_probe_read_only("post-execute", execution, self.caller))
        return await call_next()

    def observer(self, execution: ToolExecution, result: ToolResult) -> None:
        self.seen.append(_probe_read_only("observer", execution, self.caller))

    async def async_observer(self, execution: ToolExecution, result: ToolResult) -> None:
        self.seen.append(_probe_read_only("async observer", execution, self.caller))


async def test_every_stage_sees_a_cancel_signal_it_cannot_replace_except_the_wrapper() -> None:
    """Along the Allow path every view's ``signal`` is a ``CancelSignal``; only the wrapper
    may assign one, and ``None``, a non-signal and ``del`` are refused everywhere."""
    registry = ToolRegistry()
    source = CancelSource()
    recorder = _Recorder(registry, source.signal)
    registry.add_pre_execute(recorder.pre_hook)
    registry.add_guard(recorder.guard)
    registry.add_around_execute(recorder.wrapper)
    registry.add_post_execute(recorder.post_hook)
    registry.add_observer(recorder.observer)
    registry.add_observer(recorder.async_observer)

    result = await registry.execute(_input(source.signal))

    assert result == OK
    assert recorder.seen == [
        _read_only("pre-execute", ToolExecution),
        _read_only("guard", ToolExecution),
        Seen(
            "around-execute",
            ToolDispatchExecution,
            CancelSignal,
            True,
            (
                ("signal = None", TypeError),
                ("signal = <CancelSource>", TypeError),
                ("del signal", AttributeError),
            ),
            True,
        ),
        # The body's signal is the caller's fused with the wrapper's narrowed one.
        _read_only("body", ToolRunContext, is_caller_signal=False),
        _read_only("post-execute", ToolExecution),
        _read_only("observer", ToolExecution),
        _read_only("async observer", ToolExecution),
    ]
    assert recorder.narrowed == [True]


async def test_the_approver_sees_a_read_only_cancel_signal() -> None:
    """``ApprovalRequest.execution`` is the read-only view with the caller's signal."""
    registry = ToolRegistry()
    source = CancelSource()
    recorder = _Recorder(registry, source.signal)
    registry.add_pre_execute(recorder.asking_pre_hook)
    registry.set_approver(recorder.approver)

    result = await registry.execute(_input(source.signal))

    assert result == OK
    assert recorder.seen == [
        _read_only("pre-execute", ToolExecution),
        _read_only("approver", ToolExecution),
        _read_only("body", ToolRunContext),
    ]


async def test_without_a_wrapper_the_body_sees_the_callers_own_signal() -> None:
    registry = ToolRegistry()
    source = CancelSource()
    recorder = _Recorder(registry, source.signal)

    result = await registry.execute(_input(source.signal))

    assert result == OK
    assert recorder.seen == [_read_only("body", ToolRunContext)]


async def test_the_wrappers_signal_cannot_be_deleted_or_set_to_none_during_dispatch() -> None:
    """A refused mutation leaves the wrapper's view untouched: the body still runs under
    the caller's signal and the call succeeds."""
    registry = ToolRegistry()
    source = CancelSource()
    recorder = _Recorder(registry, source.signal)
    outcomes: list[Seen] = []

    async def wrapper(
        execution: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
    ) -> ToolResult:
        outcomes.append(_probe_dispatch(execution, source.signal))
        return await call_next()

    registry.add_around_execute(wrapper)

    result = await registry.execute(_input(source.signal))

    assert result == OK
    assert [seen.mutations for seen in outcomes] == [
        (
            ("signal = None", TypeError),
            ("signal = <CancelSource>", TypeError),
            ("del signal", AttributeError),
        )
    ]
    assert [seen.unchanged for seen in outcomes] == [True]
    assert recorder.seen == [_read_only("body", ToolRunContext)]


def test_input_signal_is_required() -> None:
    kwargs: dict[str, Any] = {"call_id": "call-1", "name": "probe", "arguments": {}}

    with pytest.raises(TypeError, match="signal"):
        ToolExecutionInput(**kwargs)


def test_input_signal_cannot_be_assigned_or_deleted() -> None:
    """The input is frozen: assignment and deletion raise ``FrozenInstanceError`` (an
    ``AttributeError``); ``attrs.evolve`` makes a new input instead."""
    source = CancelSource()
    call: Any = _input(source.signal)

    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        call.signal = CancelSource().signal
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        del call.signal
    assert call.signal is source.signal

    other = CancelSource().signal
    assert attrs.evolve(call, signal=other).signal is other
    assert call.signal is source.signal


async def test_the_callers_input_signal_is_the_one_each_read_only_stage_sees() -> None:
    """The signal read back from the input is the object every read-only stage gets."""
    registry = ToolRegistry()
    source = CancelSource()
    call = _input(source.signal)
    signals: list[object] = []

    async def pre_hook(
        execution: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        signals.append(execution.signal)
        return await call_next()

    def observer(execution: ToolExecution, result: ToolResult) -> None:
        signals.append(execution.signal)

    _Recorder(registry, source.signal)  # registers the "probe" tool
    registry.add_pre_execute(pre_hook)
    registry.add_observer(observer)

    assert isinstance(call.signal, CancelSignal)
    assert await registry.execute(call) == OK
    assert signals == [call.signal, call.signal]
    assert all(signal is call.signal for signal in signals)


@pytest.mark.parametrize("view", [ToolExecution, ToolDispatchExecution, ToolRunContext])
def test_views_cannot_be_constructed_by_users(view: type[object]) -> None:
    with pytest.raises(TypeError, match="cannot be constructed"):
        view()


async def test_views_refuse_any_other_assignment() -> None:
    """Views are immutable from the outside: other fields and new attributes raise too."""
    registry = ToolRegistry()
    source = CancelSource()
    outcomes: list[tuple[str, type[BaseException] | None]] = []

    def observer(execution: ToolExecution, result: ToolResult) -> None:
        view: Any = execution

        def assign_field() -> None:
            view.call_id = "other"

        def assign_new() -> None:
            view.extra = 1

        outcomes.append(("call_id", _raised(assign_field)))
        outcomes.append(("extra", _raised(assign_new)))

    _Recorder(registry, source.signal)  # registers the "probe" tool
    registry.add_observer(observer)

    assert await registry.execute(_input(source.signal)) == OK
    assert outcomes == [("call_id", AttributeError), ("extra", AttributeError)]
