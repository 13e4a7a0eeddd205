# -- Hypothesis profiles -----------------------------------------------------------------
# `ci` (the default) is reproducible and bounded: the state machines in test_*_states.py
# each finish well under a minute on two slow cores.  `thorough` (HYPOTHESIS_PROFILE=
# thorough) explores freshly random examples, >= 2,000 per machine.  `dev` is a quick loop.
import os as _os

from hypothesis import HealthCheck as _HealthCheck
from hypothesis import settings as _settings

_settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=100,
    print_blob=True,
    suppress_health_check=[_HealthCheck.too_slow],
)
_settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=2_000,
    print_blob=True,
    suppress_health_check=[_HealthCheck.too_slow],
)
_settings.register_profile("dev", deadline=None, max_examples=20, print_blob=True)
_settings.load_profile(_os.environ.get("HYPOTHESIS_PROFILE", "ci"))
