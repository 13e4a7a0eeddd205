"""The child's end of Code Mode's protocol (``trio_tools/code_mode/_child.py``), in process.

The child runs the program on asyncio and reads the parent's lines through an
``asyncio.Protocol``: each reply resolves its call's future from the pipe's callback.
These tests drive that protocol by hand (the end-to-end runs are in
``test_code_mode.py``): replies in any order and split across chunks, and a parent that
is gone or sends a line past the limit, after which every pending and later call fails
with ``ConnectionError`` instead of waiting for a reply that cannot come.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator

import pytest

from trio_tools.code_mode import _child


@pytest.fixture
def channel() -> Iterator[_child.Channel]:
    """A channel whose calls go to a pipe nobody reads (big enough for these tests)."""
    read_end, write_end = os.pipe()
    try:
        yield _child.Channel(in_fd=-1, out_fd=write_end)
    finally:
        os.close(read_end)
        os.close(write_end)


def line(message: dict[str, object]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def test_replies_resolve_their_calls_in_any_order_and_split_across_chunks(
    channel: _child.Channel,
) -> None:
    async def main() -> list[object]:
        lines = _child.Lines(channel)
        channel.code = asyncio.get_running_loop().create_future()
        lines.data_received(line({"code": "pass"}))
        assert await channel.code == "pass"
        first = asyncio.ensure_future(channel.call("a", {}))
        second = asyncio.ensure_future(channel.call("b", {}))
        await asyncio.sleep(0)  # both sent
        both = line({"id": 2, "ok": "two"}) + line({"id": 1, "ok": "one"})
        lines.data_received(both[:5])
        lines.data_received(both[5:-3])
        assert not first.done()
        lines.data_received(both[-3:])
        return [await first, await second]

    assert asyncio.run(main()) == ["one", "two"]


@pytest.mark.parametrize("how", ["end of the pipe", "a line past the limit"])
def test_once_the_parent_is_gone_every_call_fails(
    channel: _child.Channel, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_child, "MAX_LINE", 64)

    async def main() -> list[str]:
        lines = _child.Lines(channel)
        pending = asyncio.ensure_future(channel.call("a", {}))
        await asyncio.sleep(0)
        if how == "end of the pipe":
            lines.eof_received()
        else:
            lines.data_received(b"x" * 100)
            lines.data_received(line({"id": 1, "ok": "too late"}))  # ignored from now on
        errors: list[str] = []
        for call in (pending, asyncio.ensure_future(channel.call("b", {}))):
            with pytest.raises(ConnectionError) as caught:
                await call
            errors.append(str(caught.value))
        return errors

    expected = {
        "end of the pipe": "the parent closed the tool channel",
        "a line past the limit": "a message longer than 64 bytes",
    }[how]
    assert asyncio.run(main()) == [expected, expected]
