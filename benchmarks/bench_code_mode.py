"""Code Mode's cost per nested call, as a ratio to a direct ``registry.execute``.

goal  what                                                                     target
----  -----------------------------------------------------------------------  ------
C1    one sequential no-op nested call of a ``run_code`` program (100 per run)  <= 10x

The floor is a direct ``await registry.execute(...)`` of the same no-op tool, measured in the
same run.  A nested call's cost is measured as the difference between a program making
``--calls`` sequential no-op calls and one making none, divided by ``--calls``: the child's
start and the run's settlement are not part of it.  Each round measures both programs and
the floor; the ratio is the median over ``--rounds`` rounds.

Usage::

    .venv/bin/python benchmarks/bench_code_mode.py            # 7 rounds of 100 calls
    .venv/bin/python benchmarks/bench_code_mode.py --quick    # smoke run, meaningless numbers

It always exits 0: a ``MISS`` is a finding to report, not a failure.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time

import trio

import trio_tools
from trio_tools.code_mode import run_code_tool


def build() -> trio_tools.ToolRegistry:
    registry = trio_tools.ToolRegistry()

    async def noop(args: object, ctx: trio_tools.ToolRunContext) -> str:
        return "ok"

    registry.register(trio_tools.define_tool(noop, concurrency_safe=True))
    registry.register(run_code_tool(registry))
    return registry


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def run_program(registry: trio_tools.ToolRegistry, calls: int) -> tuple[float, float]:
    """Wall time and CPU time (this process and the reaped child) of one run."""
    code = f"for _ in range({calls}):\n    await tools.noop()\n"
    source = trio_tools.CancelSource()
    started, cpu, child_cpu = time.perf_counter(), time.process_time(), _children_cpu()
    result = await registry.execute(
        trio_tools.ToolExecutionInput(
            call_id="bench", name="run_code", arguments={"code": code}, signal=source.signal
        )
    )
    elapsed = time.perf_counter() - started
    used = time.process_time() - cpu + _children_cpu() - child_cpu
    assert not result.is_error, result
    return elapsed, used


async def direct(registry: trio_tools.ToolRegistry, calls: int) -> tuple[float, float]:
    source = trio_tools.CancelSource()
    started, cpu = time.perf_counter(), time.process_time()
    for n in range(calls):
        await registry.execute(
            trio_tools.ToolExecutionInput(
                call_id=f"direct:{n}", name="noop", arguments={}, signal=source.signal
            )
        )
    return (time.perf_counter() - started) / calls, (time.process_time() - cpu) / calls


async def main(rounds: int, calls: int) -> None:
    registry = build()
    await run_program(registry, calls)  # warm-up: imports, page cache
    per_call: list[float] = []
    floors: list[float] = []
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    for _ in range(rounds):
        empty, empty_cpu = await run_program(registry, 0)
        full, full_cpu = await run_program(registry, calls)
        floor, floor_cpu = await direct(registry, max(calls, 1000))
        nested = max(full - empty, 0.0) / calls
        per_call.append(nested)
        floors.append(floor)
        ratios.append(nested / floor)
        cpu_ratios.append(max(full_cpu - empty_cpu, 0.0) / calls / floor_cpu)
    ratio = statistics.median(ratios)
    verdict = "ok" if ratio <= 10 else "MISS"
    print(f"python {sys.version.split()[0]}, trio {trio.__version__}, {rounds} rounds")
    print(
        f"C1 nested call: {statistics.median(per_call) * 1e6:.1f} us per call, "
        f"{ratio:.1f}x a direct execute ({statistics.median(floors) * 1e6:.1f} us)"
        f"  target <= 10x  {verdict}"
    )
    print(
        f"    CPU time (parent + child) per nested call: "
        f"{statistics.median(cpu_ratios):.1f}x a direct execute's"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="1 round of 10 calls")
    options = parser.parse_args()
    if options.quick:
        options.rounds, options.calls = 1, 10
    trio.run(main, options.rounds, options.calls)
