# reject: pyright mypy
"""Rejected: ``requires_approval`` is a bool or a callable of the parsed arguments."""

from __future__ import annotations

import trio_tools


async def body(path: str) -> str:
    return path


tool = trio_tools.define_tool(body, requires_approval="always")  # expect-error
