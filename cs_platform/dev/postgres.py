"""A private PostgreSQL server for Dagster's production-shaped instance (``make stack`` and its test):
Debian's ``postgresql`` binaries, a fresh cluster under our work directory, loopback only, trust
authentication (nothing but this machine can reach it), stopped by the PID we started.

PostgreSQL refuses to run as root, which CI is: then the cluster belongs to, and the server runs
as, the ``postgres`` user that Debian's package creates.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

import sqlalchemy

from cs_platform.dev.deadline import Deadline
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.process_group import start_server, stop_process_group

INSTALL_HINT = "PostgreSQL was not found: install it with 'apt-get install postgresql' (make test and make stack do when they can)"


class PostgresNotInstalledError(RuntimeError):
    """Raised when PostgreSQL's server binaries are missing; the message says how to install them."""


class PostgresStartError(RuntimeError):
    """Raised when the private server does not become usable; the message carries psql's error."""


def postgres_bin() -> Path:
    """The directory of ``initdb`` and ``postgres``: Debian keeps them off the PATH, per version."""
    candidates = [Path(p).parent for p in (shutil.which("initdb"), shutil.which("postgres")) if p]
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    raise PostgresNotInstalledError(INSTALL_HINT)


@contextmanager
def postgres_server(workdir: Path, database: str = "dagster", settings: Mapping[str, str] | None = None) -> Iterator[str]:
    """Run a PostgreSQL server with ``database`` until exit; yields its ``postgresql://`` URL.
    ``settings``: more server settings (``postgres -c name=value``), e.g. ``max_connections``."""
    binaries = postgres_bin()
    # Under /tmp, not ``workdir``: the server's user must reach it, and test directories are private.
    home = Path(tempfile.mkdtemp(prefix="cs_platform-postgres-"))
    account = {}
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        account = {"user": user.pw_uid, "group": user.pw_gid}
        os.chown(home, user.pw_uid, user.pw_gid)
    data = home / "data"
    subprocess.run(
        [str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"],
        check=True, capture_output=True, timeout=120, **account,
    )
    port = free_loopback_port()
    command = [str(binaries / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port), "-k", str(home), "-c", "fsync=off",
               # dagster-postgres reads the server's now() as UTC: in any other zone a run is hours old
               # at birth, and the partition sensor presumes it dead (seen with TZ=America/Los_Angeles).
               "-c", "timezone=UTC", *(arg for name, value in (settings or {}).items() for arg in ("-c", f"{name}={value}"))]
    server = start_server(command, port, workdir / "postgres.log", "PostgreSQL", **account)
    try:
        _create_database(shutil.which("psql") or str(binaries / "psql"), port, database, workdir / "postgres.log")
        # psycopg2 named: dagster-postgres installs that driver, SQLAlchemy 2.1 defaults to psycopg 3.
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/{database}"
    finally:
        stop_process_group(server, grace_s=20)
        shutil.rmtree(home, ignore_errors=True)


def query(url: str, sql: str) -> list[Any]:
    """The rows of one statement, on a connection of its own that is closed after it (no pool left
    behind: a test or a bench asking the server about its own connections)."""
    engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(sqlalchemy.text(sql)).all()
    finally:
        engine.dispose()


def _create_database(psql: str, port: int, database: str, log: Path) -> None:
    """Create ``database``. The server listens before it accepts connections ("the database system
    is starting up", seen on a loaded machine), so a connection failure (psql's exit code 2) is
    tried again until a load-scaled deadline."""
    deadline = Deadline(60)
    while True:
        command = [psql, "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-c", f'CREATE DATABASE "{database}"']
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if done.returncode == 0:
            return
        if done.returncode != 2 or deadline.expired():
            raise PostgresStartError(f"PostgreSQL on 127.0.0.1:{port} did not create database {database!r}: {done.stderr.strip()} (server log: {log})")
        time.sleep(0.5)
