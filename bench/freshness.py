"""Commit → visible in a published consistent cut, under a real ``dagster dev`` (webserver + daemon).

For each configuration, on its own emulator and bank (what ``make dev`` starts): a writer commits
transfers at ``--writes-per-second``; ``dagster dev`` runs the partition sensor's reader runs and
the lake sensor's cuts on its own. Once the first cut is published (the lake is up), every commit
of the next ``--window`` seconds is measured: from its commit timestamp to the moment the bench
first sees a published cut at or after it (the manifest's last commit, polled every 0.5 s from the
Delta log). Prints ``freshness_p50_s`` / ``freshness_p95_s`` per configuration, and the ratio of
tuned to default measured in the same run. The hourly maintenance pass is scheduled away from the
window: it holds lake runs up while it runs (``bench/lake_cost.py`` prices it).

- **default**: the settings' defaults (soft timeout 60 s, sensor 30 s, lake sensor 30 s, an
  in-process Spark driver per lake run);
- **tuned**: ``TUNED`` below (short reads, fast ticks, lake runs on a warm Spark Connect server).

    .venv/bin/python bench/freshness.py [--window 180 --writes-per-second 10]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

from dagster import DagsterInstance, RunsFilter

from cs_platform.changestream.metadata import utc_now
from cs_platform.dev.dagster_dev import start_dagster_dev
from cs_platform.dev.deadline import wait_until
from cs_platform.dev.embedded import STREAM, embedded_bank
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.process_group import stop_process_group
from cs_platform.dev.spark_connect import spark_connect_server
from cs_platform.dev.workload import BankWorkload
from cs_platform.lake.cuts import ROOT_SETTING, PublishedCut
from cs_platform.lake.delta import DeltaPath
from cs_platform.landing.location import Location

# Short reads (a partition's records land every 5 s), fast ticks, a cut whenever the low watermark
# moved, lake runs on a warm Spark Connect server.
TUNED = {
    "CS_PLATFORM_SOFT_TIMEOUT_SECONDS": "5",
    "CS_PLATFORM_SENSOR_INTERVAL_SECONDS": "2",
    "CS_PLATFORM_LAKE_INTERVAL_SECONDS": "10",
    "CS_PLATFORM_HEARTBEAT_MILLIS": "500",
    "CS_PLATFORM_STALE_RUN_SECONDS": "120",
}


class CutWatcher:
    """Polls the manifest's last commit and records when each published cut was first seen."""

    def __init__(self, lake_root: str) -> None:
        self.manifest = DeltaPath.under(Location(f"{lake_root}/{STREAM}", ROOT_SETTING), "manifest")
        self.seen: list[tuple[float, datetime]] = []  # (epoch seconds, cut)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            recorded = self.manifest.last_commit_metadata()
            if recorded is None:
                continue
            cut = PublishedCut.from_json(recorded).cut
            if not self.seen or cut > self.seen[-1][1]:
                self.seen.append((time.time(), cut))

    def visible_at(self, commit: datetime) -> float | None:
        return next((seen for seen, cut in self.seen if cut >= commit), None)


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def measure(name: str, settings: dict[str, str], connect: bool, window: float, rate: float, work: Path) -> dict[str, float]:
    """Run one configuration; returns its freshness figures."""
    with contextlib.ExitStack() as stack:
        bank = stack.enter_context(embedded_bank(work / name, partition_alive_seconds=20))
        os.environ.update(settings)
        if connect:
            os.environ["CS_PLATFORM_SPARK_REMOTE"] = stack.enter_context(spark_connect_server(work / name / "spark-connect.log"))
        os.environ["CS_PLATFORM_START_TIMESTAMP"] = utc_now().isoformat()
        # Hourly maintenance holds lake runs up for a pass: keep it out of the measured window.
        os.environ["CS_PLATFORM_LAKE_MAINTENANCE_CRON"] = f"{(utc_now().minute + 30) % 60} * * * *"
        workload, stop_writing = BankWorkload(bank.bank), threading.Event()
        threading.Thread(target=workload.run_until, args=(utc_now() + timedelta(hours=1), rate, 20, stop_writing), daemon=True).start()
        watcher = CutWatcher(os.environ["CS_PLATFORM_LAKE_ROOT"])
        threading.Thread(target=watcher.run, daemon=True).start()
        log = stack.enter_context(open(work / name / "dagster_dev.log", "wb"))
        dev = start_dagster_dev(free_loopback_port(), log)
        started = time.monotonic()
        try:
            wait_until(lambda: watcher.seen, 600, f"{name}: the first published cut")
            print(f"{name}_first_cut_s: {time.monotonic() - started:.0f} (after dagster dev started)", flush=True)
            begin = utc_now()
            time.sleep(window)
            end = utc_now()
            measured = [c.commit_timestamp for c in list(workload.committed) if begin <= c.commit_timestamp <= end]
            wait_until(lambda: watcher.visible_at(measured[-1]) is not None, 600, f"{name}: a cut past the last measured commit")
            stop_writing.set()
            with DagsterInstance.get() as instance:
                lake_runs = instance.get_run_records(RunsFilter(job_name="bank_stream_lake"))
                reader_runs = instance.get_runs_count(RunsFilter(job_name="bank_stream_read_partition"))
        finally:
            watcher.stop.set()
            stop_process_group(dev)
        storage = sum(f.stat().st_size for f in bank.dagster_home.rglob("*") if f.is_file())
    lags = sorted(watcher.visible_at(c) - c.timestamp() for c in measured)
    run_seconds = [r.end_time - r.start_time for r in lake_runs if r.end_time and r.start_time]
    figures = {"p50": statistics.median(lags), "p95": percentile(lags, 95), "max": lags[-1]}
    print(f"{name}_commits_measured: {len(lags)} (in {window:.0f} s)")
    print(f"{name}_cuts_published: {len(watcher.seen)}")
    print(f"{name}_reader_runs: {reader_runs}")
    print(f"{name}_lake_runs: {len(lake_runs)} (median {statistics.median(run_seconds):.1f} s each)")
    print(f"{name}_dagster_storage_kb_per_run: {storage / 1024 / (reader_runs + len(lake_runs)):.0f} ({storage / 2**20:.1f} MB in all)")
    print(f"{name}_freshness_p50_s: {figures['p50']:.1f}")
    print(f"{name}_freshness_p95_s: {figures['p95']:.1f}")
    print(f"{name}_freshness_max_s: {figures['max']:.1f}", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=180, help="seconds of commits measured per configuration (>= 180)")
    parser.add_argument("--writes-per-second", type=float, default=10)
    parser.add_argument("--only", choices=("default", "tuned"), help="measure one configuration")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="freshness_"))
    print(f"work directory: {work}")
    results = {}
    if args.only in (None, "default"):
        results["default"] = measure("default", {}, False, args.window, args.writes_per_second, work)
    if args.only in (None, "tuned"):
        results["tuned"] = measure("tuned", TUNED, True, args.window, args.writes_per_second, work)
    if len(results) == 2:
        print(f"freshness_p50_s: {results['tuned']['p50']:.1f} tuned, {results['default']['p50']:.1f} default")
        print(f"freshness_p95_s: {results['tuned']['p95']:.1f} tuned, {results['default']['p95']:.1f} default")
        print(f"tuned_over_default_p95: {results['tuned']['p95'] / results['default']['p95']:.2f}")


if __name__ == "__main__":
    main()
