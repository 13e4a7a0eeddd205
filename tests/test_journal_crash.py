"""Crash tests of durable journals with real processes and SIGKILL.

A child process (``tests/journal_child.py``) runs the batches of ``PLAN`` on a durable
journal; every tool body first writes its marker file (flushed and fsynced).  The child is
SIGKILLed after its k-th journal write for every k, and at random moments; a fresh process
then recovers each journal, and the test checks the guarantees:

* every call of the model's list has exactly one result, and no call is missing;
* no call whose body started (its marker file exists) is ``ABORTED_BEFORE_DISPATCH``;
* every call whose result had been settled keeps that real result;
* ``recover()`` twice, and again after reopening, gives the same.

The suite runs once per journal backend of ``conftest.JOURNAL_BACKENDS`` (each names an
opener of ``journal_child.OPENERS``; ``journal_target`` makes a fresh target for each run:
a SQLite file, or a new schema of the suite's PostgreSQL server).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from trio_tools import TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH, ToolCall, ToolResult

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("journal_child.py")
SESSION = "agent-1"
TIMEOUT = 30.0  # seconds any one child may take
PARALLEL = 3  # children at a time
RANDOM_KILLS = 8
SEED = 20261201

# Two batches: a short parallel one, then one whose calls settle out of model order (b2
# settles while b1 sleeps), with a call that never dispatches (unknown tool), an exclusive
# call, a failing one and a slow last one.
PLAN: list[list[tuple[str, str, dict[str, Any]]]] = [
    [("a1", "step", {}), ("a2", "step", {"sleep": 0.02})],
    [
        ("b1", "step", {"sleep": 0.06}),
        ("b2", "step", {}),
        ("b3", "missing", {}),
        ("b4", "step", {"exclusive": True}),
        ("b5", "step", {"fail": True}),
        ("b6", "step", {"sleep": 0.03}),
    ],
]


# The backend and its fresh targets come from conftest (`journal_backend`,
# `journal_target`): the suite runs once per journal backend.


@attrs.define
class Run:
    """One child run: its directory, its journal target, and what it reported."""

    directory: Path
    target: str
    kill_after: int | None = None
    kill_at: float | None = None
    returncode: int | None = None
    reports: list[dict[str, Any]] = attrs.Factory(list)

    @property
    def markers(self) -> Path:
        return self.directory / "markers"

    def reported(self, method: str) -> dict[str, dict[str, Any]]:
        """The completed writes of ``method``, by call id (the last batch's win)."""
        return {r["call_id"]: r for r in self.reports if r.get("method") == method}

    def batches_recorded(self) -> int:
        return sum(1 for r in self.reports if r.get("method") == "record_batch")


def config(backend: str, run: Run) -> str:
    return json.dumps(
        {
            "backend": backend,
            "target": run.target,
            "session": SESSION,
            "markers": str(run.markers),
            "batches": PLAN,
            "kill_after": run.kill_after,
        }
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Every child started by the test; all are gone afterwards (killed if need be)."""
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=TIMEOUT)
    assert all(proc.returncode is not None for proc in started)


def start_child(
    backend: str, run: Run, processes: list[subprocess.Popen[str]]
) -> subprocess.Popen[str]:
    run.markers.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), "run", config(backend, run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.append(proc)
    return proc


def finish_child(run: Run, proc: subprocess.Popen[str]) -> None:
    timer = None
    if run.kill_at is not None:
        timer = threading.Timer(run.kill_at, proc.send_signal, (signal.SIGKILL,))
        timer.start()
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        if timer is not None:
            timer.cancel()
    run.returncode = proc.returncode
    run.reports = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed ({proc.returncode}):\n{stderr}")


def run_children(backend: str, runs: list[Run], processes: list[subprocess.Popen[str]]) -> None:
    for start in range(0, len(runs), PARALLEL):
        group = runs[start : start + PARALLEL]
        procs = [start_child(backend, run, processes) for run in group]
        for run, proc in zip(group, procs, strict=True):
            finish_child(run, proc)


def recover_all(
    backend: str, runs: list[Run], processes: list[subprocess.Popen[str]]
) -> dict[str, dict[str, Any]]:
    """Recover every run's journal in one fresh process; its report by target."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(CHILD),
            "recover",
            json.dumps(
                {"backend": backend, "session": SESSION, "targets": [r.target for r in runs]}
            ),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.append(proc)
    stdout, stderr = proc.communicate(timeout=TIMEOUT)
    assert 0 == proc.returncode, stderr
    reports = [json.loads(line) for line in stdout.splitlines()]
    return {report["target"]: report for report in reports}


def plan_calls(batch: int) -> list[dict[str, Any]]:
    return [ToolCall(call_id, name, args).to_dict() for call_id, name, args in PLAN[batch]]


@attrs.define
class Coverage:
    """What the runs exercised, so the guarantees are not checked vacuously."""

    recovered_real: int = 0  # settled but uncommitted, committed by recovery
    recovered_aborted: int = 0  # dispatched, never settled
    recovered_before_dispatch: int = 0
    partial_batches: int = 0


def check_guarantees(run: Run, recovery: dict[str, Any], coverage: Coverage) -> None:
    where = f"run kill_after={run.kill_after} kill_at={run.kill_at}"
    assert recovery["same_twice"], where
    assert recovery["same_after_reopen"], where
    history = recovery["history"]
    # No call of the model's list is missing: each recorded batch holds the plan's calls.
    assert len(history) >= run.batches_recorded(), where
    assert len(history) <= len(PLAN), where
    for index, record in enumerate(history):
        assert plan_calls(index) == record["calls"], where
        # Exactly one result per call, and the batch is closed.
        assert record["complete"], where
        assert len(record["calls"]) == len(record["results"]), where
        assert all(result is not None for result in record["results"]), where
    settled = run.reported("record_settled")
    committed = run.reported("record_result")
    dispatched = run.reported("record_dispatch")
    recovered = recovery["recovered"]
    # At most the last recorded batch was open at the crash; recovery closed exactly that.
    assert len(recovered) <= 1, where
    if recovered:
        coverage.partial_batches += 1
        assert history[-1]["results"] == recovered[0], where
    for index, record in enumerate(history):
        closed_by_recovery = bool(recovered) and index == len(history) - 1
        for call, data in zip(record["calls"], record["results"], strict=True):
            call_id = call["call_id"]
            result = ToolResult.from_dict(data)
            marker = (run.markers / call_id).exists()
            # A body that started is never reported as never dispatched.
            if marker:
                assert TOOL_ABORTED_BEFORE_DISPATCH != result.code, (where, call_id)
            # A settled result is never lost (and stays the real one).
            if call_id in settled:
                assert settled[call_id]["result"] == data, (where, call_id)
                assert not result.synthetic, (where, call_id)
            if call_id in committed:
                assert committed[call_id]["result"] == data, (where, call_id)
            elif closed_by_recovery:
                if call_id in settled:
                    coverage.recovered_real += 1
                elif result.code == TOOL_ABORTED and result.synthetic:
                    coverage.recovered_aborted += 1
                elif result.code == TOOL_ABORTED_BEFORE_DISPATCH and result.synthetic:
                    assert call_id not in dispatched, (where, call_id)
                    coverage.recovered_before_dispatch += 1


def test_sigkill_after_every_journal_write_and_at_random_moments(
    journal_backend: str,
    journal_target: Callable[[Path], str],
    tmp_path: Path,
    processes: list[subprocess.Popen[str]],
) -> None:
    backend, make_target = journal_backend, journal_target
    # The uninterrupted run: how many writes there are, and how long a run takes.
    (tmp_path / "full").mkdir()
    full = Run(tmp_path / "full", make_target(tmp_path / "full"))
    started = time.monotonic()
    run_children(backend, [full], processes)
    duration = time.monotonic() - started
    assert 0 == full.returncode
    assert {"finished": True} == full.reports[-1]
    writes = max(r["write"] for r in full.reports if "write" in r)
    assert writes >= 2 * sum(len(batch) for batch in PLAN)

    runs: list[Run] = []
    for k in range(1, writes + 1):
        directory = tmp_path / f"k{k}"
        directory.mkdir()
        runs.append(Run(directory, make_target(directory), kill_after=k))
    rng = random.Random(SEED)
    for index in range(RANDOM_KILLS):
        directory = tmp_path / f"r{index}"
        directory.mkdir()
        runs.append(Run(directory, make_target(directory), kill_at=rng.uniform(0, duration)))
    run_children(backend, runs, processes)
    for run in runs:
        if run.kill_after is not None:
            # It died right after reporting its k-th write.
            assert -signal.SIGKILL == run.returncode, run
            assert run.kill_after == run.reports[-1]["write"], run

    recoveries = recover_all(backend, [full, *runs], processes)
    coverage = Coverage()
    for run in [full, *runs]:
        check_guarantees(run, recoveries[run.target], coverage)
    # The uninterrupted run needed no recovery.
    assert [] == recoveries[full.target]["recovered"]
    # Every way a call can be closed by recovery happened in some run.
    assert coverage.recovered_real > 0, coverage
    assert coverage.recovered_aborted > 0, coverage
    assert coverage.recovered_before_dispatch > 0, coverage
    assert coverage.partial_batches > 0, coverage
