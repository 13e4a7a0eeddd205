"""Run a command as a process group that is stopped whole, and awaited, when the call ends.

``trio.run_process`` terminates the one process it started.  A shell tool starts a *tree*
(``bash -c "make && ./test"``): terminating the shell leaves its children running,
re-parented to PID 1, long after the tool call came back ``ABORTED``.  :func:`run_command`
starts the command as the leader of a new session (hence of a new process group), and on
cancellation signals the whole group and waits until no process of it is left.
"""

# run-time validation of values from untyped callers:
# pyright: reportUnnecessaryIsInstance=false

from __future__ import annotations

import contextlib
import errno
import math
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import final

import attrs
import trio

from ._execution import ToolRunContext
from ._results import AdditionalContext

__all__ = ["CommandResult", "run_command"]

_CHUNK = 65536
_POLL_INTERVAL = 0.01  # seconds, only where pidfds are missing
_SOURCE = "run_command"
# Linux tells us which processes are in a group (``/proc``) and when each exits (pidfds).
_PROC = os.path.exists("/proc/self/stat") and hasattr(os, "pidfd_open")


@final
@attrs.frozen(kw_only=True)
class CommandResult:
    """How a command run by :func:`run_command` ended, and what it printed.

    ``returncode`` is the exit status, or ``-N`` when the process was killed by signal ``N``
    (as in :mod:`subprocess`).  ``stdout`` and ``stderr`` are decoded as UTF-8 (invalid bytes
    replaced); ``truncated`` says whether either was cut to ``max_output``.
    """

    returncode: int
    stdout: str
    stderr: str
    truncated: bool = False


class _Capture:
    """One output stream, kept as its first and last bytes within ``limit``."""

    __slots__ = ("_head", "_head_limit", "_tail", "_tail_limit", "_total")

    def __init__(self, limit: int) -> None:
        self._head = bytearray()
        self._tail = bytearray()
        self._head_limit = (limit + 1) // 2
        self._tail_limit = limit - self._head_limit
        self._total = 0

    @property
    def truncated(self) -> bool:
        return self._total > self._head_limit + self._tail_limit

    def add(self, data: bytes) -> None:
        self._total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self._tail_limit:
            self._tail += data
            # Trim only when twice the limit: amortised O(1) per byte, even for a flood.
            if len(self._tail) > 2 * self._tail_limit:
                del self._tail[: -self._tail_limit]

    def text(self) -> str:
        if not self.truncated:
            return (self._head + self._tail).decode("utf-8", errors="replace")
        tail = self._tail[-self._tail_limit :] if self._tail_limit else b""
        omitted = self._total - len(self._head) - len(tail)
        head = self._head.decode("utf-8", errors="replace")
        rest = tail.decode("utf-8", errors="replace")
        return f"{head}\n[... {omitted} bytes omitted ...]\n{rest}"


# KeyboardInterrupt protection: a Ctrl-C must not strike between two lines of the
# bookkeeping that stops and reaps the group (leaking a process or a file); Trio delivers it
# at the next checkpoint instead, where the stop handles it.
@trio.lowlevel.enable_ki_protection
async def run_command(
    command: str | Sequence[str],
    *,
    ctx: ToolRunContext | None = None,
    shell: bool = False,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | str | None = None,  # the name subprocess uses
    max_output: int = 1_000_000,
    grace_period: float = 5.0,
) -> CommandResult:
    """Run ``command`` to completion in its own process group; stop the whole group on cancel.

    The command starts in a new session, so it is the leader of a new process group that
    everything it starts joins, and a Ctrl-C at the terminal (which signals the terminal's
    foreground group) never reaches it: stopping it is the caller's decision.  Its stdin is
    ``input`` (then closed) or ``/dev/null``, never the terminal; stdout and stderr are read
    concurrently while it runs, each kept within ``max_output`` bytes as its head and its
    tail, with a marker saying how many bytes were left out between them.

    **Cancellation.**  When the call is cancelled (the tool call's signal fired, its timeout
    passed, or any enclosing scope was cancelled) the whole group gets ``SIGTERM`` (and
    ``SIGCONT``, so a stopped process handles it), then ``SIGKILL`` after ``grace_period``
    seconds; ``run_command`` waits until no process of the group is running and reaps the
    command's own process before ``trio.Cancelled`` propagates.  A ``KeyboardInterrupt`` (a
    second Ctrl-C) that arrives during the grace period skips the rest of it: the group gets
    ``SIGKILL`` at once and the command is reaped.  With ``ctx``, the output
    captured so far is deferred on the tool call's result as an
    ``AdditionalContext(source="run_command")``, so an ``ABORTED`` or ``TOOL_TIMEOUT`` result
    still tells the model what the command printed.  Once the call is cancelled no
    :class:`CommandResult` is returned, whatever the exit status: a command killed by a
    signal while the call was being cancelled (say a ``SIGINT`` to the group) is reported as
    the cancellation, never as a failed command the tool could turn into ``TOOL_FAILED``.

    **When the command exits by itself**, any process it left running in its group (``cmd
    &``) is stopped the same way, so the call returns only when the group is gone.

    What a group kill cannot reach: a process that leaves the group, by starting its own
    session (``setsid``, daemons) or moving to another group (``setpgid``, e.g. job control
    in an interactive shell).  It outlives the call; whatever it prints after the group is
    gone is not captured.  Waiting for every process of the group relies on Linux's
    ``/proc`` and pidfds; on other POSIX systems the group is signalled the same way but
    only the command's own process is awaited.  Not available on Windows.

    Args:
        command: a sequence of arguments (``["ls", "-l"]``), or with ``shell=True`` one
            string run by ``/bin/sh -c``.
        ctx: the tool body's context, to defer the output so far when cancelled.
        shell: run ``command`` (a string) through ``/bin/sh -c``.
        cwd: the working directory (must exist).
        env: the child's whole environment (as in :mod:`subprocess`); ``None`` inherits.
        input: bytes (or text, encoded as UTF-8) written to the command's stdin.
        max_output: bytes kept per stream (positive); the rest is cut from the middle.
        grace_period: seconds between ``SIGTERM`` and ``SIGKILL`` (finite, >= 0).

    Returns:
        A :class:`CommandResult`; a non-zero ``returncode`` is not an exception.

    Raises:
        ValueError / TypeError: an empty or ill-typed ``command``, or a bad option.
        FileNotFoundError / NotADirectoryError: ``cwd`` is not a directory.
        OSError: the executable cannot be started (``FileNotFoundError`` when missing); with
            ``shell=True`` a missing program is the shell's exit status 127 instead.
        trio.Cancelled: the call was cancelled (after the group was stopped and reaped).
    """
    argv = _argv(command, shell)
    data = _input_bytes(input)
    _check_options(cwd, env, max_output, grace_period, ctx)
    if sys.platform == "win32":  # pragma: no cover - POSIX process groups only
        raise NotImplementedError("run_command() needs POSIX process groups")
    await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled call starts nothing
    process = await trio.lowlevel.open_process(
        argv,
        stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )
    out, err = _Capture(max_output), _Capture(max_output)
    try:
        await _supervise(process, data, out, err, grace_period)
        # The command ended, but if the call was cancelled meanwhile, cancellation wins: a
        # body that turns a non-zero exit into an error must not beat the stop.
        await trio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        if ctx is not None:
            ctx.defer_context(_output_so_far(argv, shell, command, process, out, err, ctx))
        raise
    finally:
        for stream in (process.stdin, process.stdout, process.stderr):
            if isinstance(stream, trio.lowlevel.FdStream):
                stream.close()
    assert process.returncode is not None  # _supervise reaped it
    return CommandResult(
        returncode=process.returncode,
        stdout=out.text(),
        stderr=err.text(),
        truncated=out.truncated or err.truncated,
    )


async def _supervise(
    process: trio.Process,
    data: bytes | None,
    out: _Capture,
    err: _Capture,
    grace_period: float,
) -> None:
    """Wait for the command while capturing its output; stop and reap its group at the end.

    Raises what interrupted the wait (``Cancelled``, ``KeyboardInterrupt``), unwrapped, after
    the group is gone.
    """
    stdout, stderr = _fd_stream(process.stdout), _fd_stream(process.stderr)
    # The readers and the writer are shielded and stopped explicitly: they must keep
    # draining the pipes while the group is being stopped (a process blocked on a full pipe
    # cannot exit), and an outer cancellation must not reach them as a group of Cancelled.
    io_scopes = [trio.CancelScope(shield=True) for _ in range(3)]
    interrupted: BaseException | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_read_into, stdout, out, io_scopes[0])
        nursery.start_soon(_read_into, stderr, err, io_scopes[1])
        if data is not None and process.stdin is not None:
            nursery.start_soon(_write_input, process.stdin, data, io_scopes[2])
        try:
            await process.wait()
            # A cancellation arriving while leftovers are stopped lets their stop go on the
            # same way (SIGKILL only after the grace period); run_command raises it after.
            with trio.CancelScope(shield=True):
                await _stop_group(process, grace_period, leftovers_only=True)
        except BaseException as exc:
            interrupted = exc
            with trio.CancelScope(shield=True):  # no process of the group may outlive us
                await _stop_group(process, grace_period, leftovers_only=False)
        finally:
            for scope in io_scopes:
                scope.cancel()
    # Every writer is gone (a process that left the group may still hold a pipe open): take
    # what is left in the pipes without waiting for an end of file that may never come.
    _drain(stdout, out)
    _drain(stderr, err)
    if interrupted is not None:
        raise interrupted


def _fd_stream(stream: object) -> trio.lowlevel.FdStream:
    assert isinstance(stream, trio.lowlevel.FdStream)  # open_process(stdout=PIPE) on POSIX
    return stream


async def _read_into(
    stream: trio.lowlevel.FdStream, capture: _Capture, scope: trio.CancelScope
) -> None:
    with scope:
        while data := await stream.receive_some(_CHUNK):
            capture.add(data)


async def _write_input(stream: trio.abc.SendStream, data: bytes, scope: trio.CancelScope) -> None:
    with scope:
        try:
            await stream.send_all(data)
            await stream.aclose()
        except trio.BrokenResourceError:
            pass  # the command exited (or closed stdin) without reading all of it


def _drain(stream: trio.lowlevel.FdStream, capture: _Capture) -> None:
    """Read what the pipe holds right now (it is non-blocking), up to its end of file."""
    while True:
        try:
            data = os.read(stream.fileno(), _CHUNK)
        except BlockingIOError:
            return
        if not data:
            return
        capture.add(data)


async def _stop_group(process: trio.Process, grace_period: float, *, leftovers_only: bool) -> None:
    """SIGTERM the command's group, SIGKILL it after ``grace_period``, wait until it is gone.

    With ``leftovers_only`` (the command's own process has exited by itself) nothing is sent
    unless some process of the group is still running.
    """
    pgid = process.pid  # a session leader's group id is its pid
    if leftovers_only and not _live_members(pgid):
        await process.wait()
        return
    _signal_group(pgid, signal.SIGTERM)
    _signal_group(pgid, signal.SIGCONT)
    try:
        with trio.move_on_after(grace_period) as grace:
            periods = _grace_periods()
            periods.add(grace)
            try:
                await _wait_group_gone(process)
                return
            finally:
                periods.discard(grace)
    except BaseException:
        # Interrupted while waiting out the grace period (a second Ctrl-C): skip the rest of
        # it, but still leave nothing behind.
        _signal_group(pgid, signal.SIGKILL)
        with trio.CancelScope(shield=True):  # SIGKILL cannot be resisted: this is quick
            await _wait_group_gone(process)
        raise
    _signal_group(pgid, signal.SIGKILL)
    await _wait_group_gone(process)


# The grace periods being waited out right now, in this Trio run.
_GRACE_PERIODS: trio.lowlevel.RunVar[set[trio.CancelScope]] = trio.lowlevel.RunVar(
    "trio_tools_grace_periods"
)


def _grace_periods() -> set[trio.CancelScope]:
    try:
        return _GRACE_PERIODS.get()
    except LookupError:
        periods: set[trio.CancelScope] = set()
        _GRACE_PERIODS.set(periods)
        return periods


def end_grace_periods() -> None:
    """A Ctrl-C that interrupts (see open_sigint_cancel): every group being stopped gets
    SIGKILL now.

    Trio raises that ``KeyboardInterrupt`` in its main task only; a command run by a tool
    body in another task (the batch scheduler's) would otherwise wait out its grace period
    before the interrupt could propagate.
    """
    for grace in _grace_periods():
        grace.cancel()


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is already empty
        os.killpg(pgid, signum)


async def _wait_group_gone(process: trio.Process) -> None:
    """Wait until no process of the command's group is running, and reap the command."""
    pgid = process.pid
    while members := _live_members(pgid):
        for pid in members:
            await _wait_exited(pid, pgid)
    await process.wait()


def _live_members(pgid: int) -> list[int]:
    """The pids of the group's running (not zombie) processes; [] where /proc is missing."""
    if not _PROC:
        return []
    members: list[int] = []
    for name in os.listdir("/proc"):
        if name.isdigit() and _stat(int(name)) == (pgid, True):
            members.append(int(name))
    return members


def _stat(pid: int) -> tuple[int, bool] | None:
    """``(process group, running)`` for ``pid`` from ``/proc``, or ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[2]), fields[0] not in (b"Z", b"X")


async def _wait_exited(pid: int, pgid: int) -> None:
    """Wait until ``pid`` (a member of ``pgid``) has exited, without polling."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # a kernel without pidfds (before Linux 5.3): poll /proc instead
        while True:
            if _stat(pid) != (pgid, True):
                return
            await trio.sleep(_POLL_INTERVAL)
    try:
        # The pid may have been reused between the scan and pidfd_open: only wait for a
        # process that is still a running member of the group.
        if _stat(pid) == (pgid, True):
            await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)


def _argv(command: str | Sequence[str], shell: bool) -> list[str]:
    if not isinstance(shell, bool):
        raise TypeError(f"shell must be a bool, got {shell!r}")
    if isinstance(command, str):
        if not shell:
            raise TypeError(
                f"command {command!r} is a string: pass shell=True to run it with /bin/sh, "
                "or a sequence of arguments"
            )
        if not command.strip():
            raise ValueError("command must not be empty")
        return ["/bin/sh", "-c", command]
    if shell:
        raise TypeError(f"with shell=True, command must be a string, got {command!r}")
    if not isinstance(command, Sequence) or isinstance(command, bytes | bytearray):
        raise TypeError(f"command must be a sequence of strings, got {command!r}")
    argv: list[str] = []
    for index, argument in enumerate(command):
        if not isinstance(argument, str):
            raise TypeError(f"command[{index}] must be a str, got {argument!r}")
        argv.append(argument)
    if not argv or not argv[0]:
        raise ValueError(f"command must name a program, got {command!r}")
    return argv


def _input_bytes(value: bytes | str | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"input must be bytes, str or None, got {value!r}")


def _check_options(
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    max_output: int,
    grace_period: float,
    ctx: ToolRunContext | None,
) -> None:
    if cwd is not None:
        path = os.fspath(cwd)
        if not os.path.exists(path):
            raise FileNotFoundError(errno.ENOENT, "cwd does not exist", path)
        if not os.path.isdir(path):
            raise NotADirectoryError(errno.ENOTDIR, "cwd is not a directory", path)
    if env is not None and not (
        isinstance(env, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    ):
        raise TypeError(f"env must be a mapping of str to str, got {env!r}")
    if not isinstance(max_output, int) or isinstance(max_output, bool) or max_output < 1:
        raise ValueError(f"max_output must be a positive int, got {max_output!r}")
    if (
        not isinstance(grace_period, int | float)
        or isinstance(grace_period, bool)
        or not math.isfinite(grace_period)
        or grace_period < 0
    ):
        raise ValueError(f"grace_period must be finite seconds >= 0, got {grace_period!r}")
    if ctx is not None and not isinstance(ctx, ToolRunContext):
        raise TypeError(f"ctx must be the tool body's ToolRunContext, got {ctx!r}")


def _output_so_far(
    argv: list[str],
    shell: bool,
    command: str | Sequence[str],
    process: trio.Process,
    out: _Capture,
    err: _Capture,
    ctx: ToolRunContext,
) -> AdditionalContext:
    """What the model is told about a command that was stopped before it finished."""
    shown = command if shell and isinstance(command, str) else shlex.join(argv)
    reason = ctx.signal.reason
    why = reason.message if reason is not None else "interrupted"
    lines = [f"$ {shown}", f"[stopped before it finished: {why}; {_how_it_ended(process)}]"]
    for name, capture in (("stdout", out), ("stderr", err)):
        text = capture.text()
        if text:
            cut = ", truncated" if capture.truncated else ""
            lines.append(f"[{name}{cut}]\n{text.rstrip(chr(10))}")
    if len(lines) == 2:
        lines.append("[no output]")
    return AdditionalContext("\n".join(lines), source=_SOURCE)


def _how_it_ended(process: trio.Process) -> str:
    code = process.returncode
    if code is None:
        return "still running"  # only if the stop itself was interrupted
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
