# reject: pyright mypy
"""Rejected: instrument methods are synchronous; an ``async def call_started`` is not an
Instrument."""

from __future__ import annotations

import trio_tools
from trio_tools import ToolExecution, ToolResult


class Waiting:
    async def call_started(self, exec: ToolExecution) -> None:
        pass

    def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
        pass


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_instrument(Waiting())  # expect-error
