"""The run workers' held connections against a real PostgreSQL's max_connections, asked as they
start (``workers/connection_budget.py``): more than the server admits is refused within seconds,
naming the settings; more than is free beside the connections open now is a warning."""

import logging

import pytest
import sqlalchemy
from celery import Celery
from dagster import DagsterInstance

from cs_platform.dev.postgres import postgres_server
from cs_platform.dev.run_workers import BROKER_SETTING, use_run_workers
from cs_platform.dev.stack import dagster_yaml
from cs_platform.workers.connection_budget import check_connection_budget
from cs_platform.workers.worker import main

MAX_CONNECTIONS = 20  # PostgreSQL reserves 3 of them for superusers by default: 17 admitted
REFUSED = 9  # worker processes holding 2 each: 18, one more than admitted


def test_workers_that_could_never_hold_their_connections_are_refused_and_a_tight_fit_is_named(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(BROKER_SETTING, "redis://127.0.0.1:1/0")  # never reached: the worker stops before its broker
    monkeypatch.setattr(Celery, "worker_main", lambda *_args, **_kwargs: pytest.fail("the worker started its pool"))
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with postgres_server(tmp_path, settings={"max_connections": str(MAX_CONNECTIONS)}) as url:
        for held in (2, None):  # cs_platform's storage holding 2; dagster-postgres's, one to each storage
            (home / "dagster.yaml").write_text(dagster_yaml(url, held_connections=held))
            use_run_workers(home / "dagster.yaml")
            with pytest.raises(SystemExit) as refused:
                main(["--concurrency", str(REFUSED)])
            message = str(refused.value.code)
            assert "9 worker processes (--concurrency" in message and "18 in all" in message, message
            assert "max_connections is 20, 3 of them reserved" in message and "admits 17 clients" in message, message
            assert "held_connections" in message and "--connections per-statement" in message, message

        with DagsterInstance.get() as instance:  # dagster-postgres's storage, as written last
            assert check_connection_budget(instance, REFUSED, hold_connections=False) is None  # per statement: nothing held
            others = sqlalchemy.create_engine(url, pool_size=8)
            held = [others.connect() for _ in range(8)]  # the daemon's, the code servers', ...
            try:
                with caplog.at_level(logging.WARNING, logger="cs_platform.workers"):
                    budget = check_connection_budget(instance, 6, hold_connections=True)
                assert budget.wanted == 12 and budget.in_use >= 8 and budget.admitted == 17
                assert any("may fail with 'too many clients'" in r.getMessage() for r in caplog.records), caplog.text
            finally:
                for connection in held:
                    connection.close()
                others.dispose()
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="cs_platform.workers"):
                assert check_connection_budget(instance, 6, hold_connections=True).in_use < 8
            assert not caplog.records, caplog.text
