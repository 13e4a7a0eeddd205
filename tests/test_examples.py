"""Every file in ``examples/`` runs, exits 0, and prints what it is there to show.

The examples are found with a glob, so a new example is run without touching this file;
``EXPECTED`` adds the lines a reader of a known example should see (an example without an
entry only has to exit 0).  Each runs in its own interpreter, the project's, the way a
reader runs it (``.venv/bin/python examples/NAME.py``), from a scratch directory.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
TIMEOUT = 60


@attrs.frozen
class Run:
    """What an example prints when fed ``stdin``: every line of ``expected`` appears."""

    expected: tuple[str, ...]
    stdin: bytes | None = None
    # Keep stdin open (and empty) after ``stdin``, so reads wait rather than see its end.
    keep_stdin_open: bool = False


EXPECTED: dict[str, list[Run]] = {
    "approval.py": [
        Run(
            stdin=b"y\nn\na\n",
            keep_stdin_open=True,
            expected=(
                '  delete_file {"path":"notes.txt"}',
                "-> OK: deleted notes.txt",
                '-> DENIED: Error: the user rejected tool "delete_file"',
                "-> OK: deleted draft.txt",
                '  delete_file {"path":"old.log"}: allowed (always)',
                "(interrupted: the user pressed stop)",
                "-> ABORTED_BEFORE_DISPATCH: Error: tool call aborted before dispatch",
                "what the tool bodies actually deleted: ['notes.txt', 'draft.txt', 'old.log']",
            ),
        ),
        Run(
            stdin=b"",  # end of input at once: the approver answers "cancelled"
            expected=(
                '-> DENIED: Error: approval for tool "delete_file" was cancelled',
                "what the tool bodies actually deleted: []",
            ),
        ),
    ],
    "threads_and_processes.py": [
        Run(
            expected=(
                "crunch_numbers  ABORTED  Error: tool call aborted",
                "count_words     ABORTED  Error: tool call aborted",
                "run_script      ABORTED  Error: tool call aborted",
                "[thread] exiting",
                "[sync tool thread] exiting",
                "thread exited before the result: True",
                "sync tool's thread exited before the result: True",
                "[run_command] $ bash -c",
                "[stopped before it finished: the user pressed stop; killed by SIGTERM]",
                "[child] group",
                "processes of the script's group still running: 0",
                "DEADLINE_EXCEEDED",
            )
        )
    ],
    "nested_dispatch.py": [
        Run(
            expected=(
                "start  research-1",
                "  start  research-1/wiki  (child of research-1)",
                "  result research-1/archive: OK",
                "result research-1: OK  3 of 3 pages about trio",
                "  result research-2/wiki: OK",
                "  result research-2/archive: ABORTED  Error: tool call aborted",
                "result research-2: ABORTED  Error: tool call aborted",
            )
        )
    ],
    "ctrl_c.py": [
        Run(
            expected=(
                "run_tool_calls returned; aborted=True",
                "result  call-4 ABORTED_BEFORE_DISPATCH (synthetic)",
                "run_tool_calls returned; aborted=True; reason: "
                "CancelReason(code='CANCELLED', message='the user pressed Ctrl+C')",
                "KeyboardInterrupt propagated out of trio.run",
                "result  call-2 ABORTED",
                "result  call-5 ABORTED_BEFORE_DISPATCH (synthetic)",
                "the journal is balanced",
            )
        )
    ],
    "code_mode.py": [
        Run(
            expected=(
                "    async def fetch(*, url: str, seconds: float = 0.05) -> str:",
                "  result step-1:code:4 (delete_file): DENIED",
                "  | fetched: <page a>, <page b>, <page c>",
                "  | refused: DENIED programs may not delete files",
                "step-2 returned CODE_RUN_FAILED:",
                "  | Error: code run failed (exception): ValueError: the page did not parse",
                "  | starting",
                "  result step-3:code:1 (fetch): ABORTED",
                "step-3 returned ABORTED:",
            )
        )
    ],
    "openai_agent.py": [
        Run(
            expected=(
                "Chat Completions:",
                # the strict null of "unit" was dropped: the default applies
                '  get_weather({"city":"Lyon"}) -> OK: Sunny in Lyon, 21 degrees celsius',
                '  screenshot({"url": "https://example.org"}) -> OK: screenshot of '
                "https://example.org",
                "model: Done. I saw 3 tool results and 1 image(s).",
                "Responses API, streamed:",
                "requests the fake API received: 6, rejected: 0",
            )
        )
    ],
    "anthropic_agent.py": [
        Run(
            expected=(
                "  toolu_1 -> OK",
                "[the user presses stop]",
                "  toolu_2 -> ABORTED",
                "  toolu_3 -> ABORTED_BEFORE_DISPATCH (synthetic)",
                "model: Stopped, as you asked. Two searches ran; nothing was saved.",
                "requests the fake API received: 3, rejected: 0",
            )
        )
    ],
    "mcp_client.py": [
        Run(
            expected=(
                "mounted: files_word_count, files_slow_search",
                "progress call-3 {'progress': 1.0, 'total': 20.0, 'message': 'page 1'}",
                "[server] slow_search stopped: the MCP client cancelled the request"
                " (notifications/cancelled)",
                'result  call-1 OK: {"words":4}',
                'result  call-2 OK: {"words":1}',
                "result  call-3 ABORTED: Error: tool call aborted",
                "result  call-4 ABORTED_BEFORE_DISPATCH (synthetic)",
                "the journal is balanced",
            )
        )
    ],
    # Served over stdio; with no client (stdin at its end) it stops at once.
    "mcp_server.py": [Run(stdin=b"", expected=())],
    "mcp_http.py": [
        Run(
            expected=(
                "mounted: remote_word_count, remote_slow_search",
                'result  call-1 OK: {"words":4}',
                "result  call-2 ABORTED: Error: tool call aborted",
                "[server] slow_search published ABORTED",
                "server stopped",
            )
        )
    ],
    # Written by other people: only what their purpose guarantees.
    "timeouts.py": [Run(expected=("TOOL_TIMEOUT",))],
    "agent_turn.py": [Run(expected=("ABORTED_BEFORE_DISPATCH (synthetic)", "balanced"))],
    "durable_agent.py": [
        Run(
            expected=(
                "turn killed with SIGKILL: True",
                "batch complete before recovery: False",
                "recover() again returns the same: True",
                "  search_flights  ABORTED                  synthetic Error: tool call aborted",
                "  get_weather     ok                       real      Lisbon: sunny, 24 C",
                "  book_hotel      ABORTED_BEFORE_DISPATCH  synthetic "
                "Error: tool call aborted before dispatch",
                "-> it never ran: safe to retry",
            )
        )
    ],
}


def run_example(path: Path, run: Run, cwd: Path) -> tuple[int, str, str]:
    """Run ``path``; its output goes to files, so that stdin can stay open while it runs."""
    stdout_path, stderr_path = cwd / "stdout.txt", cwd / "stderr.txt"
    with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(path)],
            cwd=cwd,
            stdin=subprocess.PIPE if run.stdin is not None else subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
        try:
            if process.stdin is not None:
                process.stdin.write(run.stdin or b"")
                process.stdin.flush()
                if not run.keep_stdin_open:
                    process.stdin.close()
            process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            pytest.fail(f"{path.name} did not finish in {TIMEOUT}s")
        finally:
            if process.stdin is not None:
                process.stdin.close()
    return (
        process.returncode,
        stdout_path.read_text(encoding="utf-8", errors="replace"),
        stderr_path.read_text(encoding="utf-8", errors="replace"),
    )


CASES = [
    pytest.param(path, run, id=f"{path.stem}-{index}" if index else path.stem)
    for path in EXAMPLES
    for index, run in enumerate(EXPECTED.get(path.name, [Run(expected=())]))
]


def test_examples_are_found() -> None:
    """The glob is not silently empty, and every known example still exists."""
    names = {path.name for path in EXAMPLES}
    assert {"approval.py", "threads_and_processes.py", "nested_dispatch.py", "ctrl_c.py"} <= names


@pytest.mark.parametrize(("path", "run"), CASES)
def test_example(path: Path, run: Run, tmp_path: Path) -> None:
    returncode, stdout, stderr = run_example(path, run, tmp_path)
    assert 0 == returncode, f"{path.name} exited {returncode}:\n{stdout}\n{stderr}"
    missing = [line for line in run.expected if line not in stdout]
    assert [] == missing, f"{path.name} printed:\n{stdout}"


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_example_is_a_script(path: Path) -> None:
    """Each example has ``main()`` and runs it only as a script."""
    text = path.read_text(encoding="utf-8")
    assert "\ndef main(" in text or "\nasync def main(" in text
    assert '\nif __name__ == "__main__":\n' in text
