"""OpenTelemetry tracing of tool calls: one span per call, current while the call runs.

``trio_tools.otel`` needs ``opentelemetry-api`` (the ``otel`` extra: ``pip install
'trio_tools[otel]'``); ``import trio_tools`` never imports it.  Configure a tracer provider
with the OpenTelemetry SDK (or any other implementation of the API) as usual, then call
:func:`instrument` once per registry.  See ``docs/observability.md``.
"""

try:
    import opentelemetry.trace as _trace
except ImportError as _exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "trio_tools.otel needs opentelemetry-api, which is not installed: "
        "pip install 'trio_tools[otel]'"
    ) from _exc
else:
    del _trace

from .._util import fix_module as _fix_module
from ._spans import instrument as instrument

__all__ = ["instrument"]

_fix_module(globals(), __all__)
del _fix_module
