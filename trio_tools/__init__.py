"""trio_tools: a Trio-native tool registry with caller-owned cancellation.

Every tool call carries a required :class:`CancelSignal` owned by its caller; the registry
binds it onto Trio cancel scopes, awaits started work to quiescence, and returns exactly one
frozen :class:`ToolResult` per call.
"""

from ._signal import CancelReason as CancelReason
from ._signal import CancelSignal as CancelSignal
from ._signal import CancelSource as CancelSource
from ._signal import open_signal as open_signal
from ._util import fix_module as _fix_module

__all__ = [
    "CancelReason",
    "CancelSignal",
    "CancelSource",
    "open_signal",
]

_fix_module(globals(), *__all__)
del _fix_module
