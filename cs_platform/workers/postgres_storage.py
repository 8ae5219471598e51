"""The instance's storage on PostgreSQL (``storage: custom:`` in ``dagster.yaml``), for the
processes that make statements all day: the daemon, the code server's sensor evaluations, the run
workers.

dagster-postgres's storages connect anew for every statement (SQLAlchemy's ``NullPool``): a new
psycopg2 connection, a TCP and authentication handshake, and on the server a new backend process.
In a profile of ``dagster-daemon`` during ``bench/run_launch.py``'s warm case half of its CPU was
connecting, and another quarter was asking PostgreSQL's catalog, for each listing of runs, each run
event and each sensor tick, whether the runs table has its start and end columns and whether the
instigators table exists (Dagster's checks for schemas older than its own migrations). Each
sensor evaluation also made a new instance, whose three storages each listed the tables
(docs/benchmarks.md, "Warm run workers").

So the three storages of one instance share one engine that holds ``held_connections``
connections between statements (0: a new one for each, Dagster's own way), and a process asks the
catalog each of those questions until the answer is yes, then never again: a migration adds
tables and columns and drops none, so a yes holds for the process's life. Everything else is
dagster-postgres's, unchanged: its tables, its migrations, its statements.

The price of holding: ``held_connections`` open connections per process that made an instance
(the daemon, each code server, each worker process, each run process of the default launcher);
count them in the server's ``max_connections`` (docs/production.md, "Warm run workers").
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from dagster import Field, IntSource
from dagster._config.config_schema import UserConfigSchema
from dagster._core.storage.base_storage import DagsterStorage
from dagster._core.storage.config import pg_config
from dagster._core.storage.event_log import EventLogStorage
from dagster._core.storage.runs import RunStorage
from dagster._core.storage.schedules import ScheduleStorage
from dagster._serdes import ConfigurableClass, ConfigurableClassData
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.run_storage import PostgresRunStorage
from dagster_postgres.schedule_storage import PostgresScheduleStorage
from dagster_postgres.utils import create_pg_engine, get_token_provider_from_config, pg_url_from_config
from sqlalchemy import pool
from sqlalchemy.engine import Engine

# What this process has learnt of each database's schema: (URL, question) answered yes. A yes
# holds for the process's life: Dagster's migrations add tables and columns and drop none.
_SCHEMA_HAS: set[tuple[str, str]] = set()
DEFAULT_HELD_CONNECTIONS = 2  # per process: the daemon's ticks and a run's events, one statement at a time each
TABLES = "tables"  # the storages' tables exist: each new instance (a sensor evaluation makes one) lists them otherwise


def asked_once(question: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """Dagster's question about the schema (a storage's ``has_...``), asked of the catalog until
    its answer is yes. Dagster asks some of them at every listing of runs or run event."""
    name = question.__name__

    @functools.wraps(question)
    def ask(storage: Any) -> bool:
        key = (storage.postgres_url, name)
        if key not in _SCHEMA_HAS and question(storage):
            _SCHEMA_HAS.add(key)
        return key in _SCHEMA_HAS

    return ask


def shared_engine(postgres_url: str, token_provider: Any, held_connections: int) -> Engine:
    """One engine for the three storages: ``held_connections`` kept open between statements, more
    opened (and closed after their statement) while that many are busy, as dagster-webserver's
    pool does. Each held connection is checked as it is taken (SQLAlchemy's pre-ping: a round trip,
    far cheaper than a connection) and replaced after an hour, so one the server dropped (a
    restart, a failover, an idle timeout) is replaced before a statement meets it."""
    if held_connections == 0:
        return create_pg_engine(postgres_url, token_provider, isolation_level="AUTOCOMMIT", poolclass=pool.NullPool)
    return create_pg_engine(
        postgres_url, token_provider, isolation_level="AUTOCOMMIT",
        pool_size=held_connections, max_overflow=20, pool_recycle=3600, pool_pre_ping=True,
    )


class _SharedEngine:
    """A storage that uses its instance's engine and lets it go with the instance (whose
    ``dispose`` reaches the run and the event storages)."""

    _engine: Engine

    @property
    def held_connections(self) -> int:
        """The connections the engine keeps open between statements (0: one per statement)."""
        return self._engine.pool.size() if isinstance(self._engine.pool, pool.QueuePool) else 0

    def share(self, engine: Engine) -> None:
        old, self._engine = self._engine, engine
        old.dispose()

    def dispose(self) -> None:
        super().dispose()  # type: ignore[misc]
        self._engine.dispose()


class HeldRunStorage(_SharedEngine, PostgresRunStorage):
    has_run_stats_index_cols = asked_once(PostgresRunStorage.has_run_stats_index_cols)
    has_backfill_id_column = asked_once(PostgresRunStorage.has_backfill_id_column)
    has_bulk_actions_selector_cols = asked_once(PostgresRunStorage.has_bulk_actions_selector_cols)
    has_bulk_action_job_name_column = asked_once(PostgresRunStorage.has_bulk_action_job_name_column)
    has_backfill_tags_table = asked_once(PostgresRunStorage.has_backfill_tags_table)


class HeldEventLogStorage(_SharedEngine, PostgresEventLogStorage):
    has_asset_key_index_cols = asked_once(PostgresEventLogStorage.has_asset_key_index_cols)


class HeldScheduleStorage(_SharedEngine, PostgresScheduleStorage):
    has_instigators_table = asked_once(PostgresScheduleStorage.has_instigators_table)
    has_secondary_index_table = asked_once(PostgresScheduleStorage.has_secondary_index_table)


class HeldPostgresStorage(DagsterStorage, ConfigurableClass):
    """dagster-postgres's storage whose three storages share one engine holding
    ``held_connections`` connections; configured as Dagster's ``storage: postgres:`` is, plus
    ``held_connections`` (default 2; 0 connects for each statement)."""

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True, held_connections: int = DEFAULT_HELD_CONNECTIONS,
                 inst_data: ConfigurableClassData | None = None, token_provider: Any = None):
        if held_connections < 0:
            raise ValueError(f"held_connections ({held_connections}) must be 0 (a connection per statement) or more")
        self._inst_data = inst_data
        self.held_connections = held_connections
        create = should_autocreate_tables and (postgres_url, TABLES) not in _SCHEMA_HAS
        self._run_storage = HeldRunStorage(postgres_url, create, token_provider=token_provider)
        self._event_log_storage = HeldEventLogStorage(postgres_url, create, token_provider=token_provider)
        self._schedule_storage = HeldScheduleStorage(postgres_url, create, token_provider=token_provider)
        if create:  # the constructors created what was missing, or raised
            _SCHEMA_HAS.add((postgres_url, TABLES))
        self.engine = shared_engine(postgres_url, token_provider, held_connections)
        for storage in (self._run_storage, self._event_log_storage, self._schedule_storage):
            storage.share(self.engine)
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        return {
            **pg_config(),
            "held_connections": Field(
                IntSource, is_required=False, default_value=DEFAULT_HELD_CONNECTIONS,
                description="Connections each process keeps open between statements (0: one for each statement, as dagster-postgres does).",
            ),
        }

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value: dict[str, Any]) -> HeldPostgresStorage:
        return HeldPostgresStorage(
            postgres_url=pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            held_connections=config_value.get("held_connections", DEFAULT_HELD_CONNECTIONS),
            inst_data=inst_data,
            token_provider=get_token_provider_from_config(config_value),
        )

    @property
    def event_log_storage(self) -> EventLogStorage:
        return self._event_log_storage

    @property
    def run_storage(self) -> RunStorage:
        return self._run_storage

    @property
    def schedule_storage(self) -> ScheduleStorage:
        return self._schedule_storage
