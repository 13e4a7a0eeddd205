"""W3C trace context across a process hop (MCP's request ``_meta``), when OpenTelemetry is
installed.

The carrier keys are W3C Trace Context's ``traceparent`` and ``tracestate`` (and W3C
Baggage's ``baggage``), written and read by OpenTelemetry's global propagator, as the
OpenTelemetry semantic conventions for MCP and the MCP specification (SEP-414) describe.
Without ``opentelemetry-api`` both directions do nothing; ``opentelemetry`` is imported on
first use, never when ``trio_tools`` is imported.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from contextlib import contextmanager
from types import ModuleType

__all__ = ["inject_trace_context", "open_trace_context"]

_loaded = False
_context: ModuleType | None = None  # opentelemetry.context, when importable
_propagate: ModuleType | None = None  # opentelemetry.propagate, when importable


def _load() -> bool:
    """Import OpenTelemetry's context and propagation API once; ``False`` if missing."""
    global _loaded, _context, _propagate
    if not _loaded:
        _loaded = True
        try:
            from opentelemetry import context, propagate
        except ImportError:
            pass
        else:
            _context, _propagate = context, propagate
    return _propagate is not None


def inject_trace_context() -> dict[str, str]:
    """The current trace context as carrier entries (``traceparent``...): empty without
    OpenTelemetry or without a current span."""
    carrier: dict[str, str] = {}
    if _load():
        assert _propagate is not None
        _propagate.inject(carrier)
    return carrier


@contextmanager
def open_trace_context(meta: Mapping[str, object] | None) -> Generator[None]:
    """Inside the block, the trace context ``meta`` carries is the current one.

    Spans started inside (a traced registry's call) become children of the remote span.
    Nothing changes when ``meta`` has no ``traceparent`` or OpenTelemetry is missing.
    """
    if meta is None or not isinstance(meta.get("traceparent"), str) or not _load():
        yield
        return
    assert _context is not None
    assert _propagate is not None
    carrier = {key: value for key, value in meta.items() if isinstance(value, str)}
    token = _context.attach(_propagate.extract(carrier))
    try:
        yield
    finally:
        _context.detach(token)
