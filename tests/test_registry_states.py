"""Every cancellation phase of ``ToolRegistry.execute``, checked against a pure model.

The state machine draws scripted calls (``trio_tools.testing.Scenario``: where and how the
cancellation arrives, what every stage does), runs each in its own ``trio.run`` on a
``MockClock(autojump_threshold=0)`` and compares the one published result, the stages
entered, ``finalize_content`` calls and what ``execute`` raised with
``trio_tools.testing.expected_outcome``.  Its state is a long-lived registry (each call
registers its tool and stages and removes them after) and a long-lived "session" signal
shared by calls: once a call cancels it, later shared calls are pre-aborted until a rule
replaces it.  After every rule: no listener left on the session signal, the registry back to
empty.  Each call also checks its own invariants (``check_scenario``): one published
result, which is the returned one; no child task outliving the call; no listener left on the
caller's or the wrapper's signal; no Trio task leaked.

Below the machine: the model's own examples (hand-computed from DESIGN §4/§5/§7, so the
model is checked independently of the registry) and named regression tests for the shrunk
failures found while writing it.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import event, note
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from strategies import concurrent_scenarios, scenarios

from trio_tools import CancelSource, ToolExecution, ToolRegistry, ToolResult
from trio_tools.testing import (
    Scenario,
    ScenarioRun,
    check_scenario,
    expected_outcome,
    run_scenario,
    run_scenario_sync,
)


def _label(scenario: Scenario, run: ScenarioRun) -> None:
    """Coverage statistics (``--hypothesis-show-statistics``)."""
    result = run.published[0] if run.published else None
    event(f"code={result.code if result is not None else None}")
    event(f"where={scenario.where} how={scenario.how} reached={run.triggered}")


class _Tally:
    """An instrument: calls started and not yet finished, and each finished result."""

    def __init__(self) -> None:
        self.open = 0
        self.results: list[ToolResult] = []

    def call_started(self, exec: ToolExecution) -> None:
        self.open += 1

    def call_finished(self, exec: ToolExecution, result: ToolResult) -> None:
        self.open -= 1
        self.results.append(result)


class RegistryStates(RuleBasedStateMachine):
    """Scripted calls through one long-lived registry and a shared session signal.

    The registry has an instrument: every call, whatever cancels it, finishes there once
    with the result the observers got.
    """

    def __init__(self) -> None:
        super().__init__()
        # One long-lived registry per enforce_timeouts setting: a scenario's must match.
        self.registries = {flag: ToolRegistry(enforce_timeouts=flag) for flag in (True, False)}
        self.session = CancelSource()
        self.tally = _Tally()
        for registry in self.registries.values():
            registry.add_instrument(self.tally)

    def _check(self, scenario: Scenario, run: ScenarioRun, *, instrumented: bool = True) -> None:
        note(f"expected: {expected_outcome(scenario)!r}")
        _label(scenario, run)
        check_scenario(scenario, run)
        if instrumented:
            finished, self.tally.results = self.tally.results, []
            assert 0 == self.tally.open
            assert list(run.published) == finished
            assert all(a is b for a, b in zip(run.published, finished, strict=True))

    @rule(scenario=scenarios())
    def call_with_its_own_signal(self, scenario: Scenario) -> None:
        """A call whose caller owns a fresh signal."""
        registry = self.registries[scenario.enforce_timeouts]
        self._check(scenario, run_scenario_sync(scenario, registry=registry))

    @rule(scenario=scenarios())
    def call_with_the_session_signal(self, scenario: Scenario) -> None:
        """A call on the shared signal: pre-aborted if an earlier call cancelled it."""
        scenario = attrs.evolve(scenario, pre_cancelled=self.session.signal.cancelled)
        registry = self.registries[scenario.enforce_timeouts]
        run = run_scenario_sync(scenario, registry=registry, source=self.session)
        self._check(scenario, run)

    @rule(batch=concurrent_scenarios())
    def calls_side_by_side_on_the_session_signal(self, batch: list[Scenario]) -> None:
        """Several calls at once, one registry each, all on the shared signal.

        None of them fires the shared signal, so each outcome is its own model's; the Trio
        tasks and the shared signal's listeners are checked once all have settled.
        """
        pre_cancelled = self.session.signal.cancelled
        batch = [attrs.evolve(s, pre_cancelled=pre_cancelled) for s in batch]

        async def main() -> list[ScenarioRun]:
            runs: list[ScenarioRun | None] = [None] * len(batch)
            baseline = trio.lowlevel.current_statistics().tasks_living

            async def one(index: int) -> None:
                runs[index] = await run_scenario(
                    batch[index],
                    registry=ToolRegistry(enforce_timeouts=batch[index].enforce_timeouts),
                    source=self.session,
                    isolated=False,
                )

            async with trio.open_nursery() as nursery:
                for index in range(len(batch)):
                    nursery.start_soon(one, index)
            # The deadline timer system task may have started during the batch.
            leaked = trio.lowlevel.current_statistics().tasks_living - baseline
            assert leaked <= 1, f"{leaked} Trio task(s) outlived the batch"
            return [run for run in runs if run is not None]

        runs = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        assert len(batch) == len(runs)
        for scenario, run in zip(batch, runs, strict=True):
            self._check(scenario, run, instrumented=False)

    @rule()
    def start_a_new_session(self) -> None:
        """Later shared calls get a fresh session signal (the old one may have fired)."""
        self.session = CancelSource()

    @invariant()
    def no_listener_left_on_the_session_signal(self) -> None:
        assert 0 == self.session.signal.statistics().listeners

    @invariant()
    def the_registry_is_empty_again(self) -> None:
        for registry in self.registries.values():
            assert () == registry.schemas()


TestRegistryStates = RegistryStates.TestCase


# --------------------------------------------------------------------------------------
# The model, checked on its own: expected codes computed by hand from DESIGN §4/§5/§7.

_MODEL_EXAMPLES: list[tuple[str, Scenario, str | None]] = [
    ("success", Scenario(), None),
    ("pre-aborted entry", Scenario(where="before_entry"), "ABORTED_BEFORE_DISPATCH"),
    (
        "materialisation failure beats pre-abort",
        Scenario(where="before_entry", arguments="not_json"),
        "NOT_JSON",
    ),
    (
        "cancelled in pre-execute",
        Scenario(where="pre_execute", pre="allow"),
        "ABORTED_BEFORE_DISPATCH",
    ),
    (
        "cancel-then-deny stays a denial",
        Scenario(pre="cancel_then_deny"),
        "DENIED",
    ),
    (
        "a hook failing after cancellation stays a failure",
        Scenario(where="pre_execute", pre="raise", wait=False),
        "PRE_EXECUTE_FAILED",
    ),
    (
        "cancelled during approval",
        Scenario(where="approval", pre="ask", approver="granted"),
        "ABORTED_BEFORE_DISPATCH",
    ),
    (
        "approver answers cancelled after the caller cancelled",
        Scenario(where="approval", pre="ask", approver="cancelled", wait=False),
        "ABORTED_BEFORE_DISPATCH",
    ),
    (
        "approver answers cancelled on its own",
        Scenario(pre="ask", approver="cancelled"),
        "DENIED",
    ),
    (
        "wrapper success overtaken by cancellation before delegation",
        Scenario(where="wrapper_before", wrapper="pass"),
        "ABORTED_BEFORE_DISPATCH",
    ),
    (
        "already-cancelled replacement signal",
        Scenario(where="replacement", how="wrapper_signal", wrapper="pass"),
        "ABORTED_BEFORE_DISPATCH",
    ),
    ("cancelled during the body", Scenario(where="body"), "ABORTED"),
    (
        "body raising on cancellation is a tool failure",
        Scenario(where="body", body="raise_on_cancel"),
        "TOOL_FAILED",
    ),
    (
        "shielded body finishing after cancellation",
        Scenario(where="body", body="shielded"),
        "ABORTED",
    ),
    (
        "cancelled while the wrapper waits after the body",
        Scenario(where="wrapper_after", wrapper="pass"),
        "ABORTED",
    ),
    (
        "a wrapper failure after cancellation stays a failure",
        Scenario(where="wrapper_after", wrapper="raise_after"),
        "WRAPPER_FAILED",
    ),
    (
        "cancelled during post-execute after the body",
        Scenario(where="post_execute", post="accept"),
        "ABORTED",
    ),
    (
        "a block during cancellation stays a block",
        Scenario(where="post_execute", post="block"),
        "BLOCKED",
    ),
    (
        "cancelled during post-execute of a denial",
        Scenario(where="post_execute", pre="deny", post="accept"),
        "DENIED",
    ),
    (
        "the timeout policy's deadline during the body",
        Scenario(where="body", how="timeout", tool_timeout=True, timeout_policy="outer"),
        "TOOL_TIMEOUT",
    ),
    (
        "a deadline while the wrapper waits, inside the policy",
        Scenario(
            where="wrapper_after",
            how="timeout",
            wrapper="pass",
            tool_timeout=True,
            timeout_policy="outer",
        ),
        "TOOL_TIMEOUT",
    ),
    (
        "a wrapper waiting outside the policy is not timed",
        Scenario(
            where="wrapper_after",
            how="timeout",
            wrapper="pass",
            tool_timeout=True,
            timeout_policy="inner",
        ),
        None,
    ),
    (
        "a tool timeout without the policy is not enforced when the registry does not",
        Scenario(where="body", how="timeout", tool_timeout=True, enforce_timeouts=False),
        None,
    ),
    (
        "the registry enforces a tool timeout by itself, innermost",
        Scenario(where="body", how="timeout", tool_timeout=True),
        "TOOL_TIMEOUT",
    ),
    (
        "the registry's own policy is inside the wrapper: a wrapper's wait is not timed",
        Scenario(where="wrapper_after", how="timeout", wrapper="pass", tool_timeout=True),
        None,
    ),
    (
        "a body raising on the deadline is still a timeout",
        Scenario(
            where="body",
            how="timeout",
            body="raise_on_cancel",
            tool_timeout=True,
            timeout_policy="inner",
        ),
        "TOOL_TIMEOUT",
    ),
    (
        "a wrapper's own signal interrupts the body",
        Scenario(where="body", how="wrapper_signal", wrapper="replace_signal"),
        "ABORTED",
    ),
    ("ambient cancellation in the body", Scenario(where="body", how="ambient"), "ABORTED"),
    (
        "ambient cancellation in the gate",
        Scenario(where="pre_execute", how="ambient", pre="allow"),
        "ABORTED_BEFORE_DISPATCH",
    ),
    (
        "ambient cancellation keeps a NOT_JSON materialisation failure",
        Scenario(where="before_entry", how="ambient", arguments="not_json"),
        "NOT_JSON",
    ),
    ("unknown tool", Scenario(tool="unknown"), "UNKNOWN_TOOL"),
    ("finalize_content raising", Scenario(where="body", finalize_raises=True), "FINALIZE_FAILED"),
]


@pytest.mark.parametrize(
    ("scenario", "code"),
    [pytest.param(s, c, id=name) for name, s, c in _MODEL_EXAMPLES],
)
def test_the_model_gives_the_designed_code(scenario: Scenario, code: str | None) -> None:
    assert code == expected_outcome(scenario).code


@pytest.mark.parametrize(
    "scenario",
    [pytest.param(s, id=name) for name, s, _ in _MODEL_EXAMPLES],
)
def test_the_registry_matches_the_model_on_its_examples(scenario: Scenario) -> None:
    check_scenario(scenario, run_scenario_sync(scenario))


def test_the_model_says_ambient_cancellation_is_reraised_when_it_reaches_the_registry() -> None:
    assert expected_outcome(Scenario(where="body", how="ambient")).raises_cancelled
    assert expected_outcome(Scenario(where="before_entry", how="ambient")).raises_cancelled


def test_the_model_says_a_success_under_ambient_cancellation_is_aborted_and_reraised() -> None:
    """A shielded body completes after an enclosing scope was cancelled: like a success after
    the caller's signal fired, it is replaced (``ABORTED``), and ``Cancelled`` re-raised."""
    expectation = expected_outcome(Scenario(where="body", how="ambient", body="shielded"))
    assert ("ABORTED", True) == (expectation.code, expectation.raises_cancelled)


# --------------------------------------------------------------------------------------
# Regression tests: shrunk failures found by the machine.


@pytest.mark.parametrize("body", ["success", "child"])
def test_ambient_cancellation_during_the_body_reraises_a_bare_cancelled(body: Any) -> None:
    """Found by the machine: ``execute`` re-raised the per-call nursery's
    ``BaseExceptionGroup([Cancelled])`` instead of ``trio.Cancelled`` (DESIGN §4), so an
    ``except trio.Cancelled`` around ``execute`` missed it."""
    scenario = Scenario(where="body", how="ambient", body=body)
    run = run_scenario_sync(scenario)
    assert "Cancelled" == run.escaped
    check_scenario(scenario, run)


def test_an_external_canceller_fires_at_the_point_even_when_the_wait_does_not_block() -> None:
    """Found by the machine (thorough profile): the wrapper's wait after a shielded body
    that overran the timeout does not block (its scope is already cancelled by the
    deadline), so an external canceller fired at an arbitrary later moment.  The harness
    now hands over to the canceller and waits for it, shielded."""
    scenario = Scenario(
        where="wrapper_after",
        how="ambient",
        external=True,
        wrapper="pass",
        body="shielded",
        tool_timeout=True,
        timeout_policy="outer",
    )
    check_scenario(scenario, run_scenario_sync(scenario))


def test_ambient_cancellation_pending_when_the_body_is_aborted_surfaces_before_post_execute() -> (
    None
):
    """Found by the machine after the registry started catching the body's own Cancelled
    (no exception group) and checkpointing on the aborted path: a pending enclosing-scope
    cancellation surfaces right there, so post-execute never runs; the published result
    stays ABORTED and Cancelled is re-raised."""
    scenario = Scenario(
        where="body",
        how="ambient",
        external=True,
        body="shielded",
        post="accept",
        tool_timeout=True,
        timeout_policy="outer",
    )
    expectation = check_scenario(scenario, run_scenario_sync(scenario))
    assert (("body",), "ABORTED", True) == (
        expectation.stages,
        expectation.code,
        expectation.raises_cancelled,
    )
