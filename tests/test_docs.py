"""The documentation is tested like code.

* Every ```python block of ``README.md`` and ``docs/*.md`` that is a full program (it
  contains ``trio.run(``) runs in a fresh interpreter and must succeed; when an ```output
  block follows it, that is exactly what the program prints.  Every other ```python block
  must at least compile (top-level ``await`` allowed: fragments show code from inside an
  ``async def``).
* ``docs/api.md`` has a section for every public name of ``trio_tools`` (and none for a
  name that is gone), and each section mentions every parameter / field of its name.
* Every error code constant is explained in ``docs/concepts.md`` or ``docs/pipeline.md``.
* Relative links point to files that exist, and to headings that exist (``page.md#anchor``).
* The README's quick start is exactly ``make demo`` and ``make test``, and it links every
  page of ``docs/``.

Run ``python tests/test_docs.py FILE.md`` to print what each program of a page outputs.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

import trio_tools

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]
TIMEOUT = 60


@attrs.frozen
class Block:
    """One fenced code block: where it is, its language, its text; for a program, the
    ```output block that follows it (``None`` if none does)."""

    path: Path
    line: int
    lang: str
    text: str
    output: str | None = None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def is_program(self) -> bool:
        return self.lang == "python" and "trio.run(" in self.text


_FENCE = re.compile(r"^```(\S*)\s*$")


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, each ```output block attached to the program
    block right before it (only blank lines or one line of prose may separate them)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = previous_end = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and lines[index].rstrip() != "```":
            body.append(lines[index])
            index += 1
        if index == len(lines):
            raise AssertionError(f"{path}:{start + 1}: unclosed code block")
        index += 1
        text = "\n".join(body) + "\n"
        lang = match.group(1)
        if lang == "output":
            previous = found[-1] if found else None
            between = [line for line in lines[previous_end:start] if line.strip()]
            if previous is None or not previous.is_program or len(between) > 1:
                raise AssertionError(f"{path}:{start + 1}: an output block must follow a program")
            found[-1] = attrs.evolve(previous, output=text)
        else:
            found.append(Block(path, start + 1, lang, text))
        previous_end = index
    return found


ALL_BLOCKS = [block for page in PAGES if page.exists() for block in blocks(page)]
PROGRAMS = [block for block in ALL_BLOCKS if block.is_program]
FRAGMENTS = [block for block in ALL_BLOCKS if block.lang == "python" and not block.is_program]


def run_program(block: Block, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = cwd / "doc_program.py"
    script.write_text(block.text, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def test_the_docs_have_programs() -> None:
    """The collection below is not silently empty: the README and pipeline pages run."""
    pages = {block.path.name for block in PROGRAMS}
    assert {"README.md", "pipeline.md", "concepts.md", "howto.md"} <= pages


@pytest.mark.parametrize("block", PROGRAMS, ids=[block.id for block in PROGRAMS])
def test_program_runs(block: Block, tmp_path: Path) -> None:
    """A full program of the docs runs, exits 0, and prints its ```output block."""
    done = run_program(block, tmp_path)
    assert 0 == done.returncode, f"{block.id} failed:\n{done.stdout}\n{done.stderr}"
    if block.output is not None:
        assert _normalise(block.output) == _normalise(done.stdout), block.id


@pytest.mark.parametrize("block", FRAGMENTS, ids=[block.id for block in FRAGMENTS])
def test_fragment_compiles(block: Block) -> None:
    """A fragment is valid Python (``await`` allowed at top level)."""
    compile(block.text, block.id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


# -- the API reference -------------------------------------------------------------------

_SECTION = re.compile(r"^### `([A-Za-z_][A-Za-z0-9_]*)`", re.MULTILINE)


def api_sections() -> dict[str, str]:
    """``docs/api.md``'s sections, by the name in their ``### `Name``` heading."""
    text = (DOCS / "api.md").read_text(encoding="utf-8")
    matches = list(_SECTION.finditer(text))
    sections: dict[str, str] = {}
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following is not None else len(text)
        name = match.group(1)
        assert name not in sections, f"docs/api.md documents {name} twice"
        sections[name] = text[match.start() : end]
    return sections


def test_api_reference_covers_every_public_name() -> None:
    sections = api_sections()
    missing = sorted(set(trio_tools.__all__) - set(sections))
    assert [] == missing, "public names without a section in docs/api.md"
    stale = sorted(set(sections) - set(trio_tools.__all__))
    assert [] == stale, "docs/api.md sections for names that are not public"


def _documented_parameters(name: str) -> list[str]:
    """The parameter / field names a reader of ``name``'s section must find in it."""
    value = getattr(trio_tools, name)
    if inspect.isclass(value) and attrs.has(value):
        return [field.name for field in attrs.fields(value) if not field.name.startswith("_")]
    if inspect.isfunction(value):
        return [p for p in inspect.signature(value).parameters if not p.startswith("_")]
    return []


@pytest.mark.parametrize("name", sorted(trio_tools.__all__))
def test_api_section_mentions_every_parameter(name: str) -> None:
    section = api_sections().get(name)
    if section is None:
        pytest.fail(f"docs/api.md has no section for {name}")
    missing = [p for p in _documented_parameters(name) if not re.search(rf"\b{p}\b", section)]
    assert [] == missing, f"the section of {name} does not mention these"


# -- codes, links, quick start -----------------------------------------------------------

CODE_CONSTANTS = {
    name: value
    for name in trio_tools.__all__
    if name.isupper() and isinstance(value := getattr(trio_tools, name), str)
}


def test_there_are_code_constants() -> None:
    assert {"TOOL_ABORTED", "TOOL_ABORTED_BEFORE_DISPATCH", "TOOL_TIMEOUT"} <= set(CODE_CONSTANTS)


@pytest.mark.parametrize("name", sorted(CODE_CONSTANTS))
def test_every_error_code_is_explained(name: str) -> None:
    """Both the constant and its value, e.g. ``TOOL_ABORTED`` and `` `ABORTED` ``."""
    text = "\n".join(
        (DOCS / page).read_text(encoding="utf-8") for page in ("concepts.md", "pipeline.md")
    )
    assert re.search(rf"\b{name}\b", text), f"{name} is not in concepts.md or pipeline.md"
    assert f"`{CODE_CONSTANTS[name]}`" in text


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The heading anchors of a page, as GitHub makes them (duplicates get ``-1``...)."""
    found: set[str] = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (match := re.match(r"^#{1,6} (.*)$", line)):
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            unique, count = slug, 0
            while unique in found:
                count += 1
                unique = f"{slug}-{count}"
            found.add(unique)
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    """Links to other files of the repository, and to headings in Markdown pages."""
    broken: list[str] = []
    for link in _LINK.findall(page.read_text(encoding="utf-8")):
        if "://" in link or link.startswith("mailto:"):
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target) if target else page
        exists = path.exists()
        if not exists or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            broken.append(link)
    assert [] == broken


def test_readme_quick_start_is_make_demo_and_make_test() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [
        line.strip()
        for block in re.findall(r"```\w*\n(.*?)```", section, re.DOTALL)
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert ["make demo", "make test"] == commands
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo:", makefile, re.MULTILINE)
    assert re.search(r"^test:", makefile, re.MULTILINE)


def test_readme_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if f"docs/{p.name}" not in readme]
    assert [] == missing


if __name__ == "__main__":
    import tempfile

    for page in sys.argv[1:]:
        for block in blocks(Path(page).resolve()):
            if block.is_program:
                with tempfile.TemporaryDirectory() as directory:
                    done = run_program(block, Path(directory))
                print(f"--- {block.id} (exit {done.returncode})")
                print(done.stdout + done.stderr, end="")
