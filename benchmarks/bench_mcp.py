"""Cost of a tool served by ``trio_tools.mcp.server``, against the SDK's own ``MCPServer``.

Both servers offer one no-op tool taking ``{"x": int}``; the real SDK client calls it in
the same process, over the same transport, in the same run.  The ratio is
trio_tools / MCPServer per call, so it survives a change of machine.

======  ================================================================  ========
goal    what                                                              target
======  ================================================================  ========
M1      2025 era: JSON-RPC over the SDK's in-memory streams               <= 1.2x
M2      2026 era: the SDK's in-process client (no JSON-RPC framing)       <= 1.2x
======  ================================================================  ========

Each goal runs ``--warmup`` unmeasured calls per server, then ``--rounds`` rounds; a round
times ``--calls`` sequential calls to each server (the order alternates between rounds,
with ``gc.collect()`` before each), and the goal's ratio is the median of the rounds'
ratios.  Everything runs in this one process, so the verdict uses process CPU time
(:func:`time.process_time`), which other load on a shared machine does not move; the
diagnostic line also gives wall-clock microseconds per call and that ratio.

Usage::

    .venv/bin/python benchmarks/bench_mcp.py            # 5 rounds of 2,000 calls
    .venv/bin/python benchmarks/bench_mcp.py --quick    # smoke run, meaningless numbers

It always exits 0: a ``MISS`` is a finding to report, not a failure.
"""

from __future__ import annotations

import argparse
import gc
import logging
import statistics
import time
from typing import Any

import attrs
import trio
from mcp import Client
from mcp.server import MCPServer

import trio_tools
from trio_tools.mcp import server

TARGET = 1.2


@attrs.frozen
class Args:
    x: int


def trio_tools_server() -> Any:
    registry = trio_tools.ToolRegistry()

    @registry.tool
    async def noop(args: Args, ctx: trio_tools.ToolRunContext) -> str:
        """Do nothing."""
        return "ok"

    return server(registry, name="bench")


def sdk_server() -> MCPServer:
    mcp_server = MCPServer("bench")

    @mcp_server.tool()
    async def noop(x: int) -> str:
        """Do nothing."""
        return "ok"

    return mcp_server


async def _time_calls(client: Client, calls: int) -> tuple[float, float]:
    """``(CPU seconds, wall seconds)`` of ``calls`` sequential calls."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for index in range(calls):
        await client.call_tool("noop", {"x": index})
    return time.process_time() - cpu, time.perf_counter() - wall


@attrs.frozen
class Measure:
    ratio: float
    wall_ratio: float
    ours_us: float
    theirs_us: float


async def measure(mode: str, rounds: int, calls: int, warmup: int) -> Measure:
    """Median ratios (CPU, wall) and wall microseconds per call of each server."""
    async with (
        Client(trio_tools_server(), mode=mode) as ours,
        Client(sdk_server(), mode=mode) as theirs,
    ):
        for client in (ours, theirs):
            reply = await client.call_tool("noop", {"x": 1})
            assert not reply.is_error, reply
            await _time_calls(client, warmup)
        our_times: list[tuple[float, float]] = []
        their_times: list[tuple[float, float]] = []
        for round_index in range(rounds):
            pair = [(ours, our_times), (theirs, their_times)]
            for client, times in pair if round_index % 2 == 0 else reversed(pair):
                times.append(await _time_calls(client, calls))
    per_call = 1e6 / calls
    return Measure(
        ratio=statistics.median(o[0] / t[0] for o, t in zip(our_times, their_times, strict=True)),
        wall_ratio=statistics.median(
            o[1] / t[1] for o, t in zip(our_times, their_times, strict=True)
        ),
        ours_us=statistics.median(o[1] for o in our_times) * per_call,
        theirs_us=statistics.median(t[1] for t in their_times) * per_call,
    )


async def main(args: argparse.Namespace) -> None:
    goals = [
        ("M1", "legacy", "2025 era, JSON-RPC over in-memory streams"),
        ("M2", "auto", "2026 era, in-process client"),
    ]
    for goal, mode, what in goals:
        found = await measure(mode, args.rounds, args.calls, args.warmup)
        verdict = "ok" if found.ratio <= TARGET else "MISS"
        print(f"{goal} {found.ratio:.2f}x (target <= {TARGET}x) {verdict}  {what}")
        print(
            f"   wall: trio_tools {found.ours_us:.1f} us/call, MCPServer"
            f" {found.theirs_us:.1f} us/call ({found.wall_ratio:.2f}x)"
        )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="1 round of 50 calls")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.calls, args.warmup = 1, 50, 10
    return args


if __name__ == "__main__":
    # MCPServer logs every call at INFO; the benchmark times the calls, not the logging.
    logging.disable(logging.INFO)
    trio.run(main, parse())
