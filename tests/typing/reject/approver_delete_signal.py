# reject: pyright
# mypy does not check `del` of an attribute against its declaration (a property without a
# deleter, a frozen attrs field), so pyright is the authority for this case; mypy must find
# the rest of the file clean.
"""Rejected: the signal of the read-only ToolExecution the approver gets (through
`ApprovalRequest.execution`) cannot be deleted."""

from __future__ import annotations

from typing import Literal

import trio_tools
from trio_tools import ApprovalRequest


async def approver(request: ApprovalRequest) -> Literal["granted", "rejected", "cancelled"]:
    del request.execution.signal  # expect-error
    return "granted"


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.set_approver(approver)
