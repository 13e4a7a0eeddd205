"""A throw-away PostgreSQL server for the tests and the benchmark.

``PostgresServer.start()`` runs ``initdb`` into a temporary directory and starts the server
on 127.0.0.1 on a free port (its socket directory is the temporary one), with ``fsync=off``
(the tests kill clients, never the server, so durability against power loss is not what
they check).  ``stop()`` stops it (``-m immediate``) and removes the directory.  The
binaries are found on ``PATH`` or in ``/usr/lib/postgresql/*/bin``; when they are missing
``start()`` raises :class:`PostgresMissing` (``.ci/run`` installs Debian's ``postgresql``
package first).  PostgreSQL refuses to run as root: then ``initdb`` and ``pg_ctl`` run as
the ``postgres`` user (``runuser``), owning the temporary directory.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import attrs

TIMEOUT = 60.0  # seconds for initdb, start and stop each
_SCHEMAS = itertools.count(1)


class PostgresMissing(RuntimeError):
    """The PostgreSQL server binaries are not installed."""


def find_bin_dir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``."""
    found = shutil.which("pg_ctl")
    if found is not None and shutil.which("initdb") is not None:
        return Path(found).resolve().parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda path: (
            int(Path(path).parent.parent.name) if Path(path).parent.parent.name.isdigit() else 0
        ),
    )
    if candidates:
        return Path(candidates[-1]).parent
    raise PostgresMissing(
        "the PostgreSQL server binaries (initdb, pg_ctl) are not installed: neither on PATH "
        "nor in /usr/lib/postgresql/*/bin. Install them (Debian: apt-get install -y "
        "postgresql; .ci/run and `make test` do this when they are missing)."
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@attrs.define
class PostgresServer:
    directory: Path
    bin_dir: Path
    port: int
    as_postgres: bool

    @property
    def conninfo(self) -> str:
        """The server's ``postgres`` database, as the ``postgres`` superuser."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_postgres else []
        result = subprocess.run(
            [*prefix, str(self.bin_dir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        if result.returncode != 0:
            log = self.directory / "log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{args[0]} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}\n{tail}"
            )

    @classmethod
    def start(cls) -> PostgresServer:
        bin_dir = find_bin_dir()
        directory = Path(tempfile.mkdtemp(prefix="trio_tools-pg-"))
        as_postgres = os.geteuid() == 0
        if as_postgres:
            shutil.chown(directory, "postgres", "postgres")
        server = cls(directory, bin_dir, free_port(), as_postgres)
        try:
            server._run(
                "initdb",
                "-D",
                str(directory / "data"),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            )
            options = (
                f"-c listen_addresses=127.0.0.1 -p {server.port} -k {directory} "
                "-c fsync=off -c max_connections=200"
            )
            server._run(
                "pg_ctl",
                "-D",
                str(directory / "data"),
                "-o",
                options,
                "-w",
                "-t",
                str(int(TIMEOUT)),
                "-l",
                str(directory / "log"),
                "start",
            )
        except BaseException:
            server.stop()
            raise
        return server

    def stop(self) -> None:
        try:
            if (self.directory / "data" / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.directory / "data"), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def create_schema(self) -> str:
        """A fresh, empty schema of the ``postgres`` database: a conninfo using it.

        The journal's tables (and session locks) are per schema: a new schema is as good as
        a new database for a test, and far cheaper than copying a template database.
        """
        import psycopg

        name = f"t{os.getpid()}_{next(_SCHEMAS)}"
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}".encode())
        return f"{self.conninfo} options='-c search_path={name}'"
