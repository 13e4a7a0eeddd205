"""One trace across an MCP hop: the W3C trace context travels in the request's ``_meta``.

trio_tools does not add this itself: the MCP SDK (``mcp>=2.3``) injects the current trace
context (``traceparent``, SEP-414) into each request's ``_meta`` and makes it current on the
serving side.  A mounted tool's body runs with its ``trio_tools.otel`` span current, so the
request carries that span, and the serving registry's span becomes its child.  These tests
pin that behaviour of the combination.  Both registries are traced into one SDK provider;
the server's tasks start before any span exists, so only ``_meta`` can link the two sides.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers_mcp import ERAS, WIRE_ERAS, Era, open_client
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import trio_tools
import trio_tools.otel
from trio_tools import CancelSource, ToolExecutionInput, ToolRegistry, ToolRunContext
from trio_tools.mcp import mount, server


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def remote_registry(provider: TracerProvider) -> ToolRegistry:
    registry = ToolRegistry()
    tracer = provider.get_tracer("remote")

    @registry.tool
    async def echo(args: object, ctx: ToolRunContext) -> str:
        """Echoes."""
        with tracer.start_as_current_span("remote work"):
            return "echoed"

    trio_tools.otel.instrument(registry, tracer_provider=provider)
    return registry


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    named = {span.name: span for span in spans}
    assert len(named) == len(spans), [span.name for span in spans]
    return named


def parent_of(spans: dict[str, ReadableSpan], name: str) -> str | None:
    parent = spans[name].parent
    if parent is None:
        return None
    [found] = [n for n, s in spans.items() if s.context.span_id == parent.span_id]
    return found


def traceparent_of(span: ReadableSpan) -> str:
    context = span.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def tools_call_meta(wire: Any) -> dict[str, Any]:
    [request] = [m for m in wire.sent if m.get("method") == "tools/call"]
    meta: dict[str, Any] = request["params"].get("_meta", {})
    return meta


@pytest.mark.parametrize("era", ERAS)
async def test_one_trace_crosses_the_hop(
    provider: TracerProvider, exporter: InMemorySpanExporter, era: Era
) -> None:
    remote = remote_registry(provider)
    local = ToolRegistry()
    trio_tools.otel.instrument(local, tracer_provider=provider)
    tracer = provider.get_tracer("agent")

    async with open_client(server(remote, name="remote"), era) as (client, wire):
        await mount(local, client, prefix="r_")
        with tracer.start_as_current_span("agent step"):
            result = await local.execute(
                ToolExecutionInput(
                    call_id="c1", name="r_echo", arguments={}, signal=CancelSource().signal
                )
            )

    assert "echoed" == result.text
    spans = by_name(exporter.get_finished_spans())
    assert {
        "agent step": None,
        "execute_tool r_echo": "agent step",
        "execute_tool echo": "execute_tool r_echo",
        "remote work": "execute_tool echo",
    } == {name: parent_of(spans, name) for name in spans}
    assert 1 == len({span.context.trace_id for span in spans.values()})
    if wire is not None:
        assert traceparent_of(spans["execute_tool r_echo"]) == tools_call_meta(wire)["traceparent"]


@pytest.mark.parametrize("era", WIRE_ERAS)
async def test_the_server_side_takes_the_parent_from_the_request_meta(
    provider: TracerProvider, exporter: InMemorySpanExporter, era: Era
) -> None:
    """A plain MCP client (no trio_tools on its side) sends a ``traceparent``."""
    remote = remote_registry(provider)
    trace_id, span_id = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
    traceparent = f"00-{trace_id:032x}-{span_id:016x}-01"

    async with open_client(server(remote, name="remote"), era) as (client, _):
        await client.call_tool("echo", {}, meta={"traceparent": traceparent})

    spans = by_name(exporter.get_finished_spans())
    tool = spans["execute_tool echo"]
    assert tool.parent is not None
    assert (trace_id, span_id, True) == (
        tool.context.trace_id,
        tool.parent.span_id,
        tool.parent.is_remote,
    )


@pytest.mark.parametrize("era", WIRE_ERAS)
async def test_no_meta_without_a_current_span(era: Era) -> None:
    """Untraced callers send no trace context (and the call works as before)."""
    remote = ToolRegistry()

    @remote.tool
    async def echo(args: object, ctx: ToolRunContext) -> str:
        """Echoes."""
        return "echoed"

    local = ToolRegistry()
    async with open_client(server(remote, name="remote"), era) as (client, wire):
        await mount(local, client)
        result = await local.execute(
            ToolExecutionInput(
                call_id="c1", name="echo", arguments={}, signal=CancelSource().signal
            )
        )

    assert "echoed" == result.text
    assert "traceparent" not in tools_call_meta(wire)
