# reject: pyright mypy
"""Rejected: the approver answers "granted", "rejected" or "cancelled", not a bool."""

from __future__ import annotations

import trio_tools
from trio_tools import ApprovalRequest


async def approver(request: ApprovalRequest) -> bool:
    return True


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.set_approver(approver)  # expect-error
