"""Batches of tool calls (DESIGN §8), every step checked against a pure model.

Each rule runs one model step's batch with ``run_tool_calls`` inside one ``trio.run`` on a
``MockClock(autojump_threshold=0)``, and draws what happens next with ``st.data()``: every
tool body blocks on its own gate, so whenever everything is blocked
(``wait_all_tasks_blocked``) the machine picks an action — release one running body (which
then succeeds, raises, halts the turn or concludes it), cancel the turn's signal, or cancel
an enclosing Trio scope (ambient) — and the scheduler cascades deterministically to the next
quiescent point.  ``_BatchModel`` (the §8 rules, written independently of the scheduler)
predicts at every quiescent point which bodies run, which calls published a result, and the
journal's call and result events; at the end, every result, the outcome and the balance.

Calls mix parallel tools (``concurrency_safe=True``), exclusive ones and unknown tools
(exclusive), pre-execute allow/deny/deny-with-halt, post-execute accept/accept-with-halt/
block, and cooperative or uncooperative (shielded) bodies, with ``max_parallel`` from 1 to 4.
The machine's state is the turn signal, shared by consecutive batches (once cancelled, later
batches are wholly synthetic until a rule starts a new turn), and one long-lived registry.

Invariants checked as the batch runs: ``max_parallel`` never exceeded, an exclusive body runs
alone, no body is entered after the turn signal fired; at the end: the journal is balanced and
in model order (``MemoryJournal.assert_balanced``) and holds the very result objects
returned, every started body was drained before ``run_tool_calls`` returned, every call not
started has a synthetic ``ABORTED_BEFORE_DISPATCH``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

import attrs
import pytest
import trio
import trio.testing
from hypothesis import currently_in_test_context, event, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from trio_tools import (
    Accept,
    AdditionalContext,
    BatchOutcome,
    Block,
    CancelSource,
    Deny,
    Halt,
    MemoryJournal,
    PostDecision,
    PreDecision,
    ToolCall,
    ToolExecution,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
    define_tool,
    run_tool_calls,
)

ToolKind = Literal["parallel", "exclusive", "unknown"]
PreKind = Literal["allow", "deny", "deny_halt"]
PostKind = Literal["accept", "accept_halt", "block"]
Outcome = Literal["success", "raise", "halt", "conclude"]

_TOOL_NAMES: dict[ToolKind, str] = {
    "parallel": "parallel_tool",
    "exclusive": "exclusive_tool",
    "unknown": "no_such_tool",
}


@attrs.frozen(kw_only=True)
class CallSpec:
    """What one call of a batch does."""

    tool: ToolKind = "parallel"
    pre: PreKind = "allow"
    post: PostKind = "accept"
    cooperative: bool = True
    outcome: Outcome = "success"
    post_waits: bool = False


call_specs = st.builds(
    CallSpec,
    tool=st.sampled_from(("parallel", "parallel", "exclusive", "unknown")),
    pre=st.sampled_from(("allow", "allow", "allow", "deny", "deny_halt")),
    post=st.sampled_from(("accept", "accept", "accept", "accept_halt", "block")),
    cooperative=st.sampled_from((True, True, False)),
    outcome=st.sampled_from(("success", "success", "raise", "halt", "conclude")),
    post_waits=st.sampled_from((False, False, True)),
)


class ScriptedFailure(Exception):
    pass


def _halt_reason(kind: str, call_id: str) -> str:
    return f"{kind} halt of {call_id}"


def _context(call_id: str) -> AdditionalContext:
    return AdditionalContext(f"context of {call_id}", source="body")


# --------------------------------------------------------------------------------------
# The model


@attrs.frozen(kw_only=True)
class _Expected:
    """The parts of a result the model predicts."""

    code: str | None
    halt: str | None = None
    concludes: bool = False
    synthetic: bool = False
    contexts: tuple[str, ...] = ()

    @classmethod
    def of(cls, result: ToolResult) -> _Expected:
        return cls(
            code=result.code,
            halt=result.halt.reason if result.halt is not None else None,
            concludes=result.concludes_turn,
            synthetic=result.synthetic,
            contexts=tuple(c.text for c in result.additional_contexts),
        )


_SYNTHETIC = _Expected(code="ABORTED_BEFORE_DISPATCH", synthetic=True)


class _BatchModel:
    """DESIGN §8 at the granularity of quiescent points (every body blocked on its gate).

    Calls start in model order, each once the previous one passed its gate or settled; an
    exclusive call starts once every earlier call is committed and nothing starts until it
    is committed; parallel calls share ``max_parallel`` slots, freed when a call settles;
    results commit in model order; once the turn signal fired or a settled result carries a
    halt, nothing starts, started calls drain, and each unstarted call is closed with a
    synthetic ``ABORTED_BEFORE_DISPATCH`` once the commits reach it.
    """

    def __init__(
        self, specs: list[CallSpec], ids: list[str], max_parallel: int, cancelled: bool
    ) -> None:
        self.specs = specs
        self.ids = ids
        self.max_parallel = max_parallel
        self.cancelled = cancelled
        self.halted = False
        self.results: list[_Expected | None] = [None] * len(specs)
        self.recorded: list[int] = []  # journal "call" events
        self.committed: list[int] = []  # journal "result" events
        self.published: set[int] = set()
        self.running: set[int] = set()  # bodies blocked on their gate
        self.post_waiting: dict[int, _Expected] = {}  # post-execute blocked on its gate
        self.dispatched: set[int] = set()
        self.next = 0
        self.in_flight = 0
        self.exclusive_index = -1
        self.cascade()

    def parallel(self, index: int) -> bool:
        return self.specs[index].tool == "parallel"

    # -- registry-level outcome of one call ----------------------------------------------

    def _post(self, index: int, result: _Expected) -> _Expected:
        spec, call_id = self.specs[index], self.ids[index]
        if spec.post == "block":
            return _Expected(code="BLOCKED", halt=result.halt)
        if spec.post == "accept_halt" and result.halt is None:
            return attrs.evolve(result, halt=_halt_reason("post", call_id))
        return result

    def _until_post(self, index: int, result: _Expected) -> None:
        """The call's dispatch (if any) settled with ``result``; post-execute comes next."""
        if index in self.running:
            self.running.discard(index)
            if self.parallel(index):
                self.in_flight -= 1  # a slot frees when dispatch settles
        if self.specs[index].post_waits:
            self.post_waiting[index] = result
        else:
            self._settle(index, result)

    def _settle(self, index: int, result: _Expected) -> None:
        result = self._post(index, result)
        if self.cancelled and result.code is None:
            # Cancellation replaces only a non-error result, keeping contexts and halt.
            result = _Expected(code="ABORTED", halt=result.halt, contexts=result.contexts)
        self.results[index] = result
        self.published.add(index)
        self.post_waiting.pop(index, None)
        if self.parallel(index) and index not in self.dispatched:
            self.in_flight -= 1  # a call that never dispatched frees its slot when it settles
        if result.halt is not None:
            self.halted = True

    def _start(self, index: int) -> None:
        spec, call_id = self.specs[index], self.ids[index]
        self.recorded.append(index)
        self.next = index + 1
        if self.parallel(index):
            self.in_flight += 1
        else:
            self.exclusive_index = index
        if spec.tool == "unknown":
            self._until_post(index, _Expected(code="UNKNOWN_TOOL"))
        elif spec.pre != "allow":
            halt = _halt_reason("deny", call_id) if spec.pre == "deny_halt" else None
            self._until_post(index, _Expected(code="DENIED", halt=halt))
        else:
            self.running.add(index)
            self.dispatched.add(index)

    def _gate_passed(self, index: int) -> bool:
        """Allowed calls pass their gate at start; denied and unknown ones when settled."""
        return index in self.dispatched or index in self.published

    def _can_start(self, index: int) -> bool:
        if index > 0 and not self._gate_passed(index - 1):
            return False
        if self.exclusive_index >= len(self.committed):
            return False
        if self.in_flight >= self.max_parallel:
            return False
        return self.parallel(index) or len(self.committed) == index

    def cascade(self) -> None:
        count = len(self.specs)
        while True:
            done = len(self.committed)
            if done < count and self.results[done] is not None:
                self.committed.append(done)
            elif self.cancelled or self.halted:
                if done == self.next < count:
                    self.recorded.append(done)
                    self.results[done] = _SYNTHETIC
                    self.next = done + 1
                else:
                    return
            elif self.next < count and self._can_start(self.next):
                self._start(self.next)
            else:
                return

    # -- actions -------------------------------------------------------------------------

    def release(self, index: int) -> None:
        spec, call_id = self.specs[index], self.ids[index]
        contexts = (_context(call_id).text,)
        halt = _halt_reason("body", call_id) if spec.outcome == "halt" else None
        if spec.outcome == "raise":
            result = _Expected(code="TOOL_FAILED", contexts=contexts)
        elif self.cancelled:
            # Returned after the fused signal fired: cancellation replaces the success.
            result = _Expected(code="ABORTED", halt=halt, contexts=contexts)
        else:
            concludes = spec.outcome == "conclude"
            result = _Expected(code=None, halt=halt, concludes=concludes, contexts=contexts)
        self._until_post(index, result)
        self.cascade()

    def release_post(self, index: int) -> None:
        self._settle(index, self.post_waiting[index])
        self.cascade()

    def cancel(self) -> None:
        self.cancelled = True
        for index in sorted(self.running):
            if self.specs[index].cooperative:
                contexts = (_context(self.ids[index]).text,)
                self._until_post(index, _Expected(code="ABORTED", contexts=contexts))
        self.cascade()


# --------------------------------------------------------------------------------------
# The real side: one long-lived registry whose stages look up each call's spec.


class _Batch:
    """What the stages of one batch see and record."""

    def __init__(self, specs: dict[str, CallSpec], max_parallel: int, signal_owner: CancelSource):
        self.specs = specs
        self.max_parallel = max_parallel
        self.source = signal_owner
        self.gates = {call_id: trio.Event() for call_id in specs}
        self.post_gates = {call_id: trio.Event() for call_id in specs}
        self.post_waiting: set[str] = set()
        self.running: dict[str, ToolKind] = {}
        self.entered: list[str] = []
        self.published: dict[str, list[ToolResult]] = {}
        self.violations: list[str] = []
        self.ambient = False

    def enter_body(self, call_id: str) -> None:
        kind = self.specs[call_id].tool
        if self.source.signal.cancelled:
            self.violations.append(f"body of {call_id} entered after the turn was cancelled")
        if self.ambient:
            self.violations.append(f"body of {call_id} entered after ambient cancellation")
        if kind == "exclusive" and self.running:
            self.violations.append(f"exclusive {call_id} runs beside {sorted(self.running)}")
        if "exclusive" in self.running.values():
            self.violations.append(f"{call_id} runs beside an exclusive call")
        self.running[call_id] = kind
        self.entered.append(call_id)
        if len(self.running) > self.max_parallel:
            self.violations.append(
                f"{len(self.running)} bodies run, max_parallel={self.max_parallel}"
            )


class _Stages:
    """The registry's stages, dispatching on the current batch."""

    def __init__(self) -> None:
        self.batch: _Batch | None = None

    def current(self) -> _Batch:
        assert self.batch is not None
        return self.batch

    async def body(self, args: object, ctx: ToolRunContext) -> str:
        batch = self.current()
        call_id = ctx.call_id
        spec = batch.specs[call_id]
        batch.enter_body(call_id)
        try:
            ctx.defer_context(_context(call_id))
            if spec.cooperative:
                await batch.gates[call_id].wait()
            else:
                # Uncooperative: ignores every cancellation until released.
                with trio.CancelScope(shield=True):
                    await batch.gates[call_id].wait()
            if spec.outcome == "raise":
                raise ScriptedFailure(f"{call_id} failed")
            if spec.outcome == "halt":
                ctx.halt_turn(_halt_reason("body", call_id))
            if spec.outcome == "conclude":
                ctx.conclude_turn()
            return "ok"
        finally:
            del batch.running[call_id]

    async def pre(
        self, exec: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        spec = self.current().specs[exec.call_id]
        if spec.pre == "deny":
            return Deny("denied")
        if spec.pre == "deny_halt":
            return Deny("denied", halt=Halt(_halt_reason("deny", exec.call_id)))
        return await call_next()

    async def post(
        self,
        exec: ToolExecution,
        result: ToolResult,
        call_next: Callable[[], Awaitable[PostDecision]],
    ) -> PostDecision:
        batch = self.current()
        spec = batch.specs[exec.call_id]
        if spec.post_waits:
            batch.post_waiting.add(exec.call_id)
            try:
                await batch.post_gates[exec.call_id].wait()
            finally:
                batch.post_waiting.discard(exec.call_id)
        if spec.post == "block":
            return Block("blocked")
        if spec.post == "accept_halt":
            return Accept(halt=Halt(_halt_reason("post", exec.call_id)))
        return await call_next()

    def observe(self, exec: ToolExecution, result: ToolResult) -> None:
        self.current().published.setdefault(exec.call_id, []).append(result)


@attrs.frozen(kw_only=True)
class _Observed:
    running: frozenset[str]
    post_waiting: frozenset[str]
    published: frozenset[str]
    # The journal's events; None for a batch run without a journal.
    recorded: tuple[str, ...] | None
    committed: tuple[str, ...] | None


def _observe(batch: _Batch, journal: MemoryJournal | None) -> _Observed:
    return _Observed(
        running=frozenset(batch.running),
        post_waiting=frozenset(batch.post_waiting),
        published=frozenset(batch.published),
        recorded=None
        if journal is None
        else tuple(e.call.call_id for e in journal.events if e.kind == "call"),
        committed=None
        if journal is None
        else tuple(e.call.call_id for e in journal.events if e.kind == "result"),
    )


def _predicted(model: _BatchModel, journaled: bool) -> _Observed:
    ids = model.ids
    return _Observed(
        running=frozenset(ids[i] for i in model.running),
        post_waiting=frozenset(ids[i] for i in model.post_waiting),
        published=frozenset(ids[i] for i in model.published),
        recorded=tuple(ids[i] for i in model.recorded) if journaled else None,
        committed=tuple(ids[i] for i in model.committed) if journaled else None,
    )


Chooser = Callable[[list[str]], str]
"""Picks the next action among the available ones (``st.data()`` or a fixed script)."""


class _Setup:
    """One long-lived registry whose stages look up the current batch's specs."""

    def __init__(self) -> None:
        self.stages = _Stages()
        self.registry = ToolRegistry()
        self.registry.register(
            define_tool(self.stages.body, name=_TOOL_NAMES["parallel"], concurrency_safe=True)
        )
        self.registry.register(define_tool(self.stages.body, name=_TOOL_NAMES["exclusive"]))
        self.registry.add_pre_execute(self.stages.pre)
        self.registry.add_post_execute(self.stages.post)
        self.registry.add_observer(self.stages.observe)
        self.batches = 0

    def run_batch(
        self,
        specs: list[CallSpec],
        max_parallel: int,
        turn: CancelSource,
        choose: Chooser,
        journaled: bool = True,
    ) -> list[str]:
        """Run one batch to the end, checking it against the model; return the actions.

        Without a journal (``journaled=False``) the scheduler takes its other path (the
        calls' reports start and commit calls themselves), checked the same way but for
        the journal's events."""
        self.batches += 1
        ids = [f"b{self.batches}-c{i}" for i in range(len(specs))]
        calls = [ToolCall(i, _TOOL_NAMES[s.tool], "{}") for i, s in zip(ids, specs, strict=True)]
        batch = _Batch(dict(zip(ids, specs, strict=True)), max_parallel, turn)
        self.stages.batch = batch
        model = _BatchModel(specs, ids, max_parallel, cancelled=turn.signal.cancelled)
        journal = MemoryJournal() if journaled else None
        outer = trio.CancelScope()
        outcome: list[BatchOutcome | BaseException] = []
        actions: list[str] = []

        async def batch_task() -> None:
            with outer:
                try:
                    outcome.append(
                        await run_tool_calls(
                            self.registry,
                            calls,
                            signal=turn.signal,
                            max_parallel=max_parallel,
                            journal=journal,
                        )
                    )
                except BaseException as exc:  # recorded and checked below
                    outcome.append(exc)
            # Drained: no body of this batch may still be running.
            if batch.running:
                batch.violations.append(f"returned while {sorted(batch.running)} ran")

        async def drive() -> None:
            while True:
                await trio.testing.wait_all_tasks_blocked()
                if not batch.ambient:
                    assert _predicted(model, journaled) == _observe(batch, journal), (
                        actions,
                        _predicted(model, journaled),
                        _observe(batch, journal),
                    )
                if outcome:
                    return
                # Releases are listed thrice: cancellations end batches early.
                choices = [
                    f"{what} {call_id}"
                    for what, waiting in (("release", batch.running), ("post", batch.post_waiting))
                    for call_id in sorted(waiting)
                    for _ in range(3)
                ]
                if not turn.signal.cancelled:
                    choices.append("cancel")
                if not batch.ambient:
                    choices.append("ambient")
                assert choices, f"deadlock: nothing runs and the batch is pending {actions}"
                action = choose(choices)
                actions.append(action)
                what, _, call_id = action.partition(" ")
                if what == "cancel":
                    turn.cancel("turn cancelled")
                    model.cancel()
                elif what == "ambient":
                    batch.ambient = True
                    outer.cancel()
                elif what == "post":
                    batch.post_gates[call_id].set()
                    model.release_post(ids.index(call_id))
                else:
                    batch.gates[call_id].set()
                    model.release(ids.index(call_id))

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(batch_task)
                try:
                    await drive()
                finally:
                    # Also when a check failed: let every stage finish so the batch drains.
                    for gate in (*batch.gates.values(), *batch.post_gates.values()):
                        gate.set()

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        self.stages.batch = None
        if currently_in_test_context():
            note(f"actions: {actions}")
        assert [] == batch.violations
        [result] = outcome
        if batch.ambient:
            _check_ambient(batch, journal, result, ids)
        else:
            assert isinstance(result, BatchOutcome), result
            _check_outcome(model, batch, journal, result, turn)
        return actions


def _check_outcome(
    model: _BatchModel,
    batch: _Batch,
    journal: MemoryJournal | None,
    outcome: BatchOutcome,
    turn: CancelSource,
) -> None:
    results = outcome.results
    assert model.results == [_Expected.of(r) for r in results]
    if journal is not None:
        journal.assert_balanced()
        journaled = [e.result for e in journal.events if e.kind == "result"]
        assert len(journaled) == len(results)
        assert all(a is b for a, b in zip(journaled, results, strict=True))
    for call_id, r in zip(model.ids, results, strict=True):
        # Synthetic results never pass through the registry; the others are published.
        if r.synthetic:
            assert call_id not in batch.published
        else:
            assert [r] == batch.published[call_id]
    halts = [r.halt for r in results if r.halt is not None]
    assert outcome.aborted == turn.signal.cancelled
    assert outcome.halt == (halts[0] if halts else None)
    assert outcome.concludes_turn == any(r.concludes_turn for r in results)
    assert tuple(c for r in results for c in r.additional_contexts) == outcome.contexts
    if currently_in_test_context():
        for expected in model.results:
            assert expected is not None
            event(f"code={expected.code} synthetic={expected.synthetic}")


def _check_ambient(
    batch: _Batch,
    journal: MemoryJournal | None,
    raised: BatchOutcome | BaseException,
    ids: list[str],
) -> None:
    """Ambient cancellation propagates as a bare Cancelled after draining; every started
    call published exactly one result; the journal holds calls in model order and results
    for a prefix of them, in order.  (DESIGN §8 leaves closing that transcript to the
    caller; a scheduler that closes it itself before re-raising passes too.)"""
    if currently_in_test_context():
        event("ambient cancellation")
    assert isinstance(raised, trio.Cancelled), raised
    assert all(1 == len(results) for results in batch.published.values())
    if journal is None:
        assert set(batch.entered) <= set(batch.published)
        return
    recorded = [e.call.call_id for e in journal.events if e.kind == "call"]
    committed = [e.call.call_id for e in journal.events if e.kind == "result"]
    assert ids[: len(recorded)] == recorded
    assert recorded[: len(committed)] == committed
    assert set(batch.entered) <= set(recorded)


class SchedulerStates(RuleBasedStateMachine):
    """Batches on one registry; consecutive batches share the turn's signal."""

    def __init__(self) -> None:
        super().__init__()
        self.setup = _Setup()
        self.turn = CancelSource()

    @rule(
        specs=st.lists(call_specs, min_size=1, max_size=6),
        max_parallel=st.integers(1, 4),
        journaled=st.booleans(),
        data=st.data(),
    )
    def run_a_batch(
        self, specs: list[CallSpec], max_parallel: int, journaled: bool, data: st.DataObject
    ) -> None:
        """One model step's batch, with releases and cancellations drawn as it runs, with
        a journal or without one."""

        def choose(choices: list[str]) -> str:
            return data.draw(st.sampled_from(choices), label="action")

        self.setup.run_batch(specs, max_parallel, self.turn, choose, journaled)

    @rule()
    def start_a_new_turn(self) -> None:
        """The next batches belong to a new turn, with a fresh signal."""
        self.turn = CancelSource()

    @invariant()
    def no_listener_left_on_the_turn_signal(self) -> None:
        assert 0 == self.turn.signal.statistics().listeners


TestSchedulerStates = SchedulerStates.TestCase


# --------------------------------------------------------------------------------------
# The model on its own, against hand-computed expectations.


def test_the_model_starts_parallel_calls_up_to_the_cap() -> None:
    model = _BatchModel([CallSpec()] * 3, ["a", "b", "c"], max_parallel=2, cancelled=False)
    assert ({0, 1}, [0, 1]) == (model.running, model.recorded)
    model.release(0)
    assert ({1, 2}, [0]) == (model.running, model.committed)


def test_the_model_runs_an_exclusive_call_alone() -> None:
    specs = [CallSpec(), CallSpec(tool="exclusive"), CallSpec()]
    model = _BatchModel(specs, ["a", "b", "c"], max_parallel=4, cancelled=False)
    assert {0} == model.running
    model.release(0)
    assert {1} == model.running
    model.release(1)
    assert {2} == model.running


def test_the_model_closes_unstarted_calls_after_a_halt() -> None:
    specs = [CallSpec(outcome="halt"), CallSpec(tool="exclusive"), CallSpec()]
    model = _BatchModel(specs, ["a", "b", "c"], max_parallel=4, cancelled=False)
    model.release(0)
    assert [
        _Expected(code=None, halt=_halt_reason("body", "a"), contexts=("context of a",)),
        _SYNTHETIC,
        _SYNTHETIC,
    ] == model.results


def test_the_model_makes_a_pre_cancelled_batch_wholly_synthetic() -> None:
    model = _BatchModel([CallSpec()] * 2, ["a", "b"], max_parallel=1, cancelled=True)
    assert [_SYNTHETIC, _SYNTHETIC] == model.results


@pytest.mark.parametrize("cooperative", [True, False])
def test_the_model_drains_started_calls_on_cancellation(cooperative: bool) -> None:
    specs = [CallSpec(cooperative=cooperative), CallSpec(tool="exclusive")]
    model = _BatchModel(specs, ["a", "b"], max_parallel=2, cancelled=False)
    model.cancel()
    if not cooperative:
        assert {0} == model.running
        model.release(0)
    assert ["ABORTED", "ABORTED_BEFORE_DISPATCH"] == [r.code for r in model.results if r]


# --------------------------------------------------------------------------------------
# Named scripts: the same runner and checks, with the actions fixed.


def _script(*steps: str) -> Chooser:
    """Actions by call index (``"release 0"``, ``"post 1"``) or name (``"cancel"``)."""
    pending = list(steps)

    def choose(choices: list[str]) -> str:
        assert pending, f"the script ran out; could do {sorted(set(choices))}"
        what, _, index = pending.pop(0).partition(" ")
        wanted = [
            c for c in choices if c == what or (c.startswith(what) and c.endswith(f"-c{index}"))
        ]
        assert wanted, f"{what} {index} is not possible now: {sorted(set(choices))}"
        return wanted[0]

    return choose


def _run(specs: list[CallSpec], max_parallel: int, *steps: str) -> None:
    """The script with a journal, then without one."""
    for journaled in (True, False):
        _Setup().run_batch(specs, max_parallel, CancelSource(), _script(*steps), journaled)


def test_a_parallel_slot_frees_when_dispatch_settles_not_after_post_execute() -> None:
    # With one slot, call 1's body starts while call 0's post-execute still waits.
    _run(
        [CallSpec(post_waits=True), CallSpec()],
        1,
        "release 0",
        "release 1",
        "post 0",
    )


def test_an_exclusive_call_holds_its_barrier_through_post_execute() -> None:
    _run(
        [CallSpec(tool="exclusive", post_waits=True), CallSpec()],
        4,
        "release 0",
        "post 0",
        "release 1",
    )


def test_cancellation_drains_an_uncooperative_body_and_closes_the_rest() -> None:
    _run(
        [CallSpec(cooperative=False), CallSpec(), CallSpec(tool="exclusive")],
        2,
        "cancel",
        "release 0",
    )


def test_a_halt_from_post_execute_stops_new_starts_without_cancelling() -> None:
    _run(
        [CallSpec(post="accept_halt"), CallSpec(), CallSpec(tool="exclusive")],
        1,
        "release 0",
    )


def test_cancelling_while_post_execute_waits_replaces_a_success() -> None:
    _run([CallSpec(post_waits=True), CallSpec()], 1, "release 0", "cancel", "post 0")


def test_ambient_cancellation_drains_and_reraises_cancelled() -> None:
    _run([CallSpec(cooperative=False), CallSpec(post_waits=True)], 2, "ambient", "release 0")


def test_a_halt_settled_in_the_step_that_freed_the_slot_starts_nothing() -> None:
    # Without a journal, call 1 is spawned when call 0's slot frees; call 0's halt comes in
    # the same step (no checkpoint between), so call 1 must give way and close unstarted.
    _run([CallSpec(outcome="halt"), CallSpec()], 1, "release 0")
