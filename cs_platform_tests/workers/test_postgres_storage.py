"""cs_platform's PostgreSQL storage, on a real PostgreSQL server: an instance's three storages hold
their connections between statements, ask the catalog about the schema once, and let their
connections go when the instance is disposed; dagster-postgres's own storage, beside it, shows
what each of those saves."""

from __future__ import annotations

import sqlalchemy
from dagster import DagsterInstance, job
from dagster._core.test_utils import create_run_for_test
from sqlalchemy.engine import Engine
from sqlalchemy.pool import Pool

from cs_platform.dev.deadline import wait_until
from cs_platform.dev.postgres import postgres_server, query
from cs_platform.dev.stack import dagster_yaml
from cs_platform.workers.postgres_storage import HeldRunStorage


@job
def a_job():
    pass


class Statements:
    """Every connection any engine of this process opens, and every statement it sends to
    PostgreSQL's catalog (SQLAlchemy's reflection), from the moment it is entered."""

    def __init__(self) -> None:
        self.connects = 0
        self.catalog = 0

    def _connected(self, *_: object) -> None:
        self.connects += 1

    def _executing(self, _conn: object, _cursor: object, statement: str, *_: object) -> None:
        self.catalog += "pg_catalog" in statement

    def __enter__(self) -> Statements:
        sqlalchemy.event.listen(Pool, "connect", self._connected)
        sqlalchemy.event.listen(Engine, "before_cursor_execute", self._executing)
        return self

    def __exit__(self, *_: object) -> None:
        sqlalchemy.event.remove(Pool, "connect", self._connected)
        sqlalchemy.event.remove(Engine, "before_cursor_execute", self._executing)


def a_sensor_tick_and_a_run(instance: DagsterInstance) -> None:
    """What the daemon and a run do with the three storages, a few times over: a run and its
    events (run and event storage), listings of runs (the run queue, the sensors), a sensor's
    state (schedule storage)."""
    run = create_run_for_test(instance, job_name=a_job.name)
    for n in range(5):
        instance.report_engine_event(f"event {n}", run)
        instance.get_run_records(limit=5)
        instance.all_instigator_state()


def connections(url: str, what: str = "1") -> int:
    """How many connections the server's database has but this question's own, having asked
    ``what`` of each (``pg_terminate_backend(pid)`` ends them, as a server's restart would)."""
    return len(query(url, f"SELECT {what} FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"))


def test_an_instance_holds_its_connections_asks_the_catalog_once_and_lets_them_go_when_disposed(tmp_path):
    with postgres_server(tmp_path) as url:
        seen = {}
        for storage, held in (("held", 2), ("per statement", 0), ("held again", 2), ("dagster-postgres", None)):
            home = tmp_path / storage.replace(" ", "-")
            home.mkdir()
            (home / "dagster.yaml").write_text(dagster_yaml(url, held))
            with Statements() as made, DagsterInstance.from_config(str(home)) as instance:
                assert isinstance(instance.run_storage, HeldRunStorage) is (held is not None)
                a_sensor_tick_and_a_run(instance)  # the first time: the catalog asked, the connections opened
                with Statements() as again:
                    a_sensor_tick_and_a_run(instance)
                seen[storage] = {"made": (made.connects, made.catalog), "again": (again.connects, again.catalog)}
                if held:  # The server drops the held connections (a restart, a failover): they are replaced unmet.
                    connections(url, "pg_terminate_backend(pid)")
                    wait_until(lambda: connections(url) == 0, 60, f"{storage}: the server's backends ended", poll_s=0.2)
                    assert instance.get_run_records(limit=1)
            # Disposed, the instance holds nothing open: the server's backends end.
            wait_until(lambda: connections(url) == 0, 60, f"{storage}: the instance's connections closed", poll_s=0.2)
    print(seen)
    # Held: the second round opened no connection and asked the catalog nothing. An instance made
    # after another on the same database (it does not list the tables again) opened one in all.
    assert seen["held"]["again"] == seen["held again"]["again"] == (0, 0), seen
    assert seen["held again"]["made"][0] == 1, seen
    # A connection per statement: the same, less the holding.
    assert seen["per statement"]["again"][1] == 0 and seen["per statement"]["again"][0] >= 20, seen
    # dagster-postgres's own: a connection for each statement, the catalog asked at each listing and each run event.
    assert seen["dagster-postgres"]["again"][0] >= 20 and seen["dagster-postgres"]["again"][1] >= 10, seen
