# -- Hypothesis profiles -----------------------------------------------------------------
# `ci` (the default) is reproducible and bounded: the state machines in test_*_states.py
# each finish well under a minute on two slow cores.  `thorough` (HYPOTHESIS_PROFILE=
# thorough) explores freshly random examples, >= 2,000 per machine.  `dev` is a quick loop.
import functools
import inspect
import os as _os
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio
from helpers_journal import open_journal_at
from hypothesis import HealthCheck as _HealthCheck
from hypothesis import settings as _settings
from pg_server import PostgresMissing, PostgresServer

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


# -- durable journal backends --------------------------------------------------------------
# `journal_backend` runs a test once per backend; `open_journal(session)` opens a session of
# a fresh journal of that backend (a file in tmp_path, or a fresh schema of the test
# suite's own PostgreSQL server, started once per run).

JOURNAL_BACKENDS = ("sqlite", "postgres")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the whole run; a missing installation fails, never skips."""
    try:
        server = PostgresServer.start()
    except PostgresMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=JOURNAL_BACKENDS)
def journal_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def journal_target(
    journal_backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[Path], str]:
    """Makes a fresh journal target of the backend (a path, or a conninfo using a new schema)."""
    if journal_backend == "sqlite":
        return lambda directory: str(directory / "journal.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return lambda directory: server.create_schema()


@pytest.fixture
def open_journal(
    journal_backend: str, journal_target: Callable[[Path], str], tmp_path: Path
) -> Callable[[str], AbstractAsyncContextManager[Any]]:
    """``open_journal(session)``: open a session of one fresh journal of the backend."""
    target = journal_target(tmp_path)
    return lambda session: open_journal_at(journal_backend, target, session)


# -- a trio.Cancelled escaping a test fails it ---------------------------------------------
# pytest-trio takes a `trio.Cancelled` that escapes a test function for the test's own
# cancellation and reports the test as passed, however early it stopped: a call that
# wrongly raised a stray `Cancelled` (out of `execute`, say) would pass every assertion
# after it.  Every async test is wrapped so that one fails the test instead.


def _failing_on_escaped_cancelled(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def test(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except trio.Cancelled as exc:
            raise AssertionError("a trio.Cancelled escaped the test") from exc

    return test


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.obj):
            item.obj = _failing_on_escaped_cancelled(item.obj)
