"""Accepted: instruments whose ``call_started`` returns nothing or a context manager (an
OpenTelemetry ``use_span``), and ``trio_tools.otel.instrument``'s options."""

from __future__ import annotations

from opentelemetry import trace

import trio_tools
import trio_tools.otel
from trio_tools import Instrument, Registration, ToolExecution, ToolResult


class Counting:
    def __init__(self) -> None:
        self.calls = 0

    def call_started(self, exec: ToolExecution) -> None:
        self.calls += 1

    def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
        self.calls -= 1


class Spans:
    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self.spans: dict[trio_tools.ExecutionToken, trace.Span] = {}

    def call_started(self, exec: ToolExecution) -> trace.Span:  # a span is a context manager
        span = self.spans[exec.token] = self.tracer.start_span(exec.name)
        return span

    def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
        self.spans.pop(exec.token).end()


def install(registry: trio_tools.ToolRegistry, tracer: trace.Tracer) -> list[Registration]:
    counting: Instrument = Counting()
    return [
        registry.add_instrument(counting),
        registry.add_instrument(Spans(tracer)),
        trio_tools.otel.instrument(registry),
        trio_tools.otel.instrument(
            registry,
            tracer_provider=trace.get_tracer_provider(),
            capture_arguments=True,
            capture_results=True,
        ),
    ]
