"""Ctrl-C as a stop button: the first press cancels a source, the second interrupts."""

from __future__ import annotations

import contextlib
import signal
import threading
import weakref
from collections.abc import Callable, Generator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import trio

from ._command import end_grace_periods
from ._signal import CancelSource

__all__ = ["open_sigint_cancel"]

# The handlers of the open blocks, which a nested block's handler may fall back to.
_HANDLERS: weakref.WeakSet[Callable[[int, FrameType | None], None]] = weakref.WeakSet()


@contextmanager
def open_sigint_cancel(source: CancelSource, *, reason: str = "interrupted") -> Generator[None]:
    """Inside the block, the first Ctrl-C cancels ``source``; a second one interrupts as usual.

    An agent's REPL wants Ctrl-C to stop the *turn*, not to kill the program: the first
    SIGINT received inside the block calls ``source.cancel(reason)`` (from the Trio loop, at
    once), so the tool calls carrying ``source.signal`` stop the way a stop button stops
    them — started calls come back ``ABORTED``, a batch closes its unstarted calls and its
    journal balances — and ``trio.run`` goes on.  Any later SIGINT, or the first one if
    ``source`` had already been cancelled by other means, goes to the handler that was
    installed before the block (inside ``trio.run``, Trio's own: ``KeyboardInterrupt`` as
    usual), so a user whose stop does not take effect can still press Ctrl-C again.

    The previous handler is restored when the block exits.  Blocks nest: inside an inner
    block the first press cancels the inner source, the next one reaches the outer block.

    Synchronous, like :func:`trio.open_signal_receiver`: it only installs a signal handler.

    Raises:
        RuntimeError: not called from the main thread inside ``trio.run`` (Python runs
            signal handlers in the main thread only).
    """
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("open_sigint_cancel() must be used in the main thread")
    token = trio.lowlevel.current_trio_token()  # RuntimeError outside trio.run
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:  # installed outside Python: Python's own default is the closest
        previous = signal.default_int_handler
    pressed = False
    # Falling back to another block's handler is that block's press, not an interrupt.
    interrupts = previous != signal.SIG_IGN and not any(previous is h for h in _HANDLERS)

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        nonlocal pressed
        if not pressed and not source.signal.cancelled:
            pressed = True
            try:
                # A signal handler may run in the middle of Trio's own code: only hand the
                # cancellation to the loop (run_sync_soon is signal-safe), never run it here.
                token.run_sync_soon(source.cancel, reason)
                return
            except trio.RunFinishedError:
                pass  # the run is over: nothing left to stop, interrupt instead
        elif interrupts:
            # This press interrupts: commands whose group is being stopped are killed now,
            # whichever task runs them (Trio raises KeyboardInterrupt in its main task only).
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(end_grace_periods)
        _previous_handler(previous, signum, frame)

    _HANDLERS.add(on_sigint)
    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _previous_handler(
    previous: Callable[[int, FrameType | None], Any] | int, signum: int, frame: FrameType | None
) -> None:
    """Do what the handler installed before the block would have done."""
    if previous == signal.SIG_IGN:
        return
    if callable(previous):
        previous(signum, frame)
        return
    # SIG_DFL would kill the process outright; Python's own default for SIGINT is gentler.
    raise KeyboardInterrupt
