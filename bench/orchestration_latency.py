"""Partition detection latency and per-run overhead, on a private emulator with the bank workload.

Two orchestrations of the same stream, one after the other, each for --seconds of churn:
  (loop)    cs_platform.dev.sensor_loop: the real sensor ticking every 0.5 s, runs executed by
            pre-started worker processes (what tests and `make demo` use);
  (daemon)  `dagster dev`: the Dagster daemon ticks the sensor every 5 s, the queued run coordinator
            and default run launcher start a fresh process per run (what production looks like).
Baseline, measured in the same run: a direct PartitionReader.read of a live partition, no Dagster.

Figures per orchestration (median / p90 over partitions or runs):
  detection: child partition CreatedAt -> its first run starts; and last parent FINISHED -> run starts
  overhead:  run launch (run created) -> first record of the change stream query in that run,
             against the baseline's call -> first record.

    .venv/bin/python bench/orchestration_latency.py [--seconds 45]
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import statistics
import threading
import time
from datetime import timedelta
from pathlib import Path

from dagster import DagsterInstance, RunsFilter

from cs_platform.changestream.metadata import PartitionMetadataStore, PartitionState, utc_now
from cs_platform.definitions import build_definitions
from cs_platform.defs.names import ChangeStreamNames
from cs_platform.defs.resources import ChangeStreamResource, SpannerResource
from cs_platform.dev.dagster_dev import start_dagster_dev
from cs_platform.dev.embedded import INSTANCE, PROJECT, STREAM, embedded_bank
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.process_group import stop_process_group
from cs_platform.dev.sensor_loop import SensorLoop
from cs_platform.dev.workload import BankWorkload

NAMES = ChangeStreamNames(STREAM)
JOB, ASSET = NAMES.job, NAMES.asset_key


def quantiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
    return f"{statistics.median(values):6.2f} / {p90:6.2f} s (n={len(values)})"


def figures(instance: DagsterInstance, store: PartitionMetadataStore) -> dict[str, list[float]]:
    partitions = {p.key: p for p in store.all()}
    by_token = {p.token: p for p in partitions.values()}
    runs = instance.get_run_records(RunsFilter(job_name=JOB))
    first_start: dict[str, float] = {}
    created: dict[str, float] = {}
    for r in runs:
        key = r.dagster_run.tags["dagster/partition"]
        if r.start_time:
            first_start[key] = min(first_start.get(key, r.start_time), r.start_time)
        created[r.dagster_run.run_id] = r.create_timestamp.timestamp()
    detection, after_parents = [], []
    for key, p in partitions.items():
        if p.is_initial or key not in first_start or p.created_at is None:
            continue
        detection.append(first_start[key] - p.created_at.timestamp())
        parents_done = max(by_token[t].finished_at.timestamp() for t in p.parent_tokens if t in by_token)
        after_parents.append(first_start[key] - parents_done)
    overhead = []
    for event in instance.fetch_materializations(ASSET, limit=10_000).records:
        meta = event.asset_materialization.metadata
        if "read_started_at" in meta and "first_response_seconds" in meta and event.run_id in created:
            first_record = meta["read_started_at"].value + meta["first_response_seconds"].value
            overhead.append(first_record - created[event.run_id])
    return {"detection": detection, "after_parents": after_parents, "overhead": overhead}


def baseline(store: PartitionMetadataStore, samples: int = 10) -> list[float]:
    """Direct reads of a live partition: call -> first record, no Dagster."""
    resource = ChangeStreamResource(
        spanner=SpannerResource(project_id=PROJECT, instance_id=INSTANCE, database_id="bank", emulator_host=os.environ["SPANNER_EMULATOR_HOST"]),
        stream_name=STREAM,
        metadata_database_id="metadata",
        heartbeat_millis=500,
    )
    reader = resource.reader()
    times = []
    for _ in range(samples):
        live = [p for p in store.all() if p.state is not PartitionState.FINISHED and not p.is_initial]
        if not live:
            time.sleep(0.5)
            continue
        called = time.time()
        batch = reader.read(live[0], timedelta(seconds=1))
        if batch.first_response_s is not None:
            times.append(batch.read_started_at.timestamp() + batch.first_response_s - called)
    return times


def run_loop(seconds: int) -> dict[str, list[float]]:
    with embedded_bank(Path(".demo/bench_loop")) as bank:
        start = utc_now()
        os.environ.update(
            CS_PLATFORM_START_TIMESTAMP=start.isoformat(),
            CS_PLATFORM_END_TIMESTAMP=(start + timedelta(seconds=seconds)).isoformat(),
            CS_PLATFORM_SOFT_TIMEOUT_SECONDS="3",
            CS_PLATFORM_HEARTBEAT_MILLIS="500",
        )
        store = PartitionMetadataStore(bank.metadata, f"{STREAM}Metadata")
        workload = BankWorkload(bank.bank)
        threading.Thread(target=workload.run_until, args=(start + timedelta(seconds=seconds - 3), 30), daemon=True).start()
        with DagsterInstance.get() as instance, SensorLoop(build_definitions, instance, NAMES.sensor, tick_interval_s=0.5) as loop:  # as measured in docs/benchmarks.md
            loop.run_until(lambda: all(p.state is PartitionState.FINISHED for p in store.all()), seconds + 300)
            return figures(instance, store)


def run_daemon(seconds: int) -> tuple[dict, list[float]]:
    with embedded_bank(Path(".demo/bench_daemon")) as bank:
        start = utc_now()
        os.environ.update(
            CS_PLATFORM_START_TIMESTAMP=start.isoformat(),
            CS_PLATFORM_SOFT_TIMEOUT_SECONDS="5",
            CS_PLATFORM_HEARTBEAT_MILLIS="500",
            CS_PLATFORM_SENSOR_INTERVAL_SECONDS="5",
        )
        os.environ.pop("CS_PLATFORM_END_TIMESTAMP", None)
        store = PartitionMetadataStore(bank.metadata, f"{STREAM}Metadata")
        workload = BankWorkload(bank.bank)
        threading.Thread(target=workload.run_until, args=(start + timedelta(seconds=seconds + 60), 20), daemon=True).start()
        port = free_loopback_port()
        log = open(bank.workdir / "dagster_dev.log", "wb")
        dev = start_dagster_dev(port, log)
        try:
            time.sleep(seconds)
            base = baseline(store)
            with DagsterInstance.get() as instance:
                result = figures(instance, store)
        finally:
            stop_process_group(dev)
        return result, base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=45)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped (timeout, kill), it stops what it started
    logging.basicConfig(level=logging.WARNING)
    loop = run_loop(args.seconds)
    daemon, base = run_daemon(args.seconds + 30)
    print(f"\nbaseline  direct PartitionReader.read call -> first record: {quantiles(base)}")
    for name, result in (("loop", loop), ("daemon", daemon)):
        print(f"{name:<8}  child CREATED -> run starts:              {quantiles(result['detection'])}")
        print(f"{name:<8}  last parent FINISHED -> run starts:       {quantiles(result['after_parents'])}")
        print(f"{name:<8}  run launched -> first record:             {quantiles(result['overhead'])}")
        if base and result["overhead"]:
            ratio = statistics.median(result["overhead"]) / statistics.median(base)
            print(f"{name:<8}  overhead ratio (median run / median direct read): {ratio:.1f}x")


if __name__ == "__main__":
    main()
