"""One OpenTelemetry span per tool call, through the registry's instrument hook."""

# the package's modules share underscore helpers with each other:
# pyright: reportPrivateUsage=false
# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

from contextlib import AbstractContextManager
from contextvars import Token
from types import TracebackType
from typing import final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.util.types import AttributeValue

from .._execution import ToolExecution
from .._json import to_compact_json
from .._registry import Registration, ToolRegistry
from .._results import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_TIMEOUT,
    TextBlock,
    ToolResult,
)
from .._signal import CancelReason

__all__ = ["instrument"]

# The version of the OpenTelemetry semantic conventions the spans follow (docs/observability.md).
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
CANCEL_EVENT = "trio_tools.cancelled"
_STOPPED = frozenset({TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH, TOOL_TIMEOUT})


def instrument(
    registry: ToolRegistry,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    capture_arguments: bool = False,
    capture_results: bool = False,
) -> Registration:
    """Trace every call of ``registry``: one span ``execute_tool {name}`` per call.

    The span follows the OpenTelemetry GenAI semantic conventions for an execute-tool span
    (kind ``INTERNAL``; ``gen_ai.operation.name``, ``gen_ai.tool.name``,
    ``gen_ai.tool.call.id``, ``gen_ai.tool.description``, ``gen_ai.tool.type``;
    ``error.type`` and an error status on error results) plus ``trio_tools.code``,
    ``trio_tools.body_invoked`` and ``trio_tools.synthetic``, and an event
    ``trio_tools.cancelled`` carrying the cancel reason.  Every call gets its span, also one
    that ends before any stage runs, and each synthetic result of the batch scheduler.  The
    span is current for the whole call: spans opened by the body, by tasks it starts with
    ``ctx.start_soon``, by its stages, and nested calls are its children.

    Args:
        registry: the registry whose calls to trace.
        tracer_provider: where spans go; the global tracer provider when ``None``.
        capture_arguments: record the arguments as compact JSON in
            ``gen_ai.tool.call.arguments`` (they may hold sensitive data: off by default).
        capture_results: record a successful result's text in ``gen_ai.tool.call.result``
            (images as ``[image MEDIA_TYPE]``; off by default).

    Returns:
        The :class:`~trio_tools.Registration` of the instrument: call it to stop tracing.

    Raises:
        TypeError: ``registry`` is not a :class:`~trio_tools.ToolRegistry`.
    """
    if not isinstance(registry, ToolRegistry):
        raise TypeError(f"instrument() takes a ToolRegistry, got {registry!r}")
    tracer = trace.get_tracer("trio_tools", tracer_provider=tracer_provider, schema_url=SCHEMA_URL)
    return registry.add_instrument(
        _SpanInstrument(tracer, bool(capture_arguments), bool(capture_results))
    )


@final
class _Current(AbstractContextManager[None]):
    """Makes a span current in the task's context, and resets it afterwards."""

    __slots__ = ("_context", "_token")

    def __init__(self, span: trace.Span) -> None:
        self._context = trace.set_span_in_context(span)
        self._token: Token[Context] | None = None

    def __enter__(self) -> None:
        self._token = otel_context.attach(self._context)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token = self._token
        if token is not None:
            self._token = None
            otel_context.detach(token)


@final
class _Call:
    """One traced call: its span and the listener on the caller's signal."""

    __slots__ = ("cancel_recorded", "dispose", "span")

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.cancel_recorded = False
        self.dispose = _nothing

    def cancelled(self, reason: CancelReason) -> None:
        self.cancel_recorded = True
        self.span.add_event(
            CANCEL_EVENT,
            {"trio_tools.cancel.code": reason.code, "trio_tools.cancel.message": reason.message},
        )


def _nothing() -> None:
    pass


@final
class _SpanInstrument:
    """The instrument :func:`instrument` adds."""

    __slots__ = ("_arguments", "_calls", "_results", "_tracer")

    def __init__(self, tracer: trace.Tracer, arguments: bool, results: bool) -> None:
        self._tracer = tracer
        self._arguments = arguments
        self._results = results
        self._calls: dict[ToolExecution, _Call] = {}

    def __repr__(self) -> str:
        return "<trio_tools.otel instrument>"

    def call_started(self, exec: ToolExecution) -> AbstractContextManager[None]:
        name = exec.name
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": exec.call_id,
            "gen_ai.tool.type": "function",
        }
        definition = exec.definition
        if definition is not None and definition.description:
            attributes["gen_ai.tool.description"] = definition.description
        if self._arguments and exec.arguments is not None:
            attributes["gen_ai.tool.call.arguments"] = to_compact_json(exec.arguments)
        span = self._tracer.start_span(
            f"execute_tool {name}", kind=trace.SpanKind.INTERNAL, attributes=attributes
        )
        call = _Call(span)
        self._calls[exec] = call
        # Recorded when the caller cancels (at once if it already has), while the call runs.
        call.dispose = exec.signal.add_listener(call.cancelled)
        return _Current(span)

    def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
        call = self._calls.pop(exec, None)
        if call is None:  # pragma: no cover - call_started always ran first
            return
        call.dispose()
        span = call.span
        attributes: dict[str, AttributeValue] = {
            "trio_tools.body_invoked": exec._run.body_invoked,
            "trio_tools.synthetic": result.synthetic,
        }
        error = result.error
        if error is not None:
            code = error.code
            attributes["error.type"] = code
            attributes["trio_tools.code"] = code
            if code in _STOPPED and (code == TOOL_TIMEOUT or not call.cancel_recorded):
                # Stopped by a signal the caller does not own (a timeout, a wrapper's
                # narrowed signal): the result says why.
                span.add_event(
                    CANCEL_EVENT,
                    {"trio_tools.cancel.code": code, "trio_tools.cancel.message": error.message},
                )
            span.set_status(trace.StatusCode.ERROR, error.message)
        elif self._results:
            attributes["gen_ai.tool.call.result"] = _result_text(result)
        span.set_attributes(attributes)
        span.end()


def _result_text(result: ToolResult) -> str:
    return "\n".join(
        block.text if isinstance(block, TextBlock) else f"[image {block.media_type}]"
        for block in result.content
    )
