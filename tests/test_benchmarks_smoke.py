"""The dispatch benchmark still runs: a smoke test, never a timing assertion.

Benchmarks print ratios against floors measured in the same run (CONVENTIONS: "never a timed
assertion in a test"); this only proves that ``benchmarks/bench_dispatch.py --quick`` runs
every goal end to end against the current package and exits 0.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_dispatch.py"
GOALS = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "T1", "T2", "A1", "J1", "J2", "J3")


def test_quick_benchmark_runs_every_goal_and_exits_0() -> None:
    """``--quick`` (1 round of 200 calls) reports one line per goal (P1..P7, T1, T2, A1, J1,
    J2, J3) and exits 0."""
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert 0 == completed.returncode, completed.stderr
    lines = re.finditer(r"^(P[1-7]|T[12]|A1|J[1-3]) ", completed.stdout, re.MULTILINE)
    reported = {match.group(1) for match in lines}
    assert set(GOALS) == reported, completed.stdout


def test_quick_code_mode_benchmark_reports_its_goal_and_exits_0() -> None:
    """``bench_code_mode.py --quick`` runs a real program and reports the C1 line."""
    script = SCRIPT.parent / "bench_code_mode.py"
    completed = subprocess.run(
        [sys.executable, str(script), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == completed.returncode, completed.stderr
    assert re.search(r"^C1 nested call: .* a direct execute", completed.stdout, re.MULTILINE)
