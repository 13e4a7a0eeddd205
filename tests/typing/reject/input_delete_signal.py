# reject: pyright
# mypy does not check `del` of an attribute against its declaration (a property without a
# deleter, a frozen attrs field), so pyright is the authority for this case; mypy must find
# the rest of the file clean.
"""Rejected: ToolExecutionInput is frozen; its signal cannot be deleted."""

from __future__ import annotations

import trio_tools


def drop(call: trio_tools.ToolExecutionInput) -> None:
    del call.signal  # expect-error
