# reject: pyright mypy
"""Rejected: Ctrl-C cancels a source it owns; a read-only signal cannot be cancelled."""

from __future__ import annotations

import trio_tools


def stop_button(source: trio_tools.CancelSource) -> None:
    with trio_tools.open_sigint_cancel(source.signal):  # expect-error
        pass
