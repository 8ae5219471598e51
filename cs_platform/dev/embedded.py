"""The embedded default: a private emulator with the bank database, and the environment that points
``cs_platform.definitions`` (and ``dagster dev``) at it. Used by ``make demo``, ``make dev`` and the
benchmarks."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from google.cloud.spanner_v1.database import Database

from cs_platform import settings
from cs_platform.changestream.connection import SpannerTarget
from cs_platform.dev.emulator import SpannerEmulator
from cs_platform.dev.workload import BANK_TABLES_DDL, bank_stream_ddl, create_database, create_instance

PROJECT, INSTANCE, STREAM = "demo-project", "demo-instance", "BankStream"

# At most one run per partition key (two readers of one token would race), reader runs capped at
# the run slots the sensor fills (CS_PLATFORM_MAX_PARALLEL_READS: a lower cap would leave slots the
# sensor counts on idle), and one lake run per stream (two cuts at once would race on the manifest).
# Queued runs are launched one at a time (the default): each launch starts a process that imports
# Dagster and the code location, and on two cores four launching threads starved the lake run
# (bench/freshness.py p48_r16: 9 cuts in 6 minutes, load 14).
DAGSTER_YAML = """\
run_queue:
  max_concurrent_runs: {all_runs}
  # When reads rotate, the partition sensor launches runs ahead to wait here: a slot a yielding
  # reader run frees goes to one of them at the queue's next pass (Dagster's default: every 5 s).
  dequeue_interval_seconds: 1
  tag_concurrency_limits:
    - key: cs_platform/reader
      limit: {reader_runs}
    - key: dagster/partition
      value:
        applyLimitPerUniqueValue: true
      limit: 1
    - key: cs_platform/lake
      value:
        applyLimitPerUniqueValue: true
      limit: 1
run_monitoring:
  enabled: true
  poll_interval_seconds: 10  # a run worker's process lost: its run FAILED within about 10 s, its partition relaunched
telemetry:
  enabled: false
nux:
  enabled: false  # no "Join the Dagster community" dialog over the page a person (or a screenshot) opens
"""


def instance_yaml(reader_runs: int | None = None) -> str:
    """The instance's dagster.yaml, ``reader_runs`` reader runs at once (default: the setting
    CS_PLATFORM_MAX_PARALLEL_READS), and beside them the stream's lake run, and room for
    maintenance, cleanup and backfills."""
    reader_runs = reader_runs or settings.value(os.environ, "CS_PLATFORM_MAX_PARALLEL_READS")
    return DAGSTER_YAML.format(reader_runs=reader_runs, all_runs=reader_runs + 6)


@dataclass(frozen=True)
class EmbeddedBank:
    emulator: SpannerEmulator
    bank: Database
    metadata: Database
    workdir: Path

    @property
    def landing_root(self) -> Path:
        return self.workdir / "landing"

    @property
    def lake_root(self) -> Path:
        return self.workdir / "lake"

    @property
    def target(self) -> SpannerTarget:
        return SpannerTarget(PROJECT, INSTANCE, "bank", self.emulator.host)

    @property
    def dagster_home(self) -> Path:
        return self.workdir / "dagster_home"


@contextmanager
def embedded_bank(workdir: Path, partition_alive_seconds: int = 3, reader_runs: int | None = None) -> Iterator[EmbeddedBank]:
    """Start the emulator, create the bank and metadata databases, start from clean landing and
    Dagster directories under ``workdir``, and point the environment at them until exit (the
    Spanner client itself prefers SPANNER_EMULATOR_HOST, so a stale value must not outlive it).
    The instance runs ``reader_runs`` reader runs at once (default: CS_PLATFORM_MAX_PARALLEL_READS)."""
    for stale in ("landing", "lake", "dagster_home"):
        shutil.rmtree(workdir / stale, ignore_errors=True)
    (workdir / "dagster_home").mkdir(parents=True)
    (workdir / "dagster_home" / "dagster.yaml").write_text(instance_yaml(reader_runs))
    saved = dict(os.environ)
    with SpannerEmulator(partition_alive_seconds=partition_alive_seconds, log_path=workdir / "emulator.log") as emulator:
        os.environ["SPANNER_EMULATOR_HOST"] = emulator.host
        client = SpannerTarget(PROJECT, INSTANCE, "bank", emulator.host).client()
        instance = create_instance(client, INSTANCE)
        setup = EmbeddedBank(
            emulator=emulator,
            bank=create_database(instance, "bank", BANK_TABLES_DDL + [bank_stream_ddl(STREAM)]),
            metadata=create_database(instance, "metadata", []),
            workdir=workdir,
        )
        os.environ.update(
            CS_PLATFORM_SPANNER_PROJECT=PROJECT,
            CS_PLATFORM_SPANNER_INSTANCE=INSTANCE,
            CS_PLATFORM_SPANNER_DATABASE="bank",
            CS_PLATFORM_METADATA_DATABASE="metadata",
            CS_PLATFORM_CHANGE_STREAMS=STREAM,
            SPANNER_EMULATOR_HOST=emulator.host,
            CS_PLATFORM_LANDING_ROOT=str(setup.landing_root.resolve()),
            CS_PLATFORM_LAKE_ROOT=str(setup.lake_root.resolve()),
            DAGSTER_HOME=str(setup.dagster_home.resolve()),
        )
        try:
            yield setup
        finally:
            os.environ.clear()
            os.environ.update(saved)
