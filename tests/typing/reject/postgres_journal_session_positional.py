# reject: pyright mypy
"""Rejected: ``session`` is keyword-only (a positional string could be the wrong one)."""

from __future__ import annotations

import trio_tools


async def body() -> None:
    async with trio_tools.open_postgres_journal("dbname=agents", "agent-1"):  # expect-error
        pass
