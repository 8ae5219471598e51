"""`make stack`: the production shape on this machine, every part real and on loopback.

- Spanner: the emulator with the bank database (partitions churn every 20 s);
- object storage: landing and lake on ``gs://`` through a GCS emulator (fake-gcs-server);
- Spark: a standalone cluster (a master and a worker); each lake run's driver sends its tasks,
  the snapshot's reads included, to executor processes;
- Dagster: an instance on PostgreSQL, with ``dagster-daemon`` (sensors, run queue with the tag
  concurrency limits, run monitoring), ``dagster-webserver`` and the code server they share
  (``dagster code-server start``: ``dev.code_server``) as separate processes;
- run workers: reader runs execute in warm worker processes (``cs-platform-run-worker``), sent
  there through a private Redis (``dev.run_workers``); lake and other runs as the default launcher
  starts them.

Only the configuration differs from `make dev`: ``STORAGE_EMULATOR_HOST``, ``CS_PLATFORM_*_ROOT``,
``CS_PLATFORM_SPARK_MASTER``, ``CS_PLATFORM_RUN_BROKER`` and ``dagster.yaml``'s storage and run launcher. The test of this stack
(``test_production_stack``) runs the same :func:`production_stack`.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

from cs_platform.changestream.metadata import utc_now
from cs_platform.dev.code_server import code_server
from cs_platform.dev.dagster_dev import REPO
from cs_platform.dev.embedded import EmbeddedBank, embedded_bank, instance_yaml
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.environment import environment_set
from cs_platform.dev.gcs_emulator import create_bucket, gcs_emulator
from cs_platform.dev.metrics_server import metrics_server
from cs_platform.dev.postgres import postgres_server
from cs_platform.dev.process_group import await_listening, launch, stop_process_group
from cs_platform.dev.run_workers import RunWorkers, run_workers
from cs_platform.dev.serve import DEV_SETTINGS
from cs_platform.dev.spark_cluster import spark_cluster
from cs_platform.dev.workload import BankWorkload, start_after
from cs_platform.storage.gcs import EMULATOR_SETTING
from cs_platform.workers.postgres_storage import DEFAULT_HELD_CONNECTIONS

log = logging.getLogger("cs_platform.stack")

BUCKET = "cs-platform"


class Daemon:
    """``dagster-daemon`` as a process of our own, which a test may restart mid-run."""

    def __init__(self, log: Path, workspace: Path) -> None:
        self.log, self.workspace = log, workspace
        self.process = self._start()

    def _start(self) -> subprocess.Popen:
        return launch([sys.executable, "-m", "dagster._daemon", "run", "-w", str(self.workspace)], self.log, cwd=REPO)

    def restart(self) -> None:
        stop_process_group(self.process)
        self.process = self._start()

    def stop(self) -> None:
        stop_process_group(self.process)


@dataclass(frozen=True)
class Stack:
    bank: EmbeddedBank
    gcs_endpoint: str
    spark_master: str
    postgres_url: str
    webserver_port: int
    webserver_process: subprocess.Popen
    daemon: Daemon
    workers: RunWorkers
    workload: BankWorkload  # its commit log: the accounts and transfers before the start, then any later
    start: datetime  # the stream's start: the snapshot's time
    spark_events: Path  # Spark's event logs of the lake runs (which executor ran which task)
    webserver_log: Path
    metrics: str  # the URL Prometheus scrapes (cs-platform-metrics)

    @property
    def webserver(self) -> str:
        return f"http://127.0.0.1:{self.webserver_port}"

    def await_webserver(self, timeout_s: float = 180) -> None:
        await_listening(self.webserver_process, self.webserver_port, self.webserver_log, "dagster-webserver", timeout_s)

    @property
    def landing_root(self) -> str:
        return f"gs://{BUCKET}/landing"

    @property
    def lake_root(self) -> str:
        return f"gs://{BUCKET}/lake"


def dagster_yaml(postgres_url: str, held_connections: int | None = DEFAULT_HELD_CONNECTIONS) -> str:
    """make dev's instance settings, with every storage (runs, events, schedules) on PostgreSQL:
    cs_platform's storage holding ``held_connections`` connections per process
    (cs_platform.workers.postgres_storage), or with None dagster-postgres's own (``storage: postgres:``,
    what Dagster's Helm chart writes)."""
    if held_connections is None:
        return f"{instance_yaml()}storage:\n  postgres:\n    postgres_url: {postgres_url}\n"
    return (
        f"{instance_yaml()}storage:\n  custom:\n    module: cs_platform.workers.postgres_storage\n    class: HeldPostgresStorage\n"
        f"    config:\n      postgres_url: {postgres_url}\n      held_connections: {held_connections}\n"
    )


@contextmanager
def production_stack(
    workdir: Path, accounts: int = 20, before_start: int = 300, gcs: str | None = None, partition_alive_seconds: int = 20,
    metrics_port: int | None = None,
) -> Iterator[Stack]:
    """Start every part, open ``accounts`` accounts and commit ``before_start`` transfers, start the
    stream after them (its first cut is their snapshot), point the environment at the parts (for the
    daemon, the webserver and their run processes), and stop each by its PID on exit. ``gcs``: a
    GCS emulator that is already running (the tests'), instead of a new one; partitions churn every
    ``partition_alive_seconds`` (the emulator's default is 20); the metrics exporter serves on
    ``metrics_port`` (default CS_PLATFORM_METRICS_PORT)."""
    with ExitStack() as stack:
        bank = stack.enter_context(embedded_bank(workdir, partition_alive_seconds=partition_alive_seconds))
        workload = BankWorkload(bank.bank)
        workload.run(accounts=accounts, transfers=before_start, progress_every=0)
        start = start_after(workload.committed[-1].commit_timestamp) if workload.committed else utc_now()
        if gcs is None:
            gcs = stack.enter_context(gcs_emulator(workdir / "gcs", buckets=(BUCKET,)))
        else:
            create_bucket(gcs, BUCKET)
        master = stack.enter_context(spark_cluster(workdir / "spark"))
        postgres = stack.enter_context(postgres_server(workdir))
        (bank.dagster_home / "dagster.yaml").write_text(dagster_yaml(postgres))
        # Spark's own way to add settings to every driver: spark-defaults.conf in SPARK_CONF_DIR.
        # Here: event logs, so the test (and a person, in the history they keep) sees the executors' work,
        # added to the settings of a SPARK_CONF_DIR the environment already names (kept, not replaced).
        events = workdir / "spark-events"
        events.mkdir(parents=True, exist_ok=True)
        conf_dir = workdir / "spark-conf"
        shutil.rmtree(conf_dir, ignore_errors=True)  # an earlier stack's, in the same workdir
        if os.environ.get("SPARK_CONF_DIR"):
            shutil.copytree(os.environ["SPARK_CONF_DIR"], conf_dir)
        conf_dir.mkdir(exist_ok=True)
        with open(conf_dir / "spark-defaults.conf", "a") as defaults:
            defaults.write(
                f"\nspark.eventLog.enabled true\nspark.eventLog.dir file://{events.resolve()}\n"
                "spark.eventLog.compress false\nspark.eventLog.rolling.enabled false\n"  # one JSON file per run
            )
        settings = {
            "SPARK_CONF_DIR": str(conf_dir.resolve()),
            EMULATOR_SETTING: gcs,
            "CS_PLATFORM_LANDING_ROOT": f"gs://{BUCKET}/landing",
            "CS_PLATFORM_LAKE_ROOT": f"gs://{BUCKET}/lake",
            "CS_PLATFORM_SPARK_MASTER": master,
            "CS_PLATFORM_START_TIMESTAMP": start.isoformat(),
            **DEV_SETTINGS,
        }
        stack.enter_context(environment_set(settings))  # for the daemon, the webserver and their run processes
        # The daemon first: it ticks while the webserver loads (Stack.await_webserver waits for that).
        workers = stack.enter_context(run_workers(workdir, bank.dagster_home))
        workspace = stack.enter_context(code_server(workdir)).workspace  # the daemon's and the webserver's, as in production
        daemon = Daemon(workdir / "dagster-daemon.log", workspace)
        stack.callback(daemon.stop)
        port = free_loopback_port()
        webserver = launch(
            [sys.executable, "-m", "dagster_webserver", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(port)],
            workdir / "dagster-webserver.log", cwd=REPO,
        )
        stack.callback(stop_process_group, webserver)
        metrics = stack.enter_context(metrics_server(workdir / "metrics.log", metrics_port))
        yield Stack(bank, gcs, master, postgres, port, webserver, daemon, workers, workload, start, events, workdir / "dagster-webserver.log", metrics)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes-per-second", type=float, default=10)
    parser.add_argument("--workdir", type=Path, default=Path(".stack"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("google").setLevel(logging.WARNING)
    print("starting the Spanner emulator, a GCS emulator, a Spark cluster, PostgreSQL, Redis, run workers, a code server, dagster-webserver and dagster-daemon ...")
    with production_stack(args.workdir) as stack:
        stack.await_webserver()
        writer = stack.workload.run_until
        threading.Thread(target=writer, args=(utc_now() + timedelta(days=1), args.writes_per_second), kwargs={"accounts": 0}, daemon=True).start()
        print(
            f"\nDagster UI:     {stack.webserver}\n"
            f"Spark master:   {stack.spark_master}\n"
            f"GCS emulator:   {stack.gcs_endpoint} (landing {stack.landing_root}, lake {stack.lake_root})\n"
            f"PostgreSQL:     {stack.postgres_url}\n"
            f"Metrics:        {stack.metrics} (Prometheus; docs/operations.md)\n"
            f"Spanner:        {stack.bank.emulator.host} (a writer commits {args.writes_per_second:g} transfers a second)\n"
            f"logs in {args.workdir}/; Ctrl-C stops everything\n"
        )
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the parts on SIGTERM too
        try:
            stack.daemon.process.wait()
            print(f"dagster-daemon exited with {stack.daemon.process.returncode}: see {args.workdir}/dagster-daemon.log")
        except KeyboardInterrupt:
            print("stopping ...")


if __name__ == "__main__":
    main()
