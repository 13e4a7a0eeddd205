"""``trio_tools.otel``: one OpenTelemetry span per call, recorded by the real SDK.

Spans go to the SDK's ``InMemorySpanExporter`` through a ``SimpleSpanProcessor``, so each
test sees exactly the finished spans, with their parents, attributes, status and events.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing
from helpers_registry import AroundNext, PostNext, PreNext
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import trio_tools
import trio_tools.otel
from trio_tools import (
    Block,
    CancelSource,
    ToolCall,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    run_tool_calls,
)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


class Traced:
    """A registry traced into the in-memory exporter, and the caller's cancel source."""

    def __init__(self, provider: TracerProvider, exporter: InMemorySpanExporter, **options: Any):
        self.registry = ToolRegistry()
        self.source = CancelSource()
        self.exporter = exporter
        self.tracer = provider.get_tracer("test")
        self.registration = trio_tools.otel.instrument(
            self.registry, tracer_provider=provider, **options
        )

    def input(self, name: str = "tool", arguments: object = None, **kwargs: Any) -> Any:
        return ToolExecutionInput(
            call_id=kwargs.pop("call_id", "call-1"),
            name=name,
            arguments={} if arguments is None else arguments,
            signal=kwargs.pop("signal", self.source.signal),
            **kwargs,
        )

    async def execute(self, name: str = "tool", arguments: object = None) -> ToolResult:
        return await self.registry.execute(self.input(name, arguments))

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def span(self) -> ReadableSpan:
        [span] = self.spans()
        return span


@pytest.fixture
def traced(provider: TracerProvider, exporter: InMemorySpanExporter) -> Traced:
    return Traced(provider, exporter)


async def returns_done(args: object, ctx: ToolRunContext) -> str:
    """Returns done."""
    return "done"


async def sleeps(args: object, ctx: ToolRunContext) -> str:
    """Sleeps until cancelled."""
    await trio.sleep_forever()
    raise AssertionError("unreachable")


def base_attributes(
    *, name: str = "tool", call_id: str = "call-1", description: str | None = None
) -> dict[str, object]:
    attributes: dict[str, object] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.type": "function",
    }
    if description is not None:
        attributes["gen_ai.tool.description"] = description
    return attributes


# -- one span for every code of the results table --------------------------------------------

Scenario = Callable[[Traced], Awaitable[ToolResult]]


async def success(t: Traced) -> ToolResult:
    t.registry.tool(returns_done, name="tool")
    return await t.execute()


async def aborted(t: Traced) -> ToolResult:
    async def body(args: object, ctx: ToolRunContext) -> str:
        """Cancels its caller."""
        t.source.cancel("user pressed stop")
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    t.registry.tool(body, name="tool")
    return await t.execute()


async def aborted_before_dispatch(t: Traced) -> ToolResult:
    t.registry.tool(returns_done, name="tool")
    t.source.cancel("too late", code="STOPPED")
    return await t.execute()


async def tool_timeout(t: Traced) -> ToolResult:
    t.registry.tool(sleeps, name="tool", timeout=5)
    t.registry.add_around_execute(trio_tools.timeout_policy())
    return await t.execute()


async def unknown_tool(t: Traced) -> ToolResult:
    return await t.execute()


async def invalid_args(t: Traced) -> ToolResult:
    async def typed(args: dict[str, int], ctx: ToolRunContext) -> str:
        """Wants ints."""
        return "unreachable"

    t.registry.tool(typed, name="tool")
    return await t.execute(arguments={"n": "one"})


async def not_json(t: Traced) -> ToolResult:
    t.registry.tool(returns_done, name="tool")
    return await t.execute(arguments={"n": {1}})


async def denied(t: Traced) -> ToolResult:
    t.registry.tool(returns_done, name="tool")
    t.registry.add_guard(lambda exec: "not today")
    return await t.execute()


async def blocked(t: Traced) -> ToolResult:
    async def post(exec: ToolExecution, result: ToolResult, call_next: PostNext) -> Block:
        return Block("hidden")

    t.registry.tool(returns_done, name="tool")
    t.registry.add_post_execute(post)
    return await t.execute()


async def tool_failed(t: Traced) -> ToolResult:
    async def body(args: object, ctx: ToolRunContext) -> str:
        """Fails."""
        raise ValueError("broken")

    t.registry.tool(body, name="tool")
    return await t.execute()


async def pre_execute_failed(t: Traced) -> ToolResult:
    async def pre(exec: ToolExecution, call_next: PreNext) -> Any:
        raise RuntimeError("pre broke")

    t.registry.tool(returns_done, name="tool")
    t.registry.add_pre_execute(pre)
    return await t.execute()


async def wrapper_failed(t: Traced) -> ToolResult:
    async def wrapper(exec: Any, call_next: AroundNext) -> ToolResult:
        raise RuntimeError("wrapper broke")

    t.registry.tool(returns_done, name="tool")
    t.registry.add_around_execute(wrapper)
    return await t.execute()


async def post_execute_failed(t: Traced) -> ToolResult:
    async def post(exec: ToolExecution, result: ToolResult, call_next: PostNext) -> Any:
        raise RuntimeError("post broke")

    t.registry.tool(returns_done, name="tool")
    t.registry.add_post_execute(post)
    return await t.execute()


async def finalize_failed(t: Traced) -> ToolResult:
    def finalize(exec: ToolExecution, result: ToolResult) -> None:
        raise RuntimeError("finalize broke")

    t.registry.tool(returns_done, name="tool", finalize_content=finalize)
    return await t.execute()


# scenario, expected code (None: success), whether the body was invoked, the description
SCENARIOS: list[tuple[Scenario, str | None, bool, str | None]] = [
    (success, None, True, "Returns done."),
    (aborted, "ABORTED", True, "Cancels its caller."),
    (aborted_before_dispatch, "ABORTED_BEFORE_DISPATCH", False, "Returns done."),
    (tool_timeout, "TOOL_TIMEOUT", True, "Sleeps until cancelled."),
    (unknown_tool, "UNKNOWN_TOOL", False, None),
    (invalid_args, "INVALID_ARGS", False, "Wants ints."),
    (not_json, "NOT_JSON", False, "Returns done."),
    (denied, "DENIED", False, "Returns done."),
    (blocked, "BLOCKED", True, "Returns done."),
    (tool_failed, "TOOL_FAILED", True, "Fails."),
    (pre_execute_failed, "PRE_EXECUTE_FAILED", False, "Returns done."),
    (wrapper_failed, "WRAPPER_FAILED", False, "Returns done."),
    (post_execute_failed, "POST_EXECUTE_FAILED", True, "Returns done."),
    (finalize_failed, "FINALIZE_FAILED", True, "Returns done."),
]


@pytest.mark.parametrize(
    ("scenario", "code", "body_invoked", "description"),
    SCENARIOS,
    ids=[scenario.__name__ for scenario, *_ in SCENARIOS],
)
async def test_one_span_per_call_for_every_result_code(
    traced: Traced,
    scenario: Scenario,
    code: str | None,
    body_invoked: bool,
    description: str | None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    result = await scenario(traced)

    span = traced.span()
    assert code == (result.error.code if result.error is not None else None)
    assert "execute_tool tool" == span.name
    assert SpanKind.INTERNAL == span.kind
    expected = base_attributes(description=description)
    expected["trio_tools.body_invoked"] = body_invoked
    expected["trio_tools.synthetic"] = False
    if code is not None:
        # error.type only on error results
        expected["error.type"] = code
        expected["trio_tools.code"] = code
    assert expected == dict(span.attributes or {})
    if code is None:
        assert StatusCode.UNSET == span.status.status_code
    else:
        assert result.error is not None
        assert (StatusCode.ERROR, result.error.message) == (
            span.status.status_code,
            span.status.description,
        )
    assert trace.INVALID_SPAN is trace.get_current_span()  # nothing leaked to the caller


def cancel_events(span: ReadableSpan) -> list[dict[str, object]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == "trio_tools.cancelled"]


async def test_the_cancel_reason_is_an_event_when_the_caller_cancels(traced: Traced) -> None:
    await aborted(traced)

    assert [
        {"trio_tools.cancel.code": "CANCELLED", "trio_tools.cancel.message": "user pressed stop"}
    ] == cancel_events(traced.span())


async def test_a_pre_aborted_call_carries_the_reason_it_was_cancelled_with(
    traced: Traced,
) -> None:
    await aborted_before_dispatch(traced)

    assert [
        {"trio_tools.cancel.code": "STOPPED", "trio_tools.cancel.message": "too late"}
    ] == cancel_events(traced.span())


async def test_a_timeout_is_an_event_with_the_timeout_message(
    traced: Traced, autojump_clock: trio.testing.MockClock
) -> None:
    await tool_timeout(traced)

    assert [
        {
            "trio_tools.cancel.code": "TOOL_TIMEOUT",
            "trio_tools.cancel.message": "tool call timed out after 5s",
        }
    ] == cancel_events(traced.span())


async def test_no_cancel_event_without_cancellation(traced: Traced) -> None:
    await tool_failed(traced)

    assert [] == cancel_events(traced.span())
    assert 0 == traced.source.signal.statistics().listeners  # the listener was removed


# -- synthetic results ------------------------------------------------------------------------


async def test_synthetic_results_of_a_batch_get_their_spans(traced: Traced) -> None:
    traced.registry.tool(returns_done, name="tool")
    traced.source.cancel("stop")
    calls = [ToolCall("a", "tool", '{"n": 1}'), ToolCall("b", "other", "{}")]

    outcome = await run_tool_calls(traced.registry, calls, signal=traced.source.signal)

    assert [True, True] == [result.synthetic for result in outcome.results]
    spans = traced.spans()
    assert ["execute_tool tool", "execute_tool other"] == [span.name for span in spans]
    for span, call_id, name, description in zip(
        spans, "ab", ["tool", "other"], ["Returns done.", None], strict=True
    ):
        expected = base_attributes(name=name, call_id=call_id, description=description)
        expected.update(
            {
                "trio_tools.body_invoked": False,
                "trio_tools.synthetic": True,
                "error.type": "ABORTED_BEFORE_DISPATCH",
                "trio_tools.code": "ABORTED_BEFORE_DISPATCH",
            }
        )
        assert expected == dict(span.attributes or {})
        assert [
            {"trio_tools.cancel.code": "CANCELLED", "trio_tools.cancel.message": "stop"}
        ] == cancel_events(span)


async def test_a_batch_traces_real_and_synthetic_calls_under_the_callers_span(
    traced: Traced,
) -> None:
    async def stopper(args: object, ctx: ToolRunContext) -> str:
        """Stops the turn."""
        ctx.halt_turn("enough")
        return "stopped"

    traced.registry.tool(stopper, name="tool")
    calls = [ToolCall("a", "tool", "{}"), ToolCall("b", "tool", "{}")]

    with traced.tracer.start_as_current_span("agent step") as step:
        outcome = await run_tool_calls(traced.registry, calls, signal=traced.source.signal)

    assert [False, True] == [result.synthetic for result in outcome.results]
    step_id = step.get_span_context().span_id
    tool_spans = [span for span in traced.spans() if span.name == "execute_tool tool"]
    assert [("a", False), ("b", True)] == [
        (
            (span.attributes or {})["gen_ai.tool.call.id"],
            (span.attributes or {})["trio_tools.synthetic"],
        )
        for span in tool_spans
    ]
    assert [step_id, step_id] == [
        span.parent.span_id if span.parent else None for span in tool_spans
    ]


# -- parent and child ---------------------------------------------------------------------------


async def test_nested_dispatch_and_spans_of_the_body_and_its_tasks_are_children(
    traced: Traced,
) -> None:
    tracer = traced.tracer

    async def inner(args: object, ctx: ToolRunContext) -> str:
        """Inner."""
        with tracer.start_as_current_span("inner work"):
            return "inner"

    async def in_task() -> None:
        await trio.lowlevel.checkpoint()
        with tracer.start_as_current_span("task work"):
            pass

    async def outer(args: object, ctx: ToolRunContext) -> str:
        """Outer."""
        ctx.start_soon(in_task)
        with tracer.start_as_current_span("body work"):
            pass
        result = await traced.registry.execute(
            traced.input("inner", call_id="call-2", signal=ctx.signal, parent=ctx.token)
        )
        return "outer" if not result.is_error else "failed"

    traced.registry.tool(inner)
    traced.registry.tool(outer)
    with tracer.start_as_current_span("caller") as caller:
        result = await traced.execute("outer")
        assert caller is trace.get_current_span()  # reset after the call

    assert not result.is_error
    spans = {span.name: span for span in traced.spans()}

    def parent_name(name: str) -> str | None:
        parent = spans[name].parent
        if parent is None:
            return None
        [found] = [n for n, s in spans.items() if s.context.span_id == parent.span_id]
        return found

    assert {
        "caller": None,
        "execute_tool outer": "caller",
        "body work": "execute_tool outer",
        "task work": "execute_tool outer",
        "execute_tool inner": "execute_tool outer",
        "inner work": "execute_tool inner",
    } == {name: parent_name(name) for name in spans}
    assert 1 == len({span.context.trace_id for span in spans.values()})


# -- options, removal, robustness -----------------------------------------------------------


async def test_arguments_and_results_are_captured_only_when_asked(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    traced = Traced(provider, exporter, capture_arguments=True, capture_results=True)

    async def echo(args: object, ctx: ToolRunContext) -> object:
        """Echoes."""
        return {"got": args}

    traced.registry.tool(echo, name="tool")
    await traced.execute(arguments={"path": "a.txt", "n": [1, 2]})
    await traced.execute(arguments={"bad": {1}})

    ok_span, not_json_span = traced.spans()
    attributes = dict(ok_span.attributes or {})
    assert '{"path":"a.txt","n":[1,2]}' == attributes["gen_ai.tool.call.arguments"]
    assert '{"got":{"path":"a.txt","n":[1,2]}}' == attributes["gen_ai.tool.call.result"]
    # Arguments that are not JSON are not recorded, nor is an error result.
    not_json_attributes = dict(not_json_span.attributes or {})
    assert "gen_ai.tool.call.arguments" not in not_json_attributes
    assert "gen_ai.tool.call.result" not in not_json_attributes


async def test_nothing_is_captured_by_default(traced: Traced) -> None:
    await success(traced)

    attributes = dict(traced.span().attributes or {})
    assert "gen_ai.tool.call.arguments" not in attributes
    assert "gen_ai.tool.call.result" not in attributes


async def test_the_registration_stops_tracing(traced: Traced) -> None:
    traced.registry.tool(returns_done, name="tool")
    traced.registration()
    await traced.execute()

    assert [] == traced.spans()


@pytest.mark.parametrize("where", ["call_started", "call_finished"])
async def test_a_raising_instrument_beside_otel_changes_no_result(
    traced: Traced, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    traced.registry.tool(returns_done, name="tool")
    baseline = await traced.execute()

    class Raising:
        def call_started(self, exec: ToolExecution) -> None:
            if where == "call_started":
                raise RuntimeError("instrument broke")

        def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
            if where == "call_finished":
                raise RuntimeError("instrument broke")

    traced.registry.add_instrument(Raising())
    result = await traced.execute()

    assert baseline == result
    assert 2 == len(traced.spans())
    assert ["instrument broke"] == [
        str(record.exc_info[1]) for record in caplog.records if record.exc_info
    ]


def test_instrument_takes_a_registry() -> None:
    with pytest.raises(TypeError, match="ToolRegistry"):
        trio_tools.otel.instrument(object())  # type: ignore[arg-type]


def test_the_public_names_of_trio_tools_otel() -> None:
    assert ["instrument"] == trio_tools.otel.__all__
    assert "trio_tools.otel" == trio_tools.otel.instrument.__module__


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_import_trio_tools_never_imports_opentelemetry() -> None:
    done = _run_python(
        "import sys, trio_tools; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'opentelemetry'))"
    )
    assert 0 == done.returncode, done.stderr
    assert "[]" == done.stdout.strip()


def test_a_missing_opentelemetry_names_the_extra() -> None:
    done = _run_python(
        "import sys; sys.modules['opentelemetry'] = None\n"
        "try:\n"
        "    import trio_tools.otel\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert 0 == done.returncode, done.stderr
    assert "pip install 'trio_tools[otel]'" in done.stdout


async def test_a_span_opened_in_a_worker_thread_of_the_body_is_a_child(traced: Traced) -> None:
    """``trio.to_thread.run_sync`` runs in a copy of the body's context."""

    def in_thread() -> str:
        with traced.tracer.start_as_current_span("thread work"):
            return "from thread"

    async def body(args: object, ctx: ToolRunContext) -> str:
        """Works in a thread."""
        return await trio.to_thread.run_sync(in_thread)

    traced.registry.tool(body, name="tool")
    await traced.execute()

    thread_work, tool = traced.spans()
    assert "execute_tool tool" == tool.name
    assert thread_work.parent is not None
    assert tool.context.span_id == thread_work.parent.span_id
