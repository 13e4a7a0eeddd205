"""``trio_tools.mcp`` as a package: optional, documented, and its pure converters."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import mcp.types as types
import pytest

import trio_tools
import trio_tools.mcp
from trio_tools import (
    AdditionalContext,
    ErrorInfo,
    Halt,
    ImageBlock,
    TextBlock,
    ToolResult,
)
from trio_tools._json import FrozenDict
from trio_tools.mcp._convert import (
    call_tool_result,
    progress_from_mcp,
    progress_to_mcp,
    tool_result,
)

ROOT = Path(__file__).resolve().parent.parent


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_import_trio_tools_does_not_import_the_mcp_integration() -> None:
    done = _python(
        """
        import sys
        import trio_tools
        assert "mcp" not in sys.modules, "trio_tools imported the MCP SDK"
        assert "trio_tools.mcp" not in sys.modules
        """
    )
    assert 0 == done.returncode, done.stderr


def test_without_the_sdk_importing_trio_tools_mcp_names_the_extra() -> None:
    done = _python(
        """
        import sys
        sys.modules["mcp"] = None  # as if it were not installed
        try:
            import trio_tools.mcp
        except ImportError as exc:
            print(exc)
        else:
            raise SystemExit("imported without the SDK")
        """
    )
    assert 0 == done.returncode, done.stderr
    assert "pip install 'trio_tools[mcp]'" in done.stdout


def test_public_names_are_exactly_all_and_report_their_package() -> None:
    public = {name for name in vars(trio_tools.mcp) if not name.startswith("_")}
    assert set(trio_tools.mcp.__all__) == public - {"annotations"}
    for name in ("mount", "server", "serve_stdio"):
        assert "trio_tools.mcp" == getattr(trio_tools.mcp, name).__module__
    assert "MCP_CONNECTION_LOST" == trio_tools.mcp.MCP_CONNECTION_LOST
    assert "trio_tools/result" == trio_tools.mcp.RESULT_META_KEY


def _api_section(name: str) -> str:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    match = re.search(rf"^### `trio_tools\.mcp\.{name}`$(.*?)(?=^#{{2,3}} |\Z)", text, re.M | re.S)
    assert match is not None, f"docs/api.md has no section for trio_tools.mcp.{name}"
    return match.group(1)


@pytest.mark.parametrize("name", trio_tools.mcp.__all__)
def test_every_public_name_has_an_api_section_mentioning_its_parameters(name: str) -> None:
    section = _api_section(name)
    value = getattr(trio_tools.mcp, name)
    if inspect.isfunction(value):
        missing = [
            p for p in inspect.signature(value).parameters if not re.search(rf"\b{p}\b", section)
        ]
        assert [] == missing
    else:
        assert f"`{value}`" in section or f'"{value}"' in section


def test_the_mcp_page_says_what_a_remote_cancel_cannot_do_and_names_the_meta_key() -> None:
    page = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    assert "trio_tools/result" in page
    assert "cannot be confirmed" in page
    assert "docs/mcp.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "mcp.md" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")


# -- converters -----------------------------------------------------------------------


def test_a_served_result_maps_to_a_call_tool_result_with_its_wire_form() -> None:
    result = ToolResult(
        content=(TextBlock("a"), ImageBlock("image/png", "aGk=")),
        is_error=True,
        error=ErrorInfo("E", "SOME_CODE", "m"),
        additional_contexts=(AdditionalContext("c", source="s"),),
        meta=FrozenDict({"k": (1, 2)}),
        halt=Halt("h"),
    )
    reply = types.CallToolResult.model_validate(call_tool_result(result))

    assert [
        types.TextContent(text="a"),
        types.ImageContent(data="aGk=", mime_type="image/png"),
    ] == (reply.content)
    assert reply.is_error
    assert {"k": [1, 2]} == reply.structured_content
    assert {"trio_tools/result": result.to_dict()} == reply.meta
    assert result == tool_result(reply)


def test_a_meta_that_is_not_an_object_is_not_structured_content() -> None:
    reply = types.CallToolResult.model_validate(
        call_tool_result(ToolResult(content=(), meta=(1, 2)))
    )
    assert reply.structured_content is None
    assert (1, 2) == tool_result(reply).meta


def test_an_unreadable_wire_form_falls_back_to_the_plain_mapping() -> None:
    reply = types.CallToolResult(
        content=[types.TextContent(text="x")], _meta={"trio_tools/result": {"v": 99}}
    )
    assert ToolResult(content=(TextBlock("x"),)) == tool_result(reply)


def test_an_error_reply_without_text_still_has_a_message() -> None:
    reply = types.CallToolResult(content=[], is_error=True)
    assert ErrorInfo("MCPToolError", "TOOL_FAILED", "the MCP tool reported an error") == (
        tool_result(reply).error
    )


@pytest.mark.parametrize(
    ("progress", "count", "expected"),
    [
        (3, 1, (3.0, None, None)),
        (0.5, 7, (0.5, None, None)),
        ({"progress": 2, "total": 8, "message": "m"}, 1, (2.0, 8.0, "m")),
        ({"progress": 2, "total": "x", "message": 3}, 1, (2.0, None, None)),
        ({"progress": True}, 4, (4.0, None, '{"progress":true}')),
        ("downloading", 2, (2.0, None, "downloading")),
        ([1, "a"], 3, (3.0, None, '[1,"a"]')),
        (True, 1, (1.0, None, "true")),
        (10**400, 5, (5.0, None, str(10**400))),
        (object, 6, (6.0, None, repr(object))),
    ],
)
def test_progress_to_mcp(
    progress: object, count: int, expected: tuple[float, float | None, str | None]
) -> None:
    assert expected == progress_to_mcp(progress, count)


def test_progress_from_mcp_reads_back_unchanged() -> None:
    for notice in [(1.0, None, None), (1.0, 2.0, None), (1.0, None, "m"), (0.5, 4.0, "half")]:
        assert notice == progress_to_mcp(progress_from_mcp(*notice), 99)
    assert {"progress": 0.5, "total": 4.0} == progress_from_mcp(0.5, 4.0, None)


def test_the_mcp_benchmark_runs_both_goals() -> None:
    """A smoke run of ``benchmarks/bench_mcp.py``: never a timing assertion."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_mcp.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    assert {"M1", "M2"} == set(re.findall(r"^(M[12]) \d+\.\d\dx ", done.stdout, re.M)), done.stdout
