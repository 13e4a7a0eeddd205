"""Property-based checks of the cancellation contract, for trio_tools and for its users.

``trio_tools.testing`` needs `Hypothesis <https://hypothesis.readthedocs.io>`_ (the
``test`` extra); ``import trio_tools`` never imports it.

* :func:`cancellation_contract_machine` builds a Hypothesis state machine that runs *your*
  registry's tools and hooks with cancellation arriving at every phase (before entry, in
  the gate, around and inside the body, in post-execute; through the caller's signal or an
  enclosing Trio scope) and checks the contract every call must keep whatever the tools
  do: exactly one published result, which is the returned one; ``ABORTED`` only when the
  body was invoked and ``ABORTED_BEFORE_DISPATCH`` only when it was not; a cancelled
  caller never gets a success; ambient cancellation re-raised as ``trio.Cancelled``; no
  listener or task left behind.
* :class:`Scenario`, :func:`scenarios`, :func:`expected_outcome`, :func:`run_scenario`
  and :func:`check_scenario` are the exact model trio_tools checks itself against:
  scripted stages whose every step is drawn, and a pure function saying which one result
  the registry must publish.

See ``docs/testing.md``.
"""

try:
    import hypothesis as _hypothesis
except ImportError as _exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "trio_tools.testing needs Hypothesis, which is not installed: "
        "pip install 'trio_tools[test]' (or pip install hypothesis)"
    ) from _exc
else:
    del _hypothesis

from .._util import fix_module as _fix_module
from ._contract import CallPlan as CallPlan
from ._contract import call_plans as call_plans
from ._contract import cancellation_contract_machine as cancellation_contract_machine
from ._harness import ScenarioRun as ScenarioRun
from ._harness import check_scenario as check_scenario
from ._harness import run_scenario as run_scenario
from ._harness import run_scenario_sync as run_scenario_sync
from ._model import expected_outcome as expected_outcome
from ._scenario import Expectation as Expectation
from ._scenario import Scenario as Scenario
from ._strategies import CANCEL_HOWS as CANCEL_HOWS
from ._strategies import CANCEL_WHERES as CANCEL_WHERES
from ._strategies import scenarios as scenarios

__all__ = [
    "CANCEL_HOWS",
    "CANCEL_WHERES",
    "CallPlan",
    "Expectation",
    "Scenario",
    "ScenarioRun",
    "call_plans",
    "cancellation_contract_machine",
    "check_scenario",
    "expected_outcome",
    "run_scenario",
    "run_scenario_sync",
    "scenarios",
]

_fix_module(globals(), __all__)
del _fix_module
