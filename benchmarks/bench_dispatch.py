"""Dispatch overhead of trio_tools, as ratios against plain-Trio floors measured in the same run.

Every goal compares the library with the cheapest plain-Trio code that gives the same
structural guarantees (a nursery that awaits everything, a cancel scope around the body), so
the ratios survive a change of machine while absolute times do not.

======  ==================================================================  ===========
goal    what                                                                target
======  ==================================================================  ===========
P1      ``registry.execute`` of a no-op tool, no stages: raw ``{}`` and     <= 1.10x
        a typed argument class (both reported, each with its verdict)
P2      the same with one pre, around, post hook and one result observer    <= 1.50x
P3      the same with ``timeout_policy()`` and a tool timeout, vs P1        <= 1.25x P1
P4      ``run_tool_calls``: 1,000 parallel no-op calls, per call            <= 1.50x
P5      cancel -> all 10,000 in-flight calls returned their result, vs the  <= 1.00x
        per-call-nursery floor; vs the one-nursery floor                    <= 2.50x
        ambient cancellation (an enclosing scope) vs the signal             <= 1.20x
P6      memory per in-flight call over a bare sleeping Trio task            <= 2 KiB
P7      P4 (1,000 parallel calls) with the SQLite journal vs MemoryJournal  <= 2.0x
T1      P1 with one no-op instrument (``add_instrument``), vs P1            <= 1.05x
T2      P1 traced by ``trio_tools.otel`` (SDK, recording), added us/call    (reported)
A1      a signature tool vs the same tool with an attrs argument class      <= 1.05x
V1      provider conversion of a 100-call step vs running that batch        <= 0.05x
J2      one sequential call with the SQLite journal, added us/call          (reported)
J3      P7 with the Postgres journal (a local server) vs MemoryJournal      (reported)
======  ==================================================================  ===========

Floors:

* P1, P2: ``async with trio.open_nursery(): with trio.CancelScope(): await body()``.  The
  typed P1 variant's tool takes ``args: AddArgs`` (an attrs class of two ints) and gets
  ``{"a": 1, "b": 2}``; the floor's body receives the same two ints.
* P3: P1 (raw ``{}``) itself, measured in the same rounds.
* P4: 1,000 such floor calls spawned in one nursery.
* P5: two floors.  The per-call-nursery floor is what the design's shape costs in plain
  Trio: 10,000 tasks, each parked in its own nursery, whose scopes are all cancelled (as the
  signal's listeners do).  The one-nursery floor is ``nursery.cancel_scope.cancel()`` of a
  nursery of 10,000 tasks in ``trio.sleep_forever()``, until the nursery has exited.  The
  ambient variant cancels the enclosing nursery of 10,000 parked ``execute`` calls instead
  of their signal (each call publishes ``ABORTED`` and re-raises ``trio.Cancelled``).
* P6: 10,000 tasks parked in ``trio.sleep_forever()`` (tracemalloc peak).
* V1: ``run_tool_calls`` of the 100 calls themselves; the conversion is
  ``tool_calls(message)`` plus ``tool_results(calls, outcome)`` of each
  ``trio_tools.providers`` module (the worst of the three is the goal's ratio).
* T1, T2: P1 itself, measured in the same rounds.  T2 uses the OpenTelemetry SDK's
  ``TracerProvider`` with a ``SimpleSpanProcessor`` feeding an exporter that drops the spans
  (so every span is recorded, ended and handed to the processor); it is skipped when the
  SDK is not installed.
* A1: ``registry.execute`` of ``read(args: ReadArgs, ctx)`` (an attrs class), against the
  signature tool ``read(path: str, max_bytes: int = 65536, *, ctx)``; both get
  ``{"path": "notes.txt", "max_bytes": 4096}``.
* P7, J2: the same batch (P7: ``--batch`` parallel no-op calls; J2: one call) with a
  ``MemoryJournal``; the SQLite journal (``synchronous="normal"``) is one session of a
  fresh file in a temporary directory, open for the whole goal.  J2 also reports
  ``synchronous="full"`` (an ``fsync`` per commit) as a diagnostic.
* J3: P7's batch with the Postgres journal, one session of a fresh schema, against the
  server of ``--postgres CONNINFO`` or else a throw-away local server started like the test
  suite's (``tests/pg_server.py``: ``initdb`` in a temporary directory, 127.0.0.1, server
  defaults but ``fsync=off``, so the number is the round trips and the server's work, not
  the disk).  Also reports the writes per transaction (group commit).

Timings use :func:`time.perf_counter` under ``trio.run`` with the real (default) clock.  Each
timed goal runs ``--warmup`` unmeasured rounds, then ``--rounds`` rounds of ``--calls`` calls
per variant.  Within a round the variants alternate in chunks of ``--chunk`` calls (P4: one
batch), with ``gc.collect()`` before every chunk, so a change of machine load hits floor and
library alike; a goal's ratio is the median over rounds of library/floor measured in the same
round.  Diagnostic lines give microseconds per call and the same ratio in process CPU time
(:func:`time.process_time`), which is steadier on a shared machine.  P5 takes one cancellation
per round (floor and library alternate); P6 takes the median of at most 3 rounds.

Usage::

    .venv/bin/python benchmarks/bench_dispatch.py            # 5 rounds of 10,000 calls
    .venv/bin/python benchmarks/bench_dispatch.py --quick    # smoke run (~1 s), meaningless numbers
    .venv/bin/python benchmarks/bench_dispatch.py --only P1,P2 --rounds 9

It always exits 0: a ``MISS`` is a finding to report, not a failure.
"""

from __future__ import annotations

import argparse
import functools
import gc
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio
import trio.testing

import trio_tools
from trio_tools import (
    CancelSource,
    PostDecision,
    PreDecision,
    TextBlock,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
)

GOALS = ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "T1", "T2", "A1", "V1", "J2", "J3")
OK_RESULT = ToolResult(content=(TextBlock("ok"),))
ALLOW = trio_tools.Allow()
ACCEPT = trio_tools.Accept()

Loop = Callable[[int], Awaitable[None]]


# ------------------------------------------------------------------------------------------
# Configuration and reporting


class Config:
    def __init__(self, ns: argparse.Namespace) -> None:
        self.quick: bool = ns.quick
        self.rounds: int = ns.rounds
        self.calls: int = ns.calls
        self.warmup: int = ns.warmup
        self.batch: int = ns.batch
        self.inflight: int = ns.inflight
        self.chunk: int = ns.chunk
        self.only: set[str] = ns.only
        self.postgres: str | None = ns.postgres


def parse_args(argv: list[str] | None) -> Config:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per goal (5)")
    parser.add_argument("--calls", type=int, default=10_000, help="calls per round (10,000)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first (1)")
    parser.add_argument(
        "--chunk", type=int, default=1_000, help="calls per interleaving chunk (1,000)"
    )
    parser.add_argument("--batch", type=int, default=1_000, help="P4 batch size (1,000)")
    parser.add_argument(
        "--inflight", type=int, default=10_000, help="P5/P6 concurrent calls (10,000)"
    )
    parser.add_argument(
        "--only",
        default=",".join(GOALS),
        type=lambda text: {part.strip().upper() for part in text.split(",") if part.strip()},
        help="comma-separated goals to run, e.g. P1,P2",
    )
    parser.add_argument(
        "--postgres",
        metavar="CONNINFO",
        default=None,
        help="J3's server (default: start a throw-away local one, as the tests do)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke mode: 1 round of 200 calls (batch and in-flight 200); numbers meaningless",
    )
    ns = parser.parse_args(argv)
    if ns.quick:
        ns.rounds, ns.calls, ns.warmup, ns.batch, ns.inflight = 1, 200, 1, 200, 200
    for name in ("rounds", "calls", "chunk", "batch", "inflight"):
        if getattr(ns, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if ns.warmup < 0:
        parser.error("--warmup must be >= 0")
    unknown = ns.only - set(GOALS)
    if unknown:
        parser.error(f"unknown goals in --only: {', '.join(sorted(unknown))}")
    ns.batch = min(ns.batch, ns.calls)
    return Config(ns)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} us"


def goal_line(goal: str, what: str, ratio: float, limit: float | None) -> None:
    if limit is None:
        print(f"{goal} {what} ratio {ratio:.2f} goal=none (reported)")
    else:
        verdict = "ok" if ratio <= limit else "MISS"
        print(f"{goal} {what} ratio {ratio:.2f} goal<={limit:.2f} {verdict}")


def diag(text: str) -> None:
    print(f"    {text}")


# ------------------------------------------------------------------------------------------
# Tools, stages and floors


async def floor_body() -> str:
    return "ok"


async def floor_call() -> None:
    """The floor of one call: what Trio itself charges for 'a body in its own nursery and
    cancel scope'."""
    async with trio.open_nursery():
        with trio.CancelScope():
            await floor_body()


async def noop(args: object, ctx: ToolRunContext) -> str:
    """Does nothing."""
    return "ok"


async def pre_hook(
    exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
) -> PreDecision:
    return await call_next()


async def around_wrapper(
    exec: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
) -> ToolResult:
    return await call_next()


async def post_hook(
    exec: ToolExecution, result: ToolResult, call_next: Callable[[], Awaitable[PostDecision]]
) -> PostDecision:
    return await call_next()


def observer(exec: ToolExecution, result: ToolResult) -> None:
    pass


@attrs.frozen
class AddArgs:
    a: int
    b: int


ADD_ARGUMENTS = {"a": 1, "b": 2}


async def add(args: AddArgs, ctx: ToolRunContext) -> str:
    """Adds nothing: the cost measured is the typed arguments' parsing and the call."""
    return "ok"


async def typed_floor_body(a: int, b: int) -> str:
    return "ok"


async def typed_floor_loop(n: int) -> None:
    for _ in range(n):
        async with trio.open_nursery():
            with trio.CancelScope():
                await typed_floor_body(1, 2)


def typed_loop(registry: ToolRegistry, signal: trio_tools.CancelSignal) -> Loop:
    execute = registry.execute

    async def loop(n: int) -> None:
        for _ in range(n):
            await execute(
                ToolExecutionInput(
                    call_id="call", name="add", arguments=ADD_ARGUMENTS, signal=signal
                )
            )

    return loop


async def typed_args_floor_body(args: AddArgs) -> str:
    return "ok"


async def typed_args_floor_loop(n: int) -> None:
    """Diagnostic: the typed floor, but its body takes the argument object, built per call
    (what the class itself costs, before any parsing or validation)."""
    for _ in range(n):
        async with trio.open_nursery():
            with trio.CancelScope():
                await typed_args_floor_body(AddArgs(a=1, b=2))


async def plain_allow() -> PreDecision:
    return ALLOW


async def plain_accept() -> PostDecision:
    return ACCEPT


async def staged_shape_loop(n: int) -> None:
    """Diagnostic: P2's shape in plain Trio, with nothing of trio_tools' own: the gate's
    cancel scope around the pre-execute hook (whose ``call_next`` is the chain's end), the
    around wrapper whose ``call_next`` runs the body in a nursery (whose own scope is the
    body's, as ``execute`` binds it), the post-execute hook and the observer."""

    async def dispatch_body() -> ToolResult:
        async with trio.open_nursery():
            await floor_body()
        return OK_RESULT

    view: Any = None
    for _ in range(n):
        with trio.CancelScope():
            await pre_hook(view, plain_allow)
        result = await around_wrapper(view, dispatch_body)
        await post_hook(view, result, plain_accept)
        observer(view, result)


def plain_registry(*, timeout: float | None = None, safe: bool = False) -> ToolRegistry:
    registry = ToolRegistry()
    registry.tool(noop, timeout=timeout, concurrency_safe=safe)
    registry.tool(add, timeout=timeout, concurrency_safe=safe)
    return registry


def staged_registry() -> ToolRegistry:
    registry = plain_registry()
    registry.add_pre_execute(pre_hook)
    registry.add_around_execute(around_wrapper)
    registry.add_post_execute(post_hook)
    registry.add_observer(observer)
    return registry


class NoopInstrument:
    def call_started(self, exec: ToolExecution) -> None:
        pass

    def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
        pass


def instrumented_registry() -> ToolRegistry:
    registry = plain_registry()
    registry.add_instrument(NoopInstrument())
    return registry


def otel_registry() -> ToolRegistry | None:
    """P1's registry traced by trio_tools.otel into the SDK, or ``None`` without the SDK."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            SimpleSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        import trio_tools.otel
    except ImportError:
        return None

    class DropExporter(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(DropExporter()))
    registry = plain_registry()
    trio_tools.otel.instrument(registry, tracer_provider=provider)
    return registry


def timeout_registry() -> ToolRegistry:
    # An hour: the deadline is armed and disarmed on every call, but never fires.
    registry = plain_registry(timeout=3600.0)
    registry.add_around_execute(trio_tools.timeout_policy())
    return registry


async def floor_loop(n: int) -> None:
    for _ in range(n):
        async with trio.open_nursery():
            with trio.CancelScope():
                await floor_body()


async def bare_loop(n: int) -> None:
    for _ in range(n):
        await floor_body()


def execute_loop(registry: ToolRegistry, signal: trio_tools.CancelSignal) -> Loop:
    """Build the input inside the loop: that is what a caller pays per call."""
    execute = registry.execute

    async def loop(n: int) -> None:
        for _ in range(n):
            await execute(
                ToolExecutionInput(call_id="call", name="noop", arguments={}, signal=signal)
            )

    return loop


def prebuilt_loop(registry: ToolRegistry, signal: trio_tools.CancelSignal) -> Loop:
    """Diagnostic: one input object reused, so construction is out of the timed loop."""
    execute = registry.execute
    call = ToolExecutionInput(call_id="call", name="noop", arguments={}, signal=signal)

    async def loop(n: int) -> None:
        for _ in range(n):
            await execute(call)

    return loop


async def check_ok(registry: ToolRegistry, signal: trio_tools.CancelSignal) -> None:
    result = await registry.execute(
        ToolExecutionInput(call_id="check", name="noop", arguments={}, signal=signal)
    )
    if result != OK_RESULT:
        raise AssertionError(f"benchmark tool misbehaves: {result!r}")


class Samples:
    """Per-round seconds per call of each loop, wall clock and process CPU time."""

    def __init__(self, names: list[str]) -> None:
        self.wall: dict[str, list[float]] = {name: [] for name in names}
        self.cpu: dict[str, list[float]] = {name: [] for name in names}

    def median(self, name: str) -> float:
        return statistics.median(self.wall[name])

    def ratio(self, name: str, floor: str = "floor") -> float:
        """Median over rounds of the paired ratio: both were measured in the same round."""
        return statistics.median(
            a / b for a, b in zip(self.wall[name], self.wall[floor], strict=True)
        )

    def cpu_ratio(self, name: str, floor: str = "floor") -> float:
        return statistics.median(
            a / b for a, b in zip(self.cpu[name], self.cpu[floor], strict=True)
        )

    def spread(self, name: str) -> str:
        values = self.wall[name]
        return f"min {us(min(values))}, max {us(max(values))}"


async def run_rounds(cfg: Config, loops: dict[str, Loop], n: int, chunk: int) -> Samples:
    """Rounds of ``n`` calls of every loop, interleaved in chunks of ``chunk`` calls.

    On a shared machine the load changes within seconds: alternating the loops chunk by
    chunk (rotating who goes first) lets every loop see the same load, so the per-round
    ratios stay meaningful even when the absolute times do not.
    """
    names = list(loops)
    samples = Samples(names)
    chunks = max(1, n // chunk)
    for index in range(cfg.warmup + cfg.rounds):
        wall = dict.fromkeys(names, 0.0)
        cpu = dict.fromkeys(names, 0.0)
        for part in range(chunks):
            shift = part % len(names)
            for name in names[shift:] + names[:shift]:
                loop = loops[name]
                gc.collect()
                start_cpu = time.process_time()
                start = time.perf_counter()
                await loop(chunk)
                wall[name] += time.perf_counter() - start
                cpu[name] += time.process_time() - start_cpu
        if index >= cfg.warmup:
            for name in names:
                samples.wall[name].append(wall[name] / (chunks * chunk))
                samples.cpu[name].append(cpu[name] / (chunks * chunk))
    return samples


# ------------------------------------------------------------------------------------------
# P1-P3: one call at a time


async def bench_sequential(cfg: Config) -> None:
    source = CancelSource()
    signal = source.signal
    plain, staged, timed = plain_registry(), staged_registry(), timeout_registry()
    instrumented, traced = instrumented_registry(), otel_registry()
    for registry in (plain, staged, timed, instrumented, traced):
        if registry is not None:
            await check_ok(registry, signal)
    loops: dict[str, Loop] = {"floor": floor_loop, "bare": bare_loop}
    if cfg.only & {"P1", "P3", "T1", "T2"}:
        loops["P1"] = execute_loop(plain, signal)  # also the baseline of P3, T1 and T2
    if "P1" in cfg.only:
        loops["P1 prebuilt"] = prebuilt_loop(plain, signal)
        loops["typed floor"] = typed_floor_loop
        loops["typed floor, args object"] = typed_args_floor_loop
        loops["P1 typed"] = typed_loop(plain, signal)
    if "T1" in cfg.only:
        loops["T1"] = execute_loop(instrumented, signal)
    if "T2" in cfg.only and traced is not None:
        loops["T2"] = execute_loop(traced, signal)
    if "P2" in cfg.only:
        loops["P2"] = execute_loop(staged, signal)
        loops["P2 prebuilt"] = prebuilt_loop(staged, signal)
        loops["P2 shape"] = staged_shape_loop
    if "P3" in cfg.only:
        loops["P3"] = execute_loop(timed, signal)
    samples = await run_rounds(cfg, loops, cfg.calls, min(cfg.chunk, cfg.calls))
    floor = samples.median("floor")

    def report(name: str, label: str) -> None:
        diag(
            f"{label} {us(samples.median(name))}/call ({samples.spread(name)}); "
            f"ratio {samples.ratio(name):.2f}, CPU-time ratio {samples.cpu_ratio(name):.2f}"
        )

    if "P1" in cfg.only:
        goal_line(
            "P1",
            "execute no-op, raw {} arguments, no stages, vs nursery+scope floor",
            samples.ratio("P1"),
            1.10,
        )
        diag(
            f"floor {us(floor)}/call ({samples.spread('floor')}); "
            f"bare await {us(samples.median('bare'))}/call"
        )
        report("P1", "execute")
        report("P1 prebuilt", "execute, pre-built input")
        goal_line(
            "P1",
            "execute no-op, typed argument class (attrs, two ints), vs its floor",
            samples.ratio("P1 typed", "typed floor"),
            1.10,
        )
        diag(
            f"typed floor {us(samples.median('typed floor'))}/call; execute "
            f"{us(samples.median('P1 typed'))}/call; CPU-time ratio "
            f"{samples.cpu_ratio('P1 typed', 'typed floor'):.2f}"
        )
        diag(
            f"typed floor whose body takes AddArgs(a=1, b=2), built per call: "
            f"{us(samples.median('typed floor, args object'))}/call, ratio "
            f"{samples.ratio('typed floor, args object', 'typed floor'):.2f} "
            "(the argument object alone, nothing parsed or checked)"
        )
    if "P2" in cfg.only:
        goal_line(
            "P2", "execute no-op, pre+around+post+observer, vs floor", samples.ratio("P2"), 1.50
        )
        report("P2", "execute with 4 stages")
        report("P2 prebuilt", "execute with 4 stages, pre-built input")
        report("P2 shape", "P2's shape in plain Trio (gate scope, the 3 hooks, observer, nursery)")
    if "P3" in cfg.only:
        goal_line(
            "P3",
            "execute no-op with timeout_policy and a tool timeout, vs P1",
            samples.ratio("P3", "P1"),
            1.25,
        )
        report("P3", "execute with timeout_policy")
        diag(f"CPU-time ratio over P1 {samples.cpu_ratio('P3', 'P1'):.2f}")
    if "T1" in cfg.only:
        goal_line("T1", "execute with a no-op instrument, vs P1", samples.ratio("T1", "P1"), 1.05)
        diag(
            f"with instrument {us(samples.median('T1'))}/call, P1 {us(samples.median('P1'))}"
            f"/call; CPU-time ratio {samples.cpu_ratio('T1', 'P1'):.2f}"
        )
    if "T2" in cfg.only:
        if "T2" not in loops:
            print("T2 execute traced by trio_tools.otel ... SKIP (opentelemetry-sdk not installed)")
        else:
            added = statistics.median(
                a - b for a, b in zip(samples.wall["T2"], samples.wall["P1"], strict=True)
            )
            print(
                f"T2 execute traced by trio_tools.otel (SDK, recording) added {us(added)}/call "
                f"over P1, ratio {samples.ratio('T2', 'P1'):.2f} goal=none (reported)"
            )
            diag(
                f"traced {us(samples.median('T2'))}/call; CPU-time ratio "
                f"{samples.cpu_ratio('T2', 'P1'):.2f}"
            )


# ------------------------------------------------------------------------------------------
# A1: a signature tool against the same tool written with an attrs class


@attrs.frozen
class ReadArgs:
    path: str
    max_bytes: int = 65536


async def read_with_class(args: ReadArgs, ctx: ToolRunContext) -> str:
    """Reads nothing: the cost measured is the arguments' parsing and the call."""
    return "ok"


async def read_with_signature(path: str, max_bytes: int = 65536, *, ctx: ToolRunContext) -> str:
    """Reads nothing: the cost measured is the arguments' parsing and the call."""
    return "ok"


READ_ARGUMENTS = {"path": "notes.txt", "max_bytes": 4096}


def read_loop(registry: ToolRegistry, name: str, signal: trio_tools.CancelSignal) -> Loop:
    execute = registry.execute

    async def loop(n: int) -> None:
        for _ in range(n):
            await execute(
                ToolExecutionInput(
                    call_id="call", name=name, arguments=READ_ARGUMENTS, signal=signal
                )
            )

    return loop


async def bench_signature(cfg: Config) -> None:
    registry = ToolRegistry()
    registry.tool(read_with_class, name="class")
    registry.tool(read_with_signature, name="signature")
    signal = CancelSource().signal
    for name in ("class", "signature"):
        result = await registry.execute(
            ToolExecutionInput(call_id="check", name=name, arguments=READ_ARGUMENTS, signal=signal)
        )
        if result != OK_RESULT:
            raise AssertionError(f"benchmark tool {name!r} misbehaves: {result!r}")
    loops: dict[str, Loop] = {
        "class": read_loop(registry, "class", signal),
        "signature": read_loop(registry, "signature", signal),
    }
    samples = await run_rounds(cfg, loops, cfg.calls, min(cfg.chunk, cfg.calls))
    goal_line(
        "A1",
        "execute a signature tool vs the same tool with an attrs argument class",
        samples.ratio("signature", "class"),
        1.05,
    )
    diag(
        f"attrs class {us(samples.median('class'))}/call ({samples.spread('class')}); "
        f"signature {us(samples.median('signature'))}/call ({samples.spread('signature')}); "
        f"CPU-time ratio {samples.cpu_ratio('signature', 'class'):.2f}"
    )


# ------------------------------------------------------------------------------------------
# P4: a batch of parallel calls through the scheduler


def scheduler() -> Any | None:
    return getattr(trio_tools, "run_tool_calls", None)


async def bench_batch(cfg: Config) -> None:
    run_tool_calls: Any = scheduler()
    tool_call = getattr(trio_tools, "ToolCall", None)
    if run_tool_calls is None or tool_call is None:
        print("P4 run_tool_calls batch ... SKIP (scheduler not available)")
        return
    source = CancelSource()
    signal = source.signal
    registry = plain_registry(safe=True)
    size = cfg.batch
    batches = max(1, cfg.calls // size)
    call_ids = [f"call-{i}" for i in range(size)]

    async def floor_batches(n: int) -> None:
        for _ in range(n // size):
            async with trio.open_nursery() as nursery:
                for _ in range(size):
                    nursery.start_soon(floor_call)

    async def scheduler_batches(n: int) -> None:
        for _ in range(n // size):
            # Arguments as the model sends them: a JSON string.
            calls = [tool_call(call_id=cid, name="noop", arguments="{}") for cid in call_ids]
            await run_tool_calls(registry, calls, signal=signal, max_parallel=size)

    async def chained_batch() -> None:
        async with trio.open_nursery() as nursery:
            pending = iter(call_ids)

            async def one(call_id: str) -> None:
                following = next(pending, None)
                if following is not None:
                    nursery.start_soon(one, following)
                input = ToolExecutionInput(
                    call_id=call_id, name="noop", arguments={}, signal=signal
                )
                await registry.execute(input)

            nursery.start_soon(one, next(pending))

    async def execute_chained(n: int) -> None:
        # Diagnostic: what the scheduler's rule "the next call starts once the previous
        # one passed its gate" costs in itself.  Each call's task is spawned by the
        # previous one, so every call begins one schedule point after the last.
        for _ in range(n // size):
            await chained_batch()

    calls = [tool_call(call_id=cid, name="noop", arguments="{}") for cid in call_ids]
    outcome = await run_tool_calls(registry, calls, signal=signal, max_parallel=size)
    if list(outcome.results) != [OK_RESULT] * size:
        raise AssertionError(f"benchmark batch misbehaves: {outcome.results[:3]!r}...")
    samples = await run_rounds(
        cfg,
        {"floor": floor_batches, "P4": scheduler_batches, "chained": execute_chained},
        batches * size,
        size,
    )
    goal_line(
        "P4",
        f"run_tool_calls {size} parallel no-op calls, per call, vs {size} floor tasks",
        samples.ratio("P4"),
        1.50,
    )
    diag(f"floor task {us(samples.median('floor'))}/call ({samples.spread('floor')})")
    diag(
        f"run_tool_calls {us(samples.median('P4'))}/call ({samples.spread('P4')}), "
        f"{batches} batch(es)/round; CPU-time ratio {samples.cpu_ratio('P4'):.2f}"
    )
    diag(
        f"execute chained (each call spawned by the previous one, as the gate order "
        f"requires, no scheduler) {us(samples.median('chained'))}/call, ratio "
        f"{samples.ratio('chained'):.2f}; run_tool_calls vs it {samples.ratio('P4', 'chained'):.2f}"
    )


# ------------------------------------------------------------------------------------------
# P5: cancellation latency of many in-flight calls


class Parked:
    """Counts bodies that reached their sleep."""

    def __init__(self) -> None:
        self.count = 0


def sleeper_registry(parked: Parked) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(concurrency_safe=True)
    async def sleep(args: object, ctx: ToolRunContext) -> str:
        """Sleeps until cancelled."""
        parked.count += 1
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    return registry


async def wait_parked(parked: Parked, n: int) -> None:
    while parked.count < n:
        await trio.testing.wait_all_tasks_blocked()
    await trio.testing.wait_all_tasks_blocked()


async def floor_cancel(n: int) -> float:
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(trio.sleep_forever)
        await trio.testing.wait_all_tasks_blocked()
        start = time.perf_counter()
        nursery.cancel_scope.cancel()
    return time.perf_counter() - start


async def per_call_nursery_cancel(n: int) -> float:
    """Diagnostic floor: what the design costs in plain Trio (DESIGN section 4 runs every body
    in its own nursery bound to the signal): ``n`` tasks each parked in their own nursery,
    whose scopes are cancelled one by one, as the signal's listeners do."""
    scopes: list[trio.CancelScope] = []

    async def task() -> None:
        async with trio.open_nursery() as own:
            scopes.append(own.cancel_scope)
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(task)
        await trio.testing.wait_all_tasks_blocked()
        start = time.perf_counter()
        for scope in scopes:
            scope.cancel(reason="CANCELLED: benchmark")
    return time.perf_counter() - start


async def per_call_nursery_ambient(n: int) -> float:
    """Diagnostic floor of the ambient variant: the per-call-nursery shape in plain Trio,
    cancelled by the enclosing scope, done as cheaply as plain Trio can: each body catches
    its ``Cancelled`` inside its nursery (no exception group) and re-raises it once the
    nursery has exited, into the enclosing nursery."""

    async def task() -> None:
        held: trio.Cancelled | None = None
        async with trio.open_nursery():
            try:
                await trio.sleep_forever()
            except trio.Cancelled as exc:
                held = exc
        assert held is not None
        try:
            raise held
        finally:
            del held

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(task)
        await trio.testing.wait_all_tasks_blocked()
        start = time.perf_counter()
        nursery.cancel_scope.cancel()
    return time.perf_counter() - start


async def per_call_nursery_deep(n: int, *, ambient: bool) -> float:
    """Both P5 variants in plain Trio at a call's depth: between each task and its body, the
    two coroutine frames every ``execute`` call has (an entry that catches everything, to
    publish a result, and re-raises; a dispatch running the body in its own nursery, which
    catches the body's ``Cancelled`` inside it).  Signal-style, every nursery's scope is
    cancelled and each task returns; ambient, the enclosing scope is cancelled and each
    dispatch re-raises the held ``Cancelled`` once its nursery has exited.  On its way out
    a ``Cancelled`` costs, for every frame it crosses, a traceback entry and a frame object
    kept until the enclosing nursery frees the group of 10,000, and a subclass check in
    Python for every handler it enters; then Trio records each failed child."""
    scopes: list[trio.CancelScope] = []

    async def body() -> None:
        await trio.sleep_forever()

    async def dispatch() -> None:
        held: trio.Cancelled | None = None
        async with trio.open_nursery() as own:
            scopes.append(own.cancel_scope)
            try:
                await body()
            except trio.Cancelled as exc:
                if not own.cancel_scope.cancel_called:
                    held = exc
        if held is not None:
            try:
                raise held
            finally:
                del held

    async def entry() -> None:
        try:
            await dispatch()
        except BaseException:
            raise

    async def task() -> None:
        await entry()

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(task)
        await trio.testing.wait_all_tasks_blocked()
        start = time.perf_counter()
        if ambient:
            nursery.cancel_scope.cancel()
        else:
            for scope in scopes:
                scope.cancel(reason="CANCELLED: benchmark")
    return time.perf_counter() - start


async def execute_cancel(n: int, *, observed: bool = False) -> float:
    """P5's calls cancelled through their signal; ``observed``: each result is recorded by
    the same observer as in :func:`ambient_cancel` rather than by the caller (a diagnostic:
    the ambient variant needs it, as its calls raise)."""
    parked = Parked()
    registry = sleeper_registry(parked)
    source = CancelSource()
    signal = source.signal
    codes: list[str | None] = []

    def observe(exec: ToolExecution, result: ToolResult) -> None:
        codes.append(result.code)

    if observed:
        registry.add_observer(observe)

    async def call() -> None:
        result = await registry.execute(
            ToolExecutionInput(call_id="call", name="sleep", arguments={}, signal=signal)
        )
        if not observed:
            codes.append(result.code)

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(call)
        await wait_parked(parked, n)
        start = time.perf_counter()
        source.cancel("benchmark")
    elapsed = time.perf_counter() - start
    if codes != [trio_tools.TOOL_ABORTED] * n:
        raise AssertionError(f"cancelled calls misbehave: {set(codes)!r}")
    return elapsed


async def ambient_cancel(n: int) -> float:
    """P5's calls cancelled by their enclosing scope instead of their signal: every call
    publishes ``ABORTED`` and re-raises ``trio.Cancelled``, which the nursery absorbs."""
    parked = Parked()
    registry = sleeper_registry(parked)
    signal = CancelSource().signal
    codes: list[str | None] = []

    def observe(exec: ToolExecution, result: ToolResult) -> None:
        codes.append(result.code)

    registry.add_observer(observe)

    async def call() -> None:
        await registry.execute(
            ToolExecutionInput(call_id="call", name="sleep", arguments={}, signal=signal)
        )

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(call)
        await wait_parked(parked, n)
        start = time.perf_counter()
        nursery.cancel_scope.cancel()
    elapsed = time.perf_counter() - start
    if codes != [trio_tools.TOOL_ABORTED] * n:
        raise AssertionError(f"ambient-cancelled calls misbehave: {set(codes)!r}")
    return elapsed


async def batch_cancel(n: int) -> float:
    run_tool_calls: Any = scheduler()
    tool_call = getattr(trio_tools, "ToolCall")  # noqa: B009 - absent before the scheduler
    parked = Parked()
    registry = sleeper_registry(parked)
    source = CancelSource()
    calls = [tool_call(call_id=f"call-{i}", name="sleep", arguments="{}") for i in range(n)]
    outcomes: list[Any] = []

    async def batch() -> None:
        outcomes.append(await run_tool_calls(registry, calls, signal=source.signal, max_parallel=n))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(batch)
        await wait_parked(parked, n)
        start = time.perf_counter()
        source.cancel("benchmark")
    elapsed = time.perf_counter() - start
    codes = {result.code for result in outcomes[0].results}
    if codes != {trio_tools.TOOL_ABORTED}:
        raise AssertionError(f"cancelled batch misbehaves: {codes!r}")
    return elapsed


async def bench_cancel(cfg: Config) -> None:
    n = cfg.inflight
    variants: dict[str, Callable[[int], Awaitable[float]]] = {
        "floor": floor_cancel,
        "per-call nursery": per_call_nursery_cancel,
        "execute": execute_cancel,
        "ambient": ambient_cancel,
        "execute, observed": functools.partial(execute_cancel, observed=True),
        "per-call nursery, ambient": per_call_nursery_ambient,
        "at a call's depth, signal": functools.partial(per_call_nursery_deep, ambient=False),
        "at a call's depth, ambient": functools.partial(per_call_nursery_deep, ambient=True),
    }
    if scheduler() is not None:
        variants["batch"] = batch_cancel
    # Diagnostic only: the signal and ambient variants again with the cyclic collector off,
    # since when its full collections fall (and so how many a window holds) moves with the
    # number of objects every call allocates, not only with the work done.
    collector_off = ("execute", "ambient")
    samples: dict[str, list[float]] = {name: [] for name in variants}
    samples_off: dict[str, list[float]] = {name: [] for name in collector_off}
    for index in range(cfg.warmup + cfg.rounds):
        for name, fn in variants.items():
            gc.collect()
            elapsed = await fn(n)
            if index >= cfg.warmup:
                samples[name].append(elapsed)
        for name in collector_off:
            gc.collect()
            gc.disable()
            try:
                elapsed = await variants[name](n)
            finally:
                gc.enable()
            if index >= cfg.warmup:
                samples_off[name].append(elapsed)
    median = {name: statistics.median(values) for name, values in samples.items()}

    def ratio(name: str, floor: str = "floor") -> float:
        pairs = zip(samples[name], samples[floor], strict=True)
        return statistics.median(a / b for a, b in pairs)

    per_call = "per-call nursery"
    print(
        f"P5 floor: plain Trio, {n} tasks each parked in its own nursery, all scopes cancelled: "
        f"{median[per_call] * 1e3:.2f} ms ({us(median[per_call] / n)}/task)"
    )
    goal_line(
        "P5",
        f"source.cancel() -> {n} in-flight execute calls returned, vs the per-call-nursery floor",
        ratio("execute", per_call),
        1.00,
    )
    goal_line(
        "P5",
        f"source.cancel() -> {n} in-flight execute calls returned, vs one nursery of {n} tasks",
        ratio("execute"),
        2.50,
    )
    goal_line(
        "P5",
        "ambient cancellation (the enclosing scope) vs the signal, same calls",
        ratio("ambient", "execute"),
        1.20,
    )
    diag(
        f"one-nursery floor: {median['floor'] * 1e3:.2f} ms ({us(median['floor'] / n)}/task); "
        f"per-call-nursery floor over it: {ratio(per_call):.2f}"
    )
    diag(f"execute: {median['execute'] * 1e3:.2f} ms ({us(median['execute'] / n)}/call)")
    diag(f"ambient: {median['ambient'] * 1e3:.2f} ms ({us(median['ambient'] / n)}/call)")
    observed = "execute, observed"
    diag(
        f"signal variant whose results the ambient variant's observer records (its calls "
        f"return, so the goal's signal variant has none): {us(median[observed] / n)}/call; "
        f"ambient vs it {ratio('ambient', observed):.2f}"
    )
    off = {name: statistics.median(values) for name, values in samples_off.items()}
    pairs_off = zip(samples_off["ambient"], samples_off["execute"], strict=True)
    diag(
        f"collector off: execute {us(off['execute'] / n)}/call, ambient "
        f"{us(off['ambient'] / n)}/call, ambient vs signal "
        f"{statistics.median(a / b for a, b in pairs_off):.2f}"
    )
    shape = "per-call nursery, ambient"
    diag(
        f"plain-Trio ambient floor (each task its own nursery, the body's Cancelled caught in it "
        f"and re-raised after it, the enclosing scope cancelled): "
        f"{median[shape] * 1e3:.2f} ms ({us(median[shape] / n)}/task), "
        f"{ratio(shape, 'execute'):.2f}x execute's signal variant (the ambient goal's ratio "
        f"if the calls cost nothing beyond plain Trio)"
    )
    deep = "at a call's depth, signal", "at a call's depth, ambient"
    diag(
        f"plain Trio at a call's depth (each task's body under an entry and a dispatch frame, "
        f"in its own nursery): signal-style {us(median[deep[0]] / n)}/task, ambient "
        f"{us(median[deep[1]] / n)}/task, ambient vs signal {ratio(deep[1], deep[0]):.2f} "
        f"(what plain Trio code of the calls' shape gets for the ambient goal's ratio)"
    )
    if "batch" in median:
        diag(
            f"run_tool_calls batch (max_parallel={n}): {median['batch'] * 1e3:.2f} ms, ratio "
            f"{ratio('batch'):.2f}"
        )
    else:
        diag("run_tool_calls batch variant: SKIP (scheduler not available)")


# ------------------------------------------------------------------------------------------
# P6: memory of in-flight calls


def library_bytes(objects: list[object]) -> dict[str, int]:
    """``sys.getsizeof`` of the gc-tracked objects that belong to trio_tools, by kind: its
    coroutine frames by function, and instances of its classes by class."""
    sizes: dict[str, int] = {}
    for obj in objects:
        code = getattr(obj, "cr_code", None)
        if code is not None and "/trio_tools/" in code.co_filename:
            kind = f"{code.co_name}()"
        elif type(obj).__module__.partition(".")[0] == "trio_tools":
            kind = type(obj).__name__
        else:
            continue
        sizes[kind] = sizes.get(kind, 0) + sys.getsizeof(obj)
    return sizes


async def parked_peak(
    n: int, spawn: Callable[[trio.Nursery], None], parked: Parked
) -> tuple[int, int, dict[str, int]]:
    """Peak traced bytes over the baseline while ``n`` tasks are started and parked, the
    number of extra gc-tracked objects once they are parked, and the library's share of
    them (:func:`library_bytes`, read after the peak)."""
    gc.collect()
    objects = len(gc.get_objects())
    before = {id(obj) for obj in gc.get_objects()}
    baseline = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            spawn(nursery)
        await wait_parked(parked, n)
        peak = tracemalloc.get_traced_memory()[1]
        objects = len(gc.get_objects()) - objects
        mine = library_bytes([obj for obj in gc.get_objects() if id(obj) not in before])
        nursery.cancel_scope.cancel()
    return peak - baseline, objects, mine


async def bench_memory(cfg: Config) -> None:
    n = cfg.inflight
    floor_parked = Parked()

    async def floor_task() -> None:
        floor_parked.count += 1
        await trio.sleep_forever()

    parked = Parked()
    registry = sleeper_registry(parked)
    signal = CancelSource().signal

    async def call() -> None:
        await registry.execute(
            ToolExecutionInput(call_id="call", name="sleep", arguments={}, signal=signal)
        )

    async def shape_body(args: object, ctx: object) -> None:
        floor_parked.count += 1
        await trio.sleep_forever()

    async def shape_task() -> None:
        # The per-call shape in plain Trio: the body's coroutine in the task's own nursery.
        async with trio.open_nursery():
            await shape_body(None, None)

    def spawn_floor(nursery: trio.Nursery) -> None:
        nursery.start_soon(floor_task)

    def spawn_shape(nursery: trio.Nursery) -> None:
        nursery.start_soon(shape_task)

    def spawn_call(nursery: trio.Nursery) -> None:
        nursery.start_soon(call)

    rounds = max(1, min(cfg.rounds, 3))  # tracemalloc is slow and memory is near-deterministic
    floors: list[float] = []
    shapes: list[float] = []
    calls: list[float] = []
    floor_objects = call_objects = 0
    library: dict[str, int] = {}
    tracemalloc.start()
    try:
        for index in range(cfg.warmup + rounds):
            floor_parked.count = parked.count = 0
            floor_bytes, floor_objects, _ = await parked_peak(n, spawn_floor, floor_parked)
            floor_parked.count = 0
            shape_bytes, _, _ = await parked_peak(n, spawn_shape, floor_parked)
            call_bytes, call_objects, library = await parked_peak(n, spawn_call, parked)
            if index >= cfg.warmup:
                floors.append(floor_bytes / n)
                shapes.append(shape_bytes / n)
                calls.append(call_bytes / n)
    finally:
        tracemalloc.stop()
    floor = statistics.median(floors)
    per_call = statistics.median(calls)
    extra = (per_call - floor) / 1024
    verdict = "ok" if extra <= 2.0 else "MISS"
    print(
        f"P6 memory per in-flight execute call over a sleeping task extra {extra:.2f} KiB "
        f"goal<=2.00 KiB {verdict}"
    )
    diag(f"bare sleeping task {floor / 1024:.2f} KiB; execute call {per_call / 1024:.2f} KiB")
    diag(f"tracemalloc peak over baseline, {n} in flight, median of {rounds} round(s)")
    shape = (statistics.median(shapes) - floor) / 1024
    diag(
        f"plain-Trio per-call shape (the body's coroutine in the task's own nursery): "
        f"extra {shape:.2f} KiB over the bare task, leaving {2.0 - shape:.2f} KiB of the goal "
        f"to a call of that shape"
    )
    diag(
        f"gc-tracked objects per in-flight call: execute {call_objects / n:.1f}, "
        f"bare task {floor_objects / n:.1f} (the cyclic GC walks them all: see P5)"
    )
    parts = ", ".join(
        f"{kind} {size / n:.0f}" for kind, size in sorted(library.items(), key=lambda kv: -kv[1])
    )
    diag(
        f"trio_tools' own gc-tracked objects per parked call: {sum(library.values()) / n:.0f} "
        f"bytes ({parts}); the rest is Trio's: the body's cancel scope (its nursery is "
        f"opened only for work the body starts), the task and the tool's coroutine"
    )


# ------------------------------------------------------------------------------------------
# V1: converting a step's calls and outcome for a model API


def model_messages(size: int) -> dict[str, object]:
    """What each API's model turn with ``size`` calls looks like, as plain dicts."""
    ids = [f"call_{i}" for i in range(size)]
    return {
        "openai_chat": {
            "role": "assistant",
            "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": "noop", "arguments": "{}"}}
                for cid in ids
            ],
        },
        "openai_responses": [
            {"type": "function_call", "call_id": cid, "name": "noop", "arguments": "{}"}
            for cid in ids
        ],
        "anthropic": {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": cid, "name": "noop", "input": {}} for cid in ids
            ],
        },
    }


async def bench_providers(cfg: Config) -> None:
    from trio_tools.providers import anthropic, openai_chat, openai_responses

    modules: dict[str, Any] = {
        "openai_chat": openai_chat,
        "openai_responses": openai_responses,
        "anthropic": anthropic,
    }
    size = 100
    signal = CancelSource().signal
    registry = plain_registry(safe=True)
    messages = model_messages(size)
    calls = openai_chat.tool_calls(messages["openai_chat"])
    outcome = await trio_tools.run_tool_calls(registry, calls, signal=signal)
    for name, module in modules.items():
        converted = module.tool_results(module.tool_calls(messages[name]), outcome)
        if not converted:
            raise AssertionError(f"{name} conversion misbehaves")

    async def batches(n: int) -> None:
        for _ in range(max(1, n // size)):
            await trio_tools.run_tool_calls(registry, calls, signal=signal, max_parallel=size)

    def converter(name: str) -> Loop:
        module, message = modules[name], messages[name]

        async def loop(n: int) -> None:
            for _ in range(max(1, n // size)):
                module.tool_results(module.tool_calls(message), outcome)

        return loop

    loops: dict[str, Loop] = {"floor": batches}
    loops.update({name: converter(name) for name in modules})
    chunk = min(cfg.calls, 10 * size)
    samples = await run_rounds(cfg, loops, max(chunk, cfg.calls // 5), chunk)
    worst = max(modules, key=samples.ratio)
    goal_line(
        "V1",
        f"tool_calls + tool_results of a {size}-call step ({worst}, the worst), "
        f"vs run_tool_calls of it",
        samples.ratio(worst),
        0.05,
    )
    diag(f"run_tool_calls of {size} calls: {us(samples.median('floor') * size)}/batch")
    for name in modules:
        diag(
            f"{name}: {us(samples.median(name) * size)}/step, ratio {samples.ratio(name):.3f}, "
            f"CPU-time ratio {samples.cpu_ratio(name):.3f}"
        )


# ------------------------------------------------------------------------------------------
# P7, J2: the SQLite durable journal


async def bench_journal(cfg: Config) -> None:
    import os
    import tempfile

    source = CancelSource()
    signal = source.signal
    registry = plain_registry(safe=True)
    one = [trio_tools.ToolCall("call", "noop", "{}")]

    with tempfile.TemporaryDirectory() as directory:
        async with (
            trio_tools.open_sqlite_journal(
                os.path.join(directory, "normal.db"), session="bench"
            ) as normal,
            trio_tools.open_sqlite_journal(
                os.path.join(directory, "full.db"), session="bench", synchronous="full"
            ) as full,
        ):
            check = await trio_tools.run_tool_calls(registry, one, signal=signal, journal=normal)
            if check.results != (OK_RESULT,):
                raise AssertionError(f"benchmark journal misbehaves: {check.results!r}")
            if "P7" in cfg.only:
                await journal_batch_goal(cfg, "P7", "SQLite", normal, 2.0)
            if "J2" in cfg.only:
                samples, added = await sequential_samples(cfg, {"J2": normal, "J2 full": full})

                print(
                    f"J2 one sequential call, SQLite journal (normal) added {us(added('J2'))}/call "
                    f"over MemoryJournal goal=none (reported)"
                )
                diag(
                    f"MemoryJournal {us(samples.median('floor'))}/call; SQLite normal "
                    f"{us(samples.median('J2'))}/call; SQLite full {us(samples.median('J2 full'))}"
                    f"/call (added {us(added('J2 full'))})"
                )


def batch_loop(journal: Any, size: int, calls: list[trio_tools.ToolCall] | None = None) -> Loop:
    """Batches of ``size`` parallel no-op calls (or ``calls``) on ``journal``."""
    registry = plain_registry(safe=True)
    signal = CancelSource().signal
    call_ids = [f"call-{i}" for i in range(size)]

    async def loop(n: int) -> None:
        step = len(calls) if calls is not None else size
        for _ in range(max(1, n // step)):
            batch = calls or [trio_tools.ToolCall(cid, "noop", "{}") for cid in call_ids]
            await trio_tools.run_tool_calls(
                registry,
                batch,
                signal=signal,
                max_parallel=size,
                journal=journal() if callable(journal) else journal,
            )

    return loop


# ------------------------------------------------------------------------------------------
# J3: the Postgres durable journal


def bench_postgres(cfg: Config) -> None:
    if cfg.postgres is not None:
        trio.run(bench_postgres_at, cfg, cfg.postgres)
        return
    import os

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from pg_server import PostgresServer  # the test suite's throw-away server

    server = PostgresServer.start()
    try:
        trio.run(bench_postgres_at, cfg, server.create_schema())
    finally:
        server.stop()


async def bench_postgres_at(cfg: Config, conninfo: str) -> None:
    async with trio_tools.open_postgres_journal(conninfo, session="bench") as journal:
        one = [trio_tools.ToolCall("call", "noop", "{}")]
        check = await batch_loop(journal, 1, one)(1), await journal.history()
        if check[1][-1].results != (OK_RESULT,):
            raise AssertionError(f"benchmark journal misbehaves: {check[1]!r}")
        await journal_batch_goal(cfg, "J3", "Postgres", journal, None)
        samples, added = await sequential_samples(cfg, {"one": journal})
        diag(
            f"one sequential call: {us(samples.median('one'))}/call, added "
            f"{us(added('one'))} over MemoryJournal ({us(samples.median('floor'))})"
        )


async def sequential_samples(
    cfg: Config, journals: dict[str, Any]
) -> tuple[Samples, Callable[[str], float]]:
    """J2, J3: one call at a time on each journal and on a MemoryJournal ("floor").

    Returns the samples and ``added(name)``: the median over rounds of the time a call on
    that journal took beyond the floor's, in seconds.
    """
    one = [trio_tools.ToolCall("call", "noop", "{}")]
    n = max(1, min(cfg.calls, 2_000) // 2)
    loops = {name: batch_loop(journal, cfg.batch, one) for name, journal in journals.items()}
    samples = await run_rounds(
        cfg,
        {"floor": batch_loop(trio_tools.MemoryJournal, cfg.batch, one), **loops},
        n,
        min(cfg.chunk, n),
    )

    def added(name: str) -> float:
        return statistics.median(
            a - b for a, b in zip(samples.wall[name], samples.wall["floor"], strict=True)
        )

    return samples, added


async def journal_batch_goal(
    cfg: Config, goal: str, backend: str, journal: Any, limit: float | None
) -> None:
    """P7, J3: batches of ``--batch`` parallel no-op calls on ``journal`` vs MemoryJournal."""
    size = cfg.batch
    writer = journal._writer
    before = (writer.transactions, writer.jobs)
    samples = await run_rounds(
        cfg,
        {"floor": batch_loop(trio_tools.MemoryJournal, size), goal: batch_loop(journal, size)},
        max(1, cfg.calls // size) * size,
        size,
    )
    transactions = writer.transactions - before[0]
    jobs = writer.jobs - before[1]
    goal_line(
        goal,
        f"run_tool_calls {size} parallel no-op calls, {backend} journal vs MemoryJournal",
        samples.ratio(goal),
        limit,
    )
    diag(
        f"MemoryJournal {us(samples.median('floor'))}/call, {backend} journal "
        f"{us(samples.median(goal))}/call; CPU-time ratio {samples.cpu_ratio(goal):.2f}"
    )
    diag(
        f"group commit: {jobs} writes in {transactions} transactions "
        f"({jobs / max(1, transactions):.1f} per transaction)"
    )


# ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    print(
        f"trio_tools dispatch benchmark: Python {platform.python_version()}, "
        f"trio {trio.__version__}, {platform.machine()}"
    )
    print(
        f"rounds={cfg.rounds} (median) warmup={cfg.warmup} calls/round={cfg.calls} "
        f"batch={cfg.batch} inflight={cfg.inflight}"
        + ("  [--quick: smoke run, numbers are not meaningful]" if cfg.quick else "")
    )
    if cfg.only & {"P1", "P2", "P3", "T1", "T2"}:
        trio.run(bench_sequential, cfg)
    if "P4" in cfg.only:
        trio.run(bench_batch, cfg)
    if "P5" in cfg.only:
        trio.run(bench_cancel, cfg)
    if "P6" in cfg.only:
        trio.run(bench_memory, cfg)
    if "V1" in cfg.only:
        trio.run(bench_providers, cfg)
    if "A1" in cfg.only:
        trio.run(bench_signature, cfg)
    if cfg.only & {"P7", "J2"}:
        trio.run(bench_journal, cfg)
    if "J3" in cfg.only:
        bench_postgres(cfg)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
