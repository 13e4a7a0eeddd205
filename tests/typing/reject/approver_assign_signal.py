# reject: pyright mypy
"""Rejected: the signal of the read-only ToolExecution the approver gets (through
`ApprovalRequest.execution`) cannot be assigned."""

from __future__ import annotations

from typing import Literal

import trio_tools
from trio_tools import ApprovalRequest


async def approver(request: ApprovalRequest) -> Literal["granted", "rejected", "cancelled"]:
    request.execution.signal = trio_tools.CancelSource().signal  # expect-error
    return "granted"


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.set_approver(approver)
