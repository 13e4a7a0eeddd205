"""Code Mode: the model writes one program that calls many tools.

``run_code_tool(registry)`` makes a ``run_code`` tool whose argument is a Python program.
The program runs in a child process (:class:`SubprocessRuntime`, or any
:class:`CodeRuntime`) on asyncio, and calls the registry's tools as
``await tools.NAME(**arguments)``.  Every nested call goes through the registry with the
outer call's token as ``parent`` and a signal derived from the outer call's, so cancelling
the outer call cancels them all, and the run reaches quiescence (no nested call running, no
child process alive) before ``run_code`` returns.  See ``docs/code_mode.md``.
"""

from .._util import fix_module as _fix_module
from ._errors import CODE_RUN_FAILED as CODE_RUN_FAILED
from ._errors import CodeRunFailedError as CodeRunFailedError
from ._runtime import CodeRuntime as CodeRuntime
from ._runtime import SubprocessRuntime as SubprocessRuntime
from ._stub import sdk_stub as sdk_stub
from ._tool import run_code_tool as run_code_tool

__all__ = [
    "CODE_RUN_FAILED",
    "CodeRunFailedError",
    "CodeRuntime",
    "SubprocessRuntime",
    "run_code_tool",
    "sdk_stub",
]

_fix_module(globals(), __all__)
del _fix_module
