# reject: pyright mypy
"""Rejected: ``thread_limiter`` is a ``trio.CapacityLimiter`` (or ``None``)."""

from __future__ import annotations

import trio_tools

registry = trio_tools.ToolRegistry(thread_limiter=4)  # expect-error
