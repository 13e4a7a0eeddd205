# reject: pyright mypy
"""Rejected: ``input`` is bytes or text, not a list of lines."""

from __future__ import annotations

import trio_tools


async def body() -> None:
    await trio_tools.run_command(["cat"], input=["a", "b"])  # expect-error
