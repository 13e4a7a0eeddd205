"""Prove that every case under ``tests/typing/reject/`` is rejected by the type checkers.

Each reject file is one small case.  Its first line names the checkers that must reject it::

    # reject: pyright mypy

and each offending line carries a trailing ``# expect-error`` comment.  A case passes when
every checker named in the header reports errors on exactly the marked lines (and nowhere
else in the file), and every checker *not* named reports no error at all: the rest of the
file is valid code, so the rejection is caused by the marked line and nothing else.  (mypy
does not check ``del`` of an attribute against its declaration, so the ``del`` cases name
pyright only; if a new mypy starts rejecting them, this script says so.)

The checkers run with the project's own settings (``pyproject.toml``: strict pyright and
mypy) and the binaries of the virtualenv running this script.  Each checker runs **once**
over all the cases and its diagnostics are grouped by file.

Usage: ``.venv/bin/python tests/typing/check_rejections.py [CASE.py ...]`` (default: every
case).  Exit status 0 when every case is rejected as declared, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REJECT_DIR = HERE / "reject"
PYPROJECT = ROOT / "pyproject.toml"
CHECKERS = ("pyright", "mypy")

_HEADER = re.compile(r"#\s*reject:(?P<checkers>[^#]*)$")
_EXPECT = re.compile(r"#\s*expect-error\s*$")


class CheckError(Exception):
    """The run itself failed: a malformed case, or a checker that did not run."""


@dataclass(frozen=True)
class Case:
    """One reject file: which checkers must reject it, and on which lines."""

    path: Path
    checkers: frozenset[str]
    expected_lines: frozenset[int]

    @property
    def label(self) -> str:
        return self.path.relative_to(ROOT).as_posix()


@dataclass(frozen=True)
class Diagnostic:
    line: int
    message: str


def parse_case(path: Path) -> Case:
    """Read a case's ``# reject:`` header and its ``# expect-error`` lines."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = _HEADER.match(lines[0]) if lines else None
    if header is None:
        raise CheckError(f"{path}: its first line must be '# reject: <checker> ...'")
    checkers = frozenset(header["checkers"].split())
    unknown = checkers - set(CHECKERS)
    if not checkers or unknown:
        raise CheckError(
            f"{path}: '# reject:' must name some of {', '.join(CHECKERS)}, "
            f"got {header['checkers'].strip()!r}"
        )
    expected = frozenset(
        number for number, text in enumerate(lines, start=1) if _EXPECT.search(text)
    )
    if not expected:
        raise CheckError(f"{path}: no line is marked '# expect-error'")
    return Case(path=path.resolve(), checkers=checkers, expected_lines=expected)


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _binary(name: str) -> str:
    # The virtualenv's own binaries, never whatever happens to be first on PATH.
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        raise CheckError(f"{name} is not installed next to {sys.executable}")
    return found


def _run(command: Sequence[str], ok_codes: Iterable[int]) -> str:
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if completed.returncode not in set(ok_codes):
        raise CheckError(
            f"{' '.join(command)} exited with {completed.returncode}:\n"
            f"{completed.stdout}{completed.stderr}"
        )
    return completed.stdout


def run_pyright(cases: Sequence[Case]) -> dict[Path, list[Diagnostic]]:
    """Run pyright once over the cases with the project's settings; errors by file.

    ``pyproject.toml`` excludes the reject directory from the normal run (and pyright
    applies ``exclude`` to paths given on the command line too), so a throw-away config
    extends the project's and includes exactly these files.
    """
    with tempfile.TemporaryDirectory(prefix="trio-tools-reject-") as tmp:
        config = Path(tmp) / "pyrightconfig.json"
        # pyright resolves these relative to the config file and ignores absolute ones.
        config.write_text(
            json.dumps(
                {
                    "extends": os.path.relpath(PYPROJECT, tmp),
                    "include": [os.path.relpath(case.path, tmp) for case in cases],
                    "exclude": [],
                }
            ),
            encoding="utf-8",
        )
        # Exit status 1 means "errors were reported", which is the point here.
        output = _run(
            [
                _binary("pyright"),
                "--outputjson",
                "--project",
                str(config),
                "--pythonpath",
                sys.executable,
            ],
            ok_codes=(0, 1),
        )
    report: Any = json.loads(output)
    checked = int(report["summary"]["filesAnalyzed"])
    if checked != len(cases):
        raise CheckError(f"pyright analysed {checked} file(s), expected {len(cases)}")
    found: dict[Path, list[Diagnostic]] = {}
    for item in report["generalDiagnostics"]:
        if item["severity"] != "error":
            continue
        rule = f" ({item['rule']})" if "rule" in item else ""
        found.setdefault(Path(item["file"]).resolve(), []).append(
            Diagnostic(int(item["range"]["start"]["line"]) + 1, _one_line(item["message"]) + rule)
        )
    return found


def run_mypy(cases: Sequence[Case]) -> dict[Path, list[Diagnostic]]:
    """Run mypy once over the cases with the project's settings; errors by file."""
    output = _run(
        [
            _binary("mypy"),
            "--config-file",
            str(PYPROJECT),
            "--output",
            "json",
            *(str(case.path) for case in cases),
        ],
        ok_codes=(0, 1),
    )
    found: dict[Path, list[Diagnostic]] = {}
    for raw in output.splitlines():
        if not raw.startswith("{"):
            continue
        item: Any = json.loads(raw)
        if item["severity"] != "error":
            continue
        found.setdefault((ROOT / item["file"]).resolve(), []).append(
            Diagnostic(int(item["line"]), f"{_one_line(item['message'])} [{item['code']}]")
        )
    return found


def judge(case: Case, checker: str, errors: Sequence[Diagnostic]) -> list[str]:
    """The problems with one checker's verdict on one case (empty when it is as declared)."""
    reported = {error.line for error in errors}

    def describe(lines: Iterable[int]) -> str:
        return "; ".join(
            f"line {error.line}: {error.message}"
            for error in sorted(errors, key=lambda error: error.line)
            if error.line in set(lines)
        )

    if checker not in case.checkers:
        if not errors:
            return []
        hint = (
            f" ({checker} now rejects the marked line: add it to the '# reject:' header)"
            if reported <= case.expected_lines
            else ""
        )
        return [f"{checker} must find no error here but reported {describe(reported)}{hint}"]
    problems: list[str] = []
    if not errors:
        problems.append(f"type-checks cleanly under {checker}: the rejection no longer holds")
    else:
        missed = sorted(case.expected_lines - reported)
        if missed:
            problems.append(
                f"{checker} accepted line(s) {', '.join(map(str, missed))} marked expect-error"
            )
    unexpected = reported - case.expected_lines
    if unexpected:
        problems.append(f"{checker} reported errors on unmarked lines: {describe(unexpected)}")
    return problems


def check(cases: Sequence[Case]) -> dict[str, list[str]]:
    """Every case's problems, by case label; a case without problems maps to ``[]``."""
    verdicts: Mapping[str, dict[Path, list[Diagnostic]]] = {
        "pyright": run_pyright(cases),
        "mypy": run_mypy(cases),
    }
    return {
        case.label: [
            problem
            for checker in CHECKERS
            for problem in judge(case, checker, verdicts[checker].get(case.path, []))
        ]
        for case in cases
    }


def main(argv: Sequence[str]) -> int:
    try:
        paths = [Path(arg) for arg in argv] or sorted(REJECT_DIR.glob("*.py"))
        if not paths:
            raise CheckError(f"no cases found in {REJECT_DIR}")
        results = check([parse_case(path) for path in paths])
    except CheckError as exc:
        print(f"check_rejections: {exc}", file=sys.stderr)
        return 1
    failed = {label: problems for label, problems in results.items() if problems}
    for label, problems in results.items():
        print(f"{'FAIL' if problems else 'ok  '} {label}")
        for problem in problems:
            print(f"       {problem}")
    if failed:
        print(
            f"\n{len(failed)} of {len(results)} rejection case(s) are not rejected as "
            "declared (see above)",
            file=sys.stderr,
        )
        return 1
    print(f"all {len(results)} rejection cases are rejected as declared")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
