"""Commit → visible in a published consistent cut, under a real ``dagster dev`` (webserver + daemon).

For each configuration, on its own emulator and bank (what ``make dev`` starts): a writer commits
transfers at ``--writes-per-second``; ``dagster dev`` runs the partition sensor's reader runs and
the lake sensor's cuts on its own. Once the first cut is published (the lake is up), every commit
of the next ``--window`` seconds is measured: from its commit timestamp to the moment the bench
first sees a published cut at or after it (the manifest's last commit, polled every 0.5 s from the
Delta log). Prints ``freshness_p50_s`` / ``freshness_p95_s`` per configuration, and the ratio of
tuned to default measured in the same run. The hourly maintenance pass is scheduled away from the
window: it holds lake runs up while it runs (``bench/lake_cost.py`` prices it).

- **default**: the settings' defaults (reader runs of 600 s landing every 2 s, sensor 5 s; lake runs
  of 1800 s with an in-process Spark driver, cutting at most every 3 s when the watermark moved; lake sensor 10 s);
- **tuned**: ``TUNED`` below, the tuned settings of the batch-shaped product, for comparison: short
  reads, fast ticks, lake runs on a warm Spark Connect server, and one cut per lake run (what every
  lake run did before lake runs kept cutting);
- **oversubscribed**: the defaults with one run slot (``CS_PLATFORM_MAX_PARALLEL_READS=1``) for the
  emulator's two to three live partitions: reads must rotate (``CS_PLATFORM_YIELD_AFTER_SECONDS``);
- **relaunching**: the defaults with lake runs of 60 s, so the window holds a few hand-overs from one
  lake run to the next (the sensor's tick, a process and a Spark driver starting): what a commit
  waits when it falls into one, which the default lake run length makes rare;
- **unthrottled**: the defaults, but runs report every landing and every cut to Dagster
  (``CS_PLATFORM_REPORT_INTERVAL_SECONDS=0``, what they did before reports): the baseline of the
  storage figures;
- **mutable**: the defaults on Cloud Spanner's path: reads stream through the Cloud Spanner front
  (``dev/front/server.py``, in this process), which presents the stream as a MUTABLE_KEY_RANGE
  one (``dev/front/mutable_key_range.py``): proto records, partitions announced by start records and
  ended by end records, queries ending at most 25 minutes ahead;
- **p48_r16**: a busy Cloud Spanner stream: the front re-partitions the stream into 48 partitions by
  key range (``dev/front/key_ranges.py``: a move, a split or an end every 5 s, each transfer spread over
  the partitions that own its keys), read with 16 run slots
  (``CS_PLATFORM_MAX_PARALLEL_READS=16``), so reads rotate; prints ``lag_p95_s_p48_r16``;
- **p48_r48**: the same stream with a run slot for each partition (48), so reads do not rotate
  (a run lives its soft timeout), landing every 10 s: prints ``lag_p95_s_p48_r48``;
- **p200**: 200 partitions by key range through 64 slots (4 run worker pods of 16), landing every
  10 s: prints ``lag_p95_s_p200``.

Every configuration prints where the CPU went over the window, by part (``<name>_cpu_pct_<part>``,
percent of one core: the run workers, Redis, the lake runs' Spark, Dagster's processes, the
emulator, this bench's own process with the front and the writer; ``bench/process_tree.py`` samples
the bench's process tree every second), and ``<name>_cpu_pct_per_live_partition``: the product's
parts (workers, Redis, Spark, Dagster) per live partition, the cost of a partition at rest.

Every configuration prints its reader runs' peak memory (``peak_rss_mb`` of each read's
materialization: the run process's ru_maxrss).

``--storage postgres`` keeps the instance's runs and events on a PostgreSQL server of its own with
``make stack``'s storage (production's; ``dev.stack.dagster_yaml``) instead of ``make dev``'s SQLite,
its ``max_connections`` raised to hold every worker process's connections,
the server and its backends are a part of their own (``postgres``, one of the product's), and the
storage figures below, which read SQLite's files, are left out.

Every configuration also samples the stream's low watermark every second of the window
(``lag_p50_s`` / ``lag_p95_s``: now − low watermark, what holds every cut back), the live
partitions, the reader runs started per live partition-hour, and Dagster's storage per partition-day
(what the runs wrote: rows and step logs, ``bench/dagster_storage.py``) and the lake runs' per
stream-day (``dagster_storage_mb_per_stream_day_lake``).
The emulator renews every partition every ~20 s here, so a run is most of a partition's life and
those two figures are the emulator's churn; the same figures for a partition that lives all day
follow from the soft timeout (printed as ``..._long_lived``).

    .venv/bin/python bench/freshness.py [--window 180 --writes-per-second 10 --only NAME --launcher warm|default --storage sqlite|postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from dagster import AssetKey, DagsterInstance, RunsFilter

from cs_platform import settings as cs_settings
from cs_platform.changestream.metadata import PartitionMetadataStore, utc_now
from cs_platform.defs.resources import change_stream_resource_key, configured_resources
from cs_platform.dev.dagster_dev import start_dagster_dev
from cs_platform.dev.deadline import wait_until
from cs_platform.dev.embedded import STREAM, embedded_bank
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.front.server import SpannerFront
from cs_platform.dev.postgres import postgres_server
from cs_platform.dev.process_group import stop_process_group
from cs_platform.dev.run_workers import run_workers
from cs_platform.dev.spark_connect import spark_connect_server
from cs_platform.dev.stack import dagster_yaml
from cs_platform.dev.workload import BankWorkload
from cs_platform.lake.published import lake_location, latest_cut
from cs_platform.workers.postgres_storage import DEFAULT_HELD_CONNECTIONS
from dagster_storage import storage_of_runs
from process_tree import TreeSampler

# Short reads (a partition's records land every 5 s), fast ticks, a lake run (one cut) whenever the
# low watermark moved, lake runs on a warm Spark Connect server.
TUNED = {
    "CS_PLATFORM_LAKE_SOFT_TIMEOUT_SECONDS": "0",
    "CS_PLATFORM_SOFT_TIMEOUT_SECONDS": "5",
    "CS_PLATFORM_SENSOR_INTERVAL_SECONDS": "2",
    "CS_PLATFORM_LAKE_INTERVAL_SECONDS": "10",
    "CS_PLATFORM_HEARTBEAT_MILLIS": "500",
    "CS_PLATFORM_STALE_RUN_SECONDS": "120",
}
RUN_START_S = 6  # a reader run's start under the daemon (bench/orchestration_latency.py)
OVERSUBSCRIBED = {"CS_PLATFORM_MAX_PARALLEL_READS": "1"}
RELAUNCHING = {"CS_PLATFORM_LAKE_SOFT_TIMEOUT_SECONDS": "60"}
UNTHROTTLED = {"CS_PLATFORM_REPORT_INTERVAL_SECONDS": "0"}  # a Dagster event per landing and per cut, as before reports
MUTABLE = {"CS_PLATFORM_READ_MODE": "streaming"}
P48_R16 = {**MUTABLE, "CS_PLATFORM_MAX_PARALLEL_READS": "16"}
# A slot for each partition. At the default landing interval (2 s) 48 live runs land 24 times a
# second between them (a file, a metadata commit, a Dagster event each): on 2 cores runs then went
# 120 s without landing, were presumed dead and relaunched (lag p95 315 s). Landing every 10 s.
P48_R48 = {**MUTABLE, "CS_PLATFORM_MAX_PARALLEL_READS": "48", "CS_PLATFORM_LANDING_INTERVAL_SECONDS": "10"}
# 200 live partitions through 64 slots (4 run worker pods of 16, docs/production.md, "Kubernetes"):
# reads rotate through a third as many slots as partitions, as in p48_r16, landing every 10 s as in
# p48_r48.
P200 = {**MUTABLE, "CS_PLATFORM_MAX_PARALLEL_READS": "64", "CS_PLATFORM_LANDING_INTERVAL_SECONDS": "10"}
KEY_RANGE_CHANGE_EVERY = timedelta(seconds=5)  # p48_r16: a move, a split or an end of the 48 partitions' key ranges


@dataclass(frozen=True)
class Configuration:
    settings: dict[str, str]
    connect: bool = False  # lake runs on a warm Spark Connect server
    front: bool = False  # read through the Cloud Spanner front, presented as MUTABLE_KEY_RANGE
    partitions: int | None = None  # ... and re-partitioned by key range into this many partitions


CONFIGURATIONS = {
    "default": Configuration({}),
    "tuned": Configuration(TUNED, connect=True),
    "oversubscribed": Configuration(OVERSUBSCRIBED),
    "relaunching": Configuration(RELAUNCHING),
    "unthrottled": Configuration(UNTHROTTLED),
    "mutable": Configuration(MUTABLE, front=True),
    "p48_r16": Configuration(P48_R16, front=True, partitions=48),
    "p48_r48": Configuration(P48_R48, front=True, partitions=48),
    "p200": Configuration(P200, front=True, partitions=200),
}


class CutWatcher:
    """Polls the manifest's last commit and records when each published cut was first seen."""

    def __init__(self, lake_root: str) -> None:
        self.lake = lake_location(f"{lake_root}/{STREAM}")
        self.seen: list[tuple[float, datetime]] = []  # (epoch seconds, cut)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            latest = latest_cut(self.lake)
            if latest is None:
                continue
            cut = latest.cut
            if not self.seen or cut > self.seen[-1][1]:
                self.seen.append((time.time(), cut))

    def visible_at(self, commit: datetime) -> float | None:
        return next((seen for seen, cut in self.seen if cut >= commit), None)


class LagSampler:
    """Samples the low watermark's lag and the live partitions once a second (a thread)."""

    def __init__(self, store: PartitionMetadataStore) -> None:
        self.store = store
        self.samples: list[tuple[float, int]] = []  # (now - low watermark in seconds, live partitions)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            unfinished = self.store.unfinished()
            if unfinished.low_watermark is not None:
                self.samples.append(((utc_now() - unfinished.low_watermark).total_seconds(), len(unfinished.partitions)))


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


# What a live partition costs, by the processes of this bench's tree (matched on their command
# lines, first match wins): the product's parts, then the stand-ins for Cloud Spanner, and this
# bench's own process (the front, the writer, the watchers).
PRODUCT_PARTS = (
    ("bin/postgres", "postgres"),  # with --storage postgres: the server (before "dagster": a backend names its database)
    ("postgres: ", "postgres"),  # ... and its backends, which rename themselves
    ("cs_platform.workers.worker", "workers"),  # the warm reader runs (make dev's workers: python -m)
    ("cs-platform-run-worker", "workers"),  # ... as a deployment starts them
    ("redis-server", "redis"),
    ("org.apache.spark", "spark"),  # the lake runs' drivers
    ("dagster", "dagster"),  # dagster dev, its daemon, webserver and code server, runs it started
)
STAND_IN_PARTS = (("emulator_main", "emulator"), ("gateway_main", "emulator"))


def cpu_by_part(sampler: TreeSampler, bench_pid: int) -> dict[str, float]:
    """CPU-seconds of each part over the sampling, every process of the tree counted once."""
    found: dict[str, float] = Counter()
    for key, command in sampler.commands.items():
        if key[0] == bench_pid:
            part = "bench"
        else:
            part = next((label for marker, label in PRODUCT_PARTS + STAND_IN_PARTS if marker in command), "other")
        found[part] += sampler.last[key] - sampler.first[key]
    return found


def measure(name: str, configuration: Configuration, window: float, rate: float, work: Path, warm: bool, postgres: bool) -> dict[str, float]:
    """Run one configuration; returns its freshness figures. ``postgres``: the instance on a PostgreSQL
    server of its own with make stack's storage, instead of make dev's SQLite (no storage figures then:
    they read SQLite's files)."""
    with contextlib.ExitStack() as stack:
        reader_runs = cs_settings.value({**os.environ, **configuration.settings}, "CS_PLATFORM_MAX_PARALLEL_READS")
        bank = stack.enter_context(embedded_bank(work / name, partition_alive_seconds=20, reader_runs=reader_runs))  # restores the environment
        os.environ.update(configuration.settings)
        if postgres:  # dagster_yaml takes the reader runs at once from CS_PLATFORM_MAX_PARALLEL_READS, just set
            # Room for every worker process's held connections and the rest (the daemon, the code
            # server, the lake runs): the sum docs/production.md tells a deployment to make.
            room = {"max_connections": str(reader_runs * DEFAULT_HELD_CONNECTIONS + 50)}
            (bank.dagster_home / "dagster.yaml").write_text(dagster_yaml(stack.enter_context(postgres_server(work / name, settings=room))))
        front = None
        if configuration.front:
            front = stack.enter_context(SpannerFront(bank.emulator.host))
            if configuration.partitions:
                front.partition_by_key_range(bank.bank.database_id, STREAM, configuration.partitions, KEY_RANGE_CHANGE_EVERY)
            else:
                front.present_mutable(bank.bank.database_id, STREAM)
            os.environ["SPANNER_EMULATOR_HOST"] = front.host
        if configuration.connect:
            os.environ["CS_PLATFORM_SPARK_REMOTE"] = stack.enter_context(spark_connect_server(work / name / "spark-connect.log"))
        os.environ["CS_PLATFORM_START_TIMESTAMP"] = utc_now().isoformat()
        # Hourly maintenance holds lake runs up for a pass: keep it out of the measured window.
        os.environ["CS_PLATFORM_LAKE_MAINTENANCE_CRON"] = f"{(utc_now().minute + 30) % 60} * * * *"
        workload, stop_writing = BankWorkload(bank.bank), threading.Event()
        threading.Thread(target=workload.run_until, args=(utc_now() + timedelta(hours=1), rate, 20, stop_writing), daemon=True).start()
        watcher = CutWatcher(os.environ["CS_PLATFORM_LAKE_ROOT"])
        threading.Thread(target=watcher.run, daemon=True).start()
        store = configured_resources(os.environ)[change_stream_resource_key(STREAM)].metadata_store()
        soft_timeout_s = cs_settings.value(os.environ, "CS_PLATFORM_SOFT_TIMEOUT_SECONDS")
        sensor_interval_s = cs_settings.value(os.environ, "CS_PLATFORM_SENSOR_INTERVAL_SECONDS")
        report_interval_s = cs_settings.value(os.environ, "CS_PLATFORM_REPORT_INTERVAL_SECONDS")
        sampler = LagSampler(store)
        if warm:
            stack.enter_context(run_workers(work / name, bank.dagster_home, concurrency=reader_runs))
        log = stack.enter_context(open(work / name / "dagster_dev.log", "wb"))
        dev = start_dagster_dev(free_loopback_port(), log)
        started = time.monotonic()
        try:
            wait_until(lambda: watcher.seen, 600, f"{name}: the first published cut")
            print(f"{name}_first_cut_s: {time.monotonic() - started:.0f} (after dagster dev started)", flush=True)
            begin = utc_now()
            threading.Thread(target=sampler.run, daemon=True).start()
            processes = TreeSampler([os.getpid()], every_s=1.0, memory=False)
            threading.Thread(target=processes.run, daemon=True).start()
            time.sleep(window)
            sampler.stop.set()
            processes.stop.set()
            end = utc_now()
            measured = [c.commit_timestamp for c in list(workload.committed) if begin <= c.commit_timestamp <= end]
            wait_until(lambda: watcher.visible_at(measured[-1]) is not None, 600, f"{name}: a cut past the last measured commit")
            stop_writing.set()
            with DagsterInstance.get() as instance:
                lake_runs = instance.get_run_records(RunsFilter(job_name="bank_stream_lake"))
                reader_records = instance.get_run_records(RunsFilter(job_name="bank_stream_read_partition"))
                reader_runs = len(reader_records)
                reports = Counter(r.run_id for r in instance.fetch_observations(AssetKey(["bank_stream", "landed_changes"]), limit=10_000).records)
                window_runs = instance.get_runs_count(
                    RunsFilter(job_name="bank_stream_read_partition", created_after=begin, created_before=end)
                )
                reads = instance.fetch_materializations(AssetKey(["bank_stream", "landed_changes"]), limit=10_000).records
                peak_rss = [r.asset_materialization.metadata["peak_rss_mb"].value for r in reads if "peak_rss_mb" in r.asset_materialization.metadata]
            key_ranges = front.key_range_stats(bank.bank.database_id, STREAM) if configuration.partitions else None
        finally:
            watcher.stop.set()
            stop_process_group(dev)
        storage = None if postgres else sum(f.stat().st_size for f in bank.dagster_home.rglob("*") if f.is_file())
        written = None if postgres else storage_of_runs(bank.dagster_home, [r.dagster_run.run_id for r in [*reader_records, *lake_runs]])
    lags = sorted(watcher.visible_at(c) - c.timestamp() for c in measured)
    run_seconds = [r.end_time - r.start_time for r in lake_runs if r.end_time and r.start_time]
    figures = {"p50": statistics.median(lags), "p95": percentile(lags, 95), "max": lags[-1]}
    print(f"{name}_commits_measured: {len(lags)} (in {window:.0f} s)")
    print(f"{name}_cuts_published: {len(watcher.seen)}")
    seen = [at for at, _ in watcher.seen if begin.timestamp() <= at <= end.timestamp()]
    waits = [b - a for a, b in zip(seen, seen[1:])]
    print(f"{name}_longest_wait_between_cuts_s: " + (f"{max(waits):.1f} (in the window)" if waits else f"n/a ({len(seen)} cut(s) in the window)"))
    print(f"{name}_reader_runs: {reader_runs}")
    lengths = f", median {statistics.median(run_seconds):.1f} s each" if run_seconds else ""
    print(f"{name}_lake_runs: {len(lake_runs)} ({len(run_seconds)} ended{lengths})")
    if storage is not None:
        kb_per_run = storage / 1024 / (reader_runs + len(lake_runs))
        print(f"{name}_dagster_storage_kb_per_run: {kb_per_run:.0f} ({storage / 2**20:.1f} MB in all)")
    if peak_rss:
        print(f"{name}_reader_run_peak_rss_mb: {max(peak_rss):.0f} max, {statistics.median(peak_rss):.0f} median ({len(peak_rss)} runs)")
    if key_ranges:
        print(f"{name}_key_ranges: {key_ranges.moves} moves, {key_ranges.splits} splits, {key_ranges.ends} ends; "
              f"{key_ranges.spread_transactions} of {key_ranges.transactions} transactions spread, at most over {key_ranges.most_partitions_in_a_transaction}")
    print(f"{name}_freshness_p50_s: {figures['p50']:.1f}")
    print(f"{name}_freshness_p95_s: {figures['p95']:.1f}")
    print(f"{name}_freshness_max_s: {figures['max']:.1f}")
    lag = sorted(seconds for seconds, _ in sampler.samples)
    live = statistics.mean(count for _, count in sampler.samples)
    figures["lag_p95"] = percentile(lag, 95)
    print(f"{name}_live_partitions: {live:.1f} mean, {max(count for _, count in sampler.samples)} max")
    print(f"{name}_lag_p50_s: {statistics.median(lag):.1f}")
    print(f"{name}_lag_p95_s: {figures['lag_p95']:.1f}")
    print(f"{name}_load_average: {' / '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 minutes, as the case ended)")
    parts = cpu_by_part(processes, os.getpid())
    for part, cpu in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"{name}_cpu_pct_{part}: {100 * cpu / window:.1f} (of one core, over the window)")
    product = list(dict.fromkeys(label for _, label in PRODUCT_PARTS))  # each part once: two markers name the workers
    figures["cpu_pct_per_live_partition"] = 100 * sum(parts[label] for label in product) / window / live
    print(f"{name}_cpu_pct_per_live_partition: {figures['cpu_pct_per_live_partition']:.2f} "
          f"(the product's processes: {', '.join(product)}; not the emulator, the front or the writer)")
    runs_per_partition_hour = window_runs / live / (window / 3600)
    print(f"{name}_runs_per_partition_hour: {runs_per_partition_hour:.0f} ({window_runs} reader runs started in the window)")
    # A partition that lives all day: one run per soft timeout, plus its start and half a tick.
    long_lived = 3600 / (soft_timeout_s + RUN_START_S + sensor_interval_s / 2)
    print(f"{name}_runs_per_partition_hour_long_lived: {long_lived:.1f}")
    if storage is not None:  # and written: both read SQLite's files
        print(f"{name}_dagster_storage_mb_per_partition_day: {runs_per_partition_hour * 24 * kb_per_run / 1024:.0f} (reader runs only)")
        figures["storage_partition_day"] = partition_day_mb(written, reader_records, reports, long_lived, soft_timeout_s, report_interval_s, name)
        figures["storage_stream_day_lake"] = stream_day_lake_mb(written, lake_runs, name)
    return figures


def partition_day_mb(written, readers, reports: Counter, runs_per_hour: float, soft_timeout_s: float, report_interval_s: float, name: str) -> float:
    """Dagster storage of a partition that lives all day: ``runs_per_hour`` reader runs, each of
    the measured runs' fixed part (all but its landing reports) plus the reports a run reading
    ``soft_timeout_s`` records (its first landing, then one per report interval), each of the
    measured reports' size. The emulator's runs live ~20 s, so their own reports would understate it."""
    ended = [r.dagster_run.run_id for r in readers if r.end_time]
    kinds = ("ASSET_OBSERVATION",)
    report_bytes = sum(written[run].of(*kinds) for run in ended) / max(1, sum(reports[run] for run in ended))
    fixed = statistics.mean(written[run].total - written[run].of(*kinds) for run in ended)
    per_run = 1 + (soft_timeout_s // report_interval_s if report_interval_s else soft_timeout_s / 2)  # 0: a report per landing (every 2 s)
    mb = runs_per_hour * 24 * (fixed + per_run * report_bytes) / 2**20
    print(f"{name}_reader_run_storage_kb: {fixed / 1024:.1f} fixed + {per_run:.0f} reports x {report_bytes / 1024:.1f} (rows and step logs written, {len(ended)} runs)")
    print(f"{name}_dagster_storage_mb_per_partition_day_long_lived: {mb:.1f}", flush=True)
    return mb


def stream_day_lake_mb(written, lake_runs, name: str) -> float:
    """Dagster storage the stream's lake runs write in a day, from what the measured ones wrote per
    second of their lives (their starts and ends included: a run of the default 1,800 s pays
    them less often than the bench's, cut short by its end)."""
    lives = sum((r.end_time or time.time()) - r.start_time for r in lake_runs if r.start_time)
    # Less the failure the bench's end makes of the lake run it stops (a run of the default length
    # ends on its last cut instead).
    total = sum(written[r.dagster_run.run_id].total - written[r.dagster_run.run_id].of("PIPELINE_FAILURE", "STEP_FAILURE") for r in lake_runs)
    mb = total / lives * 86400 / 2**20
    print(f"{name}_lake_run_storage_kb: {total / 1024:.0f} in {lives:.0f} s of {len(lake_runs)} lake runs")
    print(f"{name}_dagster_storage_mb_per_stream_day_lake: {mb:.1f}", flush=True)
    return mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=180, help="seconds of commits measured per configuration (>= 180)")
    parser.add_argument("--writes-per-second", type=float, default=10)
    parser.add_argument("--only", choices=tuple(CONFIGURATIONS), action="append", help="measure this configuration (repeatable)")
    parser.add_argument("--launcher", choices=("warm", "default"), default="warm",
                        help="reader runs on warm run workers (make dev's, the default) or Dagster's default launcher")
    parser.add_argument("--storage", choices=("sqlite", "postgres"), default="sqlite",
                        help="the instance's runs and events on make dev's SQLite (the default) or on PostgreSQL with make stack's storage")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped (timeout, kill), it stops what it started
    work = Path(tempfile.mkdtemp(prefix="freshness_"))
    print(f"work directory: {work}; instance storage: {args.storage}")
    results = {}
    began = time.monotonic()
    for name in args.only or CONFIGURATIONS:
        case_began = time.monotonic()
        results[name] = measure(name, CONFIGURATIONS[name], args.window, args.writes_per_second, work, args.launcher == "warm", args.storage == "postgres")
        print(f"{name}_case_s: {time.monotonic() - case_began:.0f} (its start, first cut, window and last cut; with --only, cases run apart)", flush=True)
    print(f"freshness_bench_s: {time.monotonic() - began:.0f} ({len(results)} cases)")
    if "oversubscribed" in results:
        print(f"lag_p95_s_oversubscribed: {results['oversubscribed']['lag_p95']:.1f}")
        if "default" in results:
            print(f"oversubscribed_over_default_lag_p95: {results['oversubscribed']['lag_p95'] / results['default']['lag_p95']:.2f}")
    if {"default", "mutable"} <= set(results):
        print(f"mutable_freshness_p95_s: {results['mutable']['p95']:.1f} ({results['default']['p95']:.1f} default)")
        print(f"mutable_over_default_p95: {results['mutable']['p95'] / results['default']['p95']:.2f}")
    for busy in ("p48_r16", "p48_r48", "p200"):
        if busy in results:
            print(f"lag_p95_s_{busy}: {results[busy]['lag_p95']:.1f}" + (f" ({results['default']['lag_p95']:.1f} default)" if "default" in results else ""))
    if {"default", "unthrottled"} <= set(results) and args.storage == "sqlite":
        for figure in ("storage_partition_day", "storage_stream_day_lake"):
            print(f"unthrottled_over_default_{figure}: {results['unthrottled'][figure] / results['default'][figure]:.1f}")
    if {"default", "tuned"} <= set(results):
        print(f"freshness_p50_s: {results['tuned']['p50']:.1f} tuned, {results['default']['p50']:.1f} default")
        print(f"freshness_p95_s: {results['tuned']['p95']:.1f} tuned, {results['default']['p95']:.1f} default")
        print(f"tuned_over_default_p95: {results['tuned']['p95'] / results['default']['p95']:.2f}")


if __name__ == "__main__":
    main()
