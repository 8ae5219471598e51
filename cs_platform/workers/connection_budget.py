"""Whether PostgreSQL has room for the connections the run workers will hold, asked as they start.

Each worker process keeps its storage's connections open between statements (``held_connections``
of :class:`~cs_platform.workers.postgres_storage.HeldPostgresStorage`, or one each to the run and the
event storage on dagster-postgres's own: ``worker.process_instance``), so ``--concurrency`` worker
processes hold ``concurrency`` times that. On 2026-12-01, 64 worker processes beside the daemon's
and the code server's passed PostgreSQL's default ``max_connections`` (100): runs then failed
minutes in with "sorry, too many clients already", far from the setting that caused it
(docs/benchmarks.md). So the parent asks the server before it forks its pool:

- more than the server ever admits for clients (``max_connections`` less the connections reserved
  for superusers): the worker refuses to start, naming the settings and the fixes;
- more than is free beside the connections open now: a warning only. On Kubernetes a rolling update
  starts the new pod while the old one still holds its connections, which it lets go as it ends: a
  refusal there would stop every deploy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from dagster import DagsterInstance
from sqlalchemy import text

from cs_platform.workers.postgres_storage import HeldRunStorage

log = logging.getLogger("cs_platform.workers")

# PostgreSQL 16 added reserved_connections (for roles with pg_use_reserved_connections) beside
# superuser_reserved_connections: both are kept from ordinary clients.
SETTINGS = "SELECT name, setting FROM pg_settings WHERE name IN ('max_connections', 'superuser_reserved_connections', 'reserved_connections')"
IN_USE = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"  # not the asking one


class TooManyConnectionsError(RuntimeError):
    """The workers would hold more connections than the server admits; the message names the fixes."""


@dataclass(frozen=True)
class ConnectionBudget:
    max_connections: int
    reserved: int  # kept from ordinary clients (superuser_reserved_connections + reserved_connections)
    in_use: int  # client connections open as the workers start (the daemon's, the code servers', ...)
    processes: int  # worker processes (--concurrency)
    held_each: int  # connections each holds between statements

    @property
    def wanted(self) -> int:
        return self.processes * self.held_each

    @property
    def admitted(self) -> int:
        return self.max_connections - self.reserved

    def describe(self) -> str:
        return (
            f"{self.processes} worker processes (--concurrency, default CS_PLATFORM_MAX_PARALLEL_READS) hold "
            f"{self.held_each} connections each, {self.wanted} in all; PostgreSQL's max_connections is "
            f"{self.max_connections}, {self.reserved} of them reserved, and {self.in_use} are open now"
        )


def held_per_process(instance: DagsterInstance, hold_connections: bool) -> int:
    """The connections one worker process's instance keeps open between statements."""
    storage = instance.run_storage
    if isinstance(storage, HeldRunStorage):
        return storage.held_connections
    if hold_connections and type(storage).__module__.startswith("dagster_postgres."):
        return 2  # one to the run storage, one to the event storage (worker.process_instance)
    return 0  # per statement, or not PostgreSQL (SQLite: no server to fill)


def connection_budget(instance: DagsterInstance, processes: int, hold_connections: bool) -> ConnectionBudget | None:
    """What the workers would hold against what the server admits; None if they hold nothing."""
    held_each = held_per_process(instance, hold_connections)
    if held_each == 0:
        return None
    with instance.run_storage.connect() as conn:
        settings = {name: int(value) for name, value in conn.execute(text(SETTINGS))}
        in_use = conn.execute(text(IN_USE)).scalar_one()
    reserved = settings.get("superuser_reserved_connections", 0) + settings.get("reserved_connections", 0)
    return ConnectionBudget(settings["max_connections"], reserved, in_use, processes, held_each)


def check_connection_budget(instance: DagsterInstance, processes: int, hold_connections: bool) -> ConnectionBudget | None:
    """Refuse workers that could never hold their connections; warn of ones that do not fit beside
    the connections open now (module docstring). Returns what was found."""
    budget = connection_budget(instance, processes, hold_connections)
    if budget is None:
        return None
    fixes = (
        "lower --concurrency, hold fewer connections (held_connections in dagster.yaml's storage for "
        "cs_platform's storage, 0 to connect per statement; --connections per-statement on dagster-postgres's), "
        "or raise max_connections on the server (docs/production.md, \"Warm run workers\")"
    )
    if budget.wanted > budget.admitted:
        raise TooManyConnectionsError(f"{budget.describe()}: the server admits {budget.admitted} clients in all. To start, {fixes}")
    if budget.wanted > budget.admitted - budget.in_use:
        log.warning("%s: runs may fail with 'too many clients' once every process holds its connections. Unless "
                    "those others are about to end (a rolling update), %s", budget.describe(), fixes)
    return budget
