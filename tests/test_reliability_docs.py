"""The docs stand on their own and promise only what the library does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(
    [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "examples").glob("*.py"),
        *(ROOT / "trio_tools").rglob("*.py"),
    ]
)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_shipped_file_cites_a_design_document_users_do_not_have(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert [] == re.findall(r".{0,30}(?:DESIGN|§\s*\d).{0,30}", text)


@pytest.mark.parametrize("path", ["README.md", "docs/concepts.md", "docs/howto.md"])
def test_the_docs_do_not_promise_that_trio_run_process_stops_a_process_tree(path: str) -> None:
    """Cancelling ``trio.run_process(["bash", "-c", "sleep 20"])`` terminates bash, not the
    ``sleep``: the docs must not promise that every process is stopped and waited for."""
    text = " ".join((ROOT / path).read_text(encoding="utf-8").split())
    assert "threads and child processes included" not in text
    assert "is terminated on cancellation, and waited for." not in text
    assert "terminates and waits for the child on cancellation;" not in text
    if path != "README.md":
        assert re.search(r"`trio\.run_process`\)? terminates (?:only )?the (?:one )?process", text)
