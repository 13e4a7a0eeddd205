# reject: pyright mypy
"""Rejected: ``call_finished`` takes the view and the result."""

from __future__ import annotations

import trio_tools
from trio_tools import ToolExecution


class Forgetful:
    def call_started(self, exec: ToolExecution) -> None:
        pass

    def call_finished(self, exec: ToolExecution) -> None:
        pass


def install(registry: trio_tools.ToolRegistry) -> None:
    registry.add_instrument(Forgetful())  # expect-error
