"""``trio_tools.testing``: its public surface, its import contract, and the documented
example (``docs/testing.md``), which runs here as written.

The contract machine is also pointed at registries that break the contract, to show that
it notices: a hook that leaks a listener, a wrapper that claims ``ABORTED`` for a body it
never invoked, a tool that leaves a task running.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

import trio_tools
import trio_tools.testing
from trio_tools import (
    CancelSource,
    PreDecision,
    ToolDispatchExecution,
    ToolExecution,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
)
from trio_tools.testing import (
    CallPlan,
    Scenario,
    call_plans,
    cancellation_contract_machine,
    check_scenario,
    expected_outcome,
    run_scenario_sync,
    scenarios,
)

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "testing.md"

# Short runs, off the example database; the machines expected to fail are not shrunk
# (those tests only need Hypothesis to find a failure, not the smallest one).
QUICK = settings(
    max_examples=60,
    deadline=None,
    database=None,
    derandomize=True,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow],
)


# --------------------------------------------------------------------------------------
# The import contract


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_importing_trio_tools_does_not_import_hypothesis() -> None:
    done = _python(
        """
        import sys
        import trio_tools
        assert "hypothesis" not in sys.modules, "trio_tools imported hypothesis"
        assert "trio_tools.testing" not in sys.modules
        """
    )
    assert 0 == done.returncode, done.stderr


def test_importing_trio_tools_testing_without_hypothesis_says_what_is_missing() -> None:
    done = _python(
        """
        import sys
        sys.modules["hypothesis"] = None  # as if it were not installed
        try:
            import trio_tools.testing
        except ImportError as exc:
            print(exc)
        else:
            raise SystemExit("imported without hypothesis")
        """
    )
    assert 0 == done.returncode, done.stderr
    assert "trio_tools.testing needs Hypothesis" in done.stdout
    assert "pip install 'trio_tools[test]'" in done.stdout


# --------------------------------------------------------------------------------------
# The public surface


PUBLIC = list(trio_tools.testing.__all__)


def test_all_is_sorted_unique_and_public() -> None:
    assert sorted(set(PUBLIC)) == sorted(PUBLIC)
    assert [] == [name for name in PUBLIC if name.startswith("_")]
    assert [] == [name for name in PUBLIC if not hasattr(trio_tools.testing, name)]


@pytest.mark.parametrize("name", PUBLIC)
def test_public_names_are_documented_and_say_trio_tools_testing(name: str) -> None:
    value = getattr(trio_tools.testing, name)
    if isinstance(value, tuple):  # CANCEL_WHERES / CANCEL_HOWS: documented in the module
        assert all(isinstance(item, str) for item in value)
        return
    assert inspect.getdoc(value), f"{name} has no docstring"
    assert "trio_tools.testing" == value.__module__


@pytest.mark.parametrize(
    "name", [n for n in PUBLIC if inspect.isclass(getattr(trio_tools.testing, n))]
)
def test_public_classes_are_final(name: str) -> None:
    assert getattr(getattr(trio_tools.testing, name), "__final__", False)


def test_the_package_does_not_import_the_testing_subpackage() -> None:
    init = (ROOT / "trio_tools" / "__init__.py").read_text(encoding="utf-8")
    assert re.search(r"\btesting\b", init) is None


# --------------------------------------------------------------------------------------
# The documented example, exactly as written


def _documented_example() -> str:
    text = DOCS.read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)
    [example] = [b for b in blocks if "cancellation_contract_machine(" in b]
    return str(example)


def test_the_documented_example_runs_and_passes() -> None:
    module = types.ModuleType("test_my_tools")
    exec(compile(_documented_example(), str(DOCS), "exec"), module.__dict__)
    machine = module.MyToolsContract
    assert issubclass(machine, RuleBasedStateMachine)
    assert machine.TestCase is module.TestMyToolsContract
    run_state_machine_as_test(machine, settings=QUICK)


def test_the_documented_property_test_runs() -> None:
    text = DOCS.read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)
    [example] = [b for b in blocks if "test_the_registry_matches_the_model" in b]
    namespace: dict[str, Any] = {}
    exec(compile(example, str(DOCS), "exec"), namespace)
    settings(QUICK, max_examples=30)(namespace["test_the_registry_matches_the_model"])()


# --------------------------------------------------------------------------------------
# The contract machine notices broken registries


def _calls(*names: str) -> st.SearchStrategy[tuple[str, object]]:
    return st.tuples(st.sampled_from(names), st.just({"x": 1}))


def _registry_with(fn: Callable[[ToolRegistry], object]) -> Callable[[], ToolRegistry]:
    def make() -> ToolRegistry:
        registry = ToolRegistry()

        @registry.tool
        async def work(args: object, ctx: ToolRunContext) -> str:
            await trio.sleep(1.0)
            return "done"

        fn(registry)
        return registry

    return make


NO_SHRINK = settings(QUICK, phases=[Phase.explicit, Phase.reuse, Phase.generate])


def _fails(make: Callable[[], ToolRegistry], message: str) -> None:
    machine = cancellation_contract_machine(make, _calls("work"))
    with pytest.raises(AssertionError, match=message):
        run_state_machine_as_test(machine, settings=NO_SHRINK)


def test_the_contract_machine_catches_a_hook_that_leaks_a_listener() -> None:
    async def leaky(
        execution: ToolExecution, call_next: Callable[[], Awaitable[PreDecision]]
    ) -> PreDecision:
        execution.signal.add_listener(lambda reason: None)  # never disposed
        return await call_next()

    _fails(_registry_with(lambda r: r.add_pre_execute(leaky)), "listener")


def test_the_contract_machine_catches_an_aborted_result_for_a_body_never_invoked() -> None:
    async def fibber(
        execution: ToolDispatchExecution, call_next: Callable[[], Awaitable[ToolResult]]
    ) -> ToolResult:
        with execution.signal.open_scope():
            await trio.sleep(0.5)  # say, waiting for a rate limiter
        if execution.signal.cancelled:  # claims side effects that cannot have happened
            return trio_tools.ToolResult(
                content=(trio_tools.TextBlock("Error: tool call aborted"),),
                is_error=True,
                error=trio_tools.ErrorInfo("AbortError", "ABORTED", "tool call aborted"),
            )
        return await call_next()

    _fails(_registry_with(lambda r: r.add_around_execute(fibber)), "never invoked")


def test_the_contract_machine_catches_a_tool_that_leaves_a_task_running() -> None:
    async def background(args: object, ctx: ToolRunContext) -> str:
        # Work started outside the call's own nursery: the registry cannot await it.
        trio.lowlevel.spawn_system_task(trio.sleep, 5.0)
        return "started"

    def make() -> ToolRegistry:
        registry = ToolRegistry()
        registry.register(trio_tools.define_tool(background, name="work"))
        return registry

    _fails(make, "outlived")


def test_the_contract_machine_reports_a_call_that_does_not_settle_in_time() -> None:
    async def stubborn(args: object, ctx: ToolRunContext) -> str:
        with trio.CancelScope(shield=True):  # ignores cancellation for 1000 virtual seconds
            await trio.sleep(1000.0)
        return "done"

    def make() -> ToolRegistry:
        registry = ToolRegistry()
        registry.register(trio_tools.define_tool(stubborn, name="work"))
        return registry

    machine = cancellation_contract_machine(make, _calls("work"), settle_within=10.0)
    with pytest.raises(AssertionError, match="did not settle"):
        run_state_machine_as_test(machine, settings=NO_SHRINK)


def test_the_contract_machine_lets_a_sync_tool_work_in_its_thread() -> None:
    # MockClock(autojump_threshold=0) used to jump to the settle deadline while the body's
    # worker thread ran: a sync tool that blocks for a moment counted as hung.
    def blocking(args: object, ctx: ToolRunContext) -> str:
        time.sleep(0.02)  # a blocking call, as sync tools make
        return "done"

    def make() -> ToolRegistry:
        registry = ToolRegistry()
        registry.register(trio_tools.define_tool(blocking, name="work"))
        return registry

    machine = cancellation_contract_machine(make, _calls("work"))
    run_state_machine_as_test(
        machine, settings=settings(NO_SHRINK, max_examples=5, stateful_step_count=5)
    )


def test_the_contract_machine_knows_a_sync_body_waiting_for_a_thread_never_ran() -> None:
    # Two sync calls side by side on one thread token, both cancelled once blocked: the one
    # still waiting for the token never runs (ABORTED_BEFORE_DISPATCH, as documented), and
    # the machine used to take it for a body that ran.
    def blocking(args: object, ctx: ToolRunContext) -> str:
        time.sleep(0.02)
        return "done"

    def make() -> ToolRegistry:
        registry = ToolRegistry(thread_limiter=trio.CapacityLimiter(1))
        registry.register(trio_tools.define_tool(blocking, name="work"))
        return registry

    plan = trio_tools.testing.CallPlan(name="work", arguments={"x": 1}, where="body")

    @settings(QUICK, max_examples=1)
    @given(st.just([plan, plan]))
    def run(batch: list[trio_tools.testing.CallPlan]) -> None:  # the rule, inside a test
        machine: Any = cancellation_contract_machine(make, _calls("work"))()
        for _ in range(3):
            machine.calls_side_by_side(batch)
        machine.teardown()

    run()


def test_the_contract_machine_rejects_a_factory_that_returns_something_else() -> None:
    machine = cancellation_contract_machine(lambda: object(), _calls("work"))  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="ToolRegistry"):
        machine()


# --------------------------------------------------------------------------------------
# Strategies, scenarios and the model's inputs


def test_scenarios_rejects_unknown_points_and_empty_choices() -> None:
    with pytest.raises(ValueError, match="unknown cancellation point"):
        scenarios(wheres=["nowhere"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="unknown way"):
        scenarios(hows=["loudly"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="must not be empty"):
        scenarios(wheres=[])


def test_a_scenario_refuses_an_external_canceller_without_a_wait() -> None:
    with pytest.raises(ValueError, match="wait=True"):
        Scenario(where="body", external=True, wait=False)
    with pytest.raises(ValueError, match="waiting cancellation point"):
        Scenario(where="before_entry", external=True)


def test_run_scenario_checks_that_pre_cancelled_matches_the_source() -> None:
    source = CancelSource()
    source.cancel()
    with pytest.raises(ValueError, match="pre_cancelled"):
        run_scenario_sync(Scenario(), source=source)


def test_check_scenario_lists_every_mismatch() -> None:
    run = run_scenario_sync(Scenario(where="body"))
    with pytest.raises(AssertionError, match="published") as raised:
        check_scenario(Scenario(), run)  # the run was cancelled; the claimed scenario not
    assert "cancellation point reached" in str(raised.value)


def test_expected_outcome_is_pure() -> None:
    scenario = Scenario(where="wrapper_after", wrapper="pass", post="accept")
    assert expected_outcome(scenario) == expected_outcome(scenario)


def test_call_plans_draw_from_the_given_calls() -> None:
    seen: list[CallPlan] = []

    @given(call_plans(_calls("a", "b")))
    @settings(QUICK, max_examples=20)
    def collect(plan: CallPlan) -> None:
        seen.append(plan)

    collect()
    assert {"a", "b"} >= {plan.name for plan in seen}
    assert all({"x": 1} == plan.arguments for plan in seen)
