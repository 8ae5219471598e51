"""Peak memory of one reader run against the length of its read (10k, 100k and 1M mods), and of
one that reads a single transaction of 80,000 mods.

On a private emulator whose partitions never churn (so one partition holds all the data), a table
gets 1M rows in 500-row transactions; the commit times after 10k, 100k and 1M rows are the ends of
three streams' ranges (one metadata database each). For each, the initial partition is read here
(as the sensor's first run would) and then each child partition by the real reader job, in a fresh
process as Dagster's run launcher starts it. The peak RSS (ru_maxrss) of the run that read the data
is read when it exits. Baseline in the same run: 100k mods landed as one chunk (what every run did
before reads were landed in chunks of CS_PLATFORM_LANDING_CHUNK_MODS).

The transaction (``--transaction-mods``, default 80,000) inserts rows into eight tables, committed
after the sized reads' data: the emulator writes a change record per table, so the reader gets
eight records of 10,000 mods each, which a chunk of 20,000 mods cannot hold whole. Its read is
measured at the defaults, which land the transaction in pieces, and as one chunk (the baseline, in
the same run: what a run did before pieces, holding the transaction whole). The emulator takes
about 100 s to commit it (load 2). Cloud Spanner would refuse it as one commit (80,000 mutations
a commit, and an insert counts one per column); it is the largest number of mods the issue names.

    .venv/bin/python bench/reader_memory.py [--sizes 10000 100000 1000000] [--transaction-mods 80000]

Prints ``rss_mb_10k``, ``rss_mb_100k``, ``rss_mb_1m`` (goal: at most 200 for 10k: a reader run
loads neither PySpark nor Delta), ``rss_growth_1m_over_10k`` (goal: at most 1.5), the baseline
``rss_mb_100k_one_chunk``, each size's ``start_to_first_record_s`` (from the run process's
launch to the first record it read: imports, Dagster's run start, the first query), and
``rss_mb_80k_txn`` with ``rss_80k_txn_over_10k`` (goal: at most 1.5) and the baseline
``rss_mb_80k_txn_one_chunk``. The transaction's pieces are then ingested into a lake and cut at the
transaction's end (Spark local[2]): ``cut_80k_txn_tables_equal_source`` is 8 when each of the eight
mirrors holds exactly the rows its table holds at the cut (it stops with the first difference
otherwise), and ``cut_80k_txn_s`` says how long the ingest and the cut took.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from dagster import AssetKey, DagsterInstance

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN, PartitionMetadataStore, utc_now
from cs_platform.changestream.query import ChangeStreamQuery
from cs_platform.changestream.reader import PartitionReader
from cs_platform.dev.emulator import SpannerEmulator
from cs_platform.dev.workload import create_database, create_instance

PROJECT, INSTANCE, STREAM = "bench", "bench", "EventStream"
BATCH_TABLES = [f"Batch{i}" for i in range(8)]  # what the one large transaction writes
DDL = [
    "CREATE TABLE Events (Id INT64 NOT NULL, Kind STRING(32), Amount INT64, Note STRING(MAX)) PRIMARY KEY (Id)",
    *(f"CREATE TABLE {t} (Id INT64 NOT NULL, Kind STRING(32), Amount INT64, Note STRING(MAX)) PRIMARY KEY (Id)" for t in BATCH_TABLES),
    f"CREATE CHANGE STREAM {STREAM} FOR Events, {', '.join(BATCH_TABLES)}",
]
JOB, PARTITIONS, ASSET = "event_stream_read_partition", "event_stream_partitions", AssetKey(["event_stream", "landed_changes"])
ROWS_PER_COMMIT = 500
ONE_CHUNK = 1_000_000  # CS_PLATFORM_LANDING_CHUNK_MODS at its largest: the baselines' reads land as one chunk
RUN = """
import sys
from dagster import DagsterInstance
from cs_platform.definitions import build_definitions
job = build_definitions().resolve_job_def(sys.argv[1])
with DagsterInstance.get() as instance:
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    job.execute_in_process(instance=instance, partition_key=sys.argv[2], run_config=quiet)
"""


def write(database, total: int, marks: list[int]) -> dict[int, object]:
    """Insert ``total`` rows; returns the commit time after each mark (rows written so far)."""
    ends, began = {}, time.monotonic()
    for first in range(0, total, ROWS_PER_COMMIT):
        with database.batch() as batch:
            batch.insert("Events", ["Id", "Kind", "Amount", "Note"], [[i, "deposit", i, f"note {i}"] for i in range(first, first + ROWS_PER_COMMIT)])
        written = first + ROWS_PER_COMMIT
        if written in marks:
            ends[written] = batch.committed + timedelta(milliseconds=1)
        if written % 100_000 == 0:
            print(f"# wrote {written:,} rows in {time.monotonic() - began:.0f}s", flush=True)
    return ends


def write_transaction(database, mods: int):
    """One transaction of ``mods`` inserts over the batch tables; returns a time just after it."""
    began = time.monotonic()
    with database.batch() as batch:
        for i, table in enumerate(BATCH_TABLES):
            ids = range(i, mods, len(BATCH_TABLES))
            batch.insert(table, ["Id", "Kind", "Amount", "Note"], [[n, "batch", n, f"note {n}"] for n in ids])
    print(f"# committed one transaction of {mods:,} mods in {time.monotonic() - began:.0f}s", flush=True)
    return batch.committed + timedelta(milliseconds=1)


@dataclass(frozen=True)
class RunMeasure:
    peak_rss_mb: float
    mods: int
    start_to_first_record_s: float  # from the process's launch to the first record it read


def run_reader(key: str, env: dict, dagster: DagsterInstance) -> RunMeasure:
    """Run the reader job for partition ``key`` in a fresh process, as Dagster's run launcher does."""
    launched = time.time()
    process = subprocess.Popen([sys.executable, "-c", RUN, JOB, key], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise RuntimeError(f"the run of {key} failed: {process.stderr.read().decode()[-2000:]}")
    [record] = [r for r in dagster.fetch_materializations(ASSET, limit=100).records if r.asset_materialization.partition == key]
    meta = record.asset_materialization.metadata
    first_record = meta["read_started_at"].value + meta["first_response_seconds"].value
    return RunMeasure(usage.ru_maxrss / 1024, meta["mods"].value, first_record - launched)


def measure(instance, emulator, workdir: Path, start, end, name: str, chunk_mods: int | None) -> RunMeasure:
    """Read [start, end] with a fresh metadata database: the run that read the data (the largest)."""
    metadata = create_database(instance, name, [])
    store = PartitionMetadataStore(metadata, f"{STREAM}Metadata")
    store.initialize(start, end, 300_000)
    source = SpannerTarget(PROJECT, INSTANCE, "events", emulator.host).connect()
    reader = PartitionReader(source, ChangeStreamQuery(STREAM, heartbeat_millis=300_000), store)
    store.record_progress(INITIAL_PARTITION_TOKEN, reader.read(store.get(INITIAL_PARTITION_TOKEN), timedelta(hours=1)).watermark, True, owner=None)
    env = {
        **os.environ,
        "CS_PLATFORM_SPANNER_PROJECT": PROJECT,
        "CS_PLATFORM_SPANNER_INSTANCE": INSTANCE,
        "CS_PLATFORM_SPANNER_DATABASE": "events",
        "CS_PLATFORM_METADATA_DATABASE": name,
        "CS_PLATFORM_CHANGE_STREAMS": STREAM,
        "SPANNER_EMULATOR_HOST": emulator.host,
        "CS_PLATFORM_START_TIMESTAMP": start.isoformat(),
        "CS_PLATFORM_END_TIMESTAMP": end.isoformat(),
        "CS_PLATFORM_HEARTBEAT_MILLIS": "300000",
        "CS_PLATFORM_SOFT_TIMEOUT_SECONDS": "3600",
        "CS_PLATFORM_STALE_RUN_SECONDS": "7200",
        "CS_PLATFORM_LANDING_ROOT": str(workdir / name / "landing"),
        "DAGSTER_HOME": str(workdir / name / "dagster_home"),
    }
    if chunk_mods:
        env["CS_PLATFORM_LANDING_CHUNK_MODS"] = str(chunk_mods)
    (workdir / name / "dagster_home").mkdir(parents=True)
    keys = [p.key for p in store.schedulable()]
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as dagster:
        dagster.add_dynamic_partitions(PARTITIONS, keys)
        runs = [run_reader(key, env, dagster) for key in keys]
    data = max(runs, key=lambda run: run.mods)
    return RunMeasure(max(run.peak_rss_mb for run in runs), sum(run.mods for run in runs), data.start_to_first_record_s)


def check_cut(database, landing: Path, lake_root: Path, end) -> int:
    """Ingest the landed pieces of the transaction, cut at ``end``, and compare every mirror with its
    table read at the cut; the number of tables that are equal (it raises at the first that is not)."""
    from cs_platform.lake.spark import delta_spark_session
    from cs_platform.lake.stream_lake import Lake
    from cs_platform.landing.store import LandingStore

    spark = delta_spark_session("reader_memory_cut", "local[2]", jvm_log=lake_root.parent / "spark.log")
    try:
        lake = Lake(spark, str(lake_root))
        lake.changelog.ingest(LandingStore(str(landing)).files(STREAM))
        if not lake.apply_cut(end).applied:
            raise AssertionError(f"the cut at {end.isoformat()} applied nothing")
        mirrors = lake.mirrors_at_cut(lake.last_cut())
        for table in BATCH_TABLES:
            with database.snapshot(read_timestamp=lake.last_cut()) as snapshot:
                source = {tuple(r) for r in snapshot.execute_sql(f"SELECT Id, Kind, Amount, Note FROM {table}")}
            mirrored = {tuple(r) for r in mirrors[table].select("Id", "Kind", "Amount", "Note").collect()}
            if mirrored != source:
                raise AssertionError(f"{table}: the mirror has {len(mirrored)} rows, the source {len(source)}; {len(mirrored ^ source)} differ")
        return len(BATCH_TABLES)
    finally:
        spark.stop()


def label(n: int) -> str:
    return f"{n // 1_000_000}m" if n >= 1_000_000 else f"{n // 1_000}k"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--transaction-mods", type=int, default=80_000)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sizes = sorted(args.sizes)
    baseline_size = sizes[len(sizes) // 2]
    with SpannerEmulator(churn=False) as emulator, tempfile.TemporaryDirectory(prefix="reader_memory") as tmp:
        client = SpannerTarget(PROJECT, INSTANCE, "events", emulator.host).client()
        instance = create_instance(client, INSTANCE)
        database = create_database(instance, "events", DDL)
        start = utc_now()
        ends = write(database, sizes[-1], sizes)
        rss = {}
        for n in sizes:
            run = measure(instance, emulator, Path(tmp), start, ends[n], f"meta-{label(n)}", None)
            assert run.mods == n, f"the runs read {run.mods} mods, expected {n}"
            rss[n] = run.peak_rss_mb
            print(f"rss_mb_{label(n)}: {rss[n]:.0f}", flush=True)
            print(f"start_to_first_record_s_{label(n)}: {run.start_to_first_record_s:.2f}  # load {os.getloadavg()[0]:.1f}", flush=True)
        baseline = measure(instance, emulator, Path(tmp), start, ends[baseline_size], f"one-{label(baseline_size)}", ONE_CHUNK)
        assert baseline.mods == baseline_size
        one_chunk = baseline.peak_rss_mb
        txn, after = label(args.transaction_mods), ends[sizes[-1]]
        txn_end = write_transaction(database, args.transaction_mods)
        for name, chunk_mods in ((f"rss_mb_{txn}_txn", None), (f"rss_mb_{txn}_txn_one_chunk", ONE_CHUNK)):
            run = measure(instance, emulator, Path(tmp), after, txn_end, name.replace("_", "-"), chunk_mods)
            assert run.mods == args.transaction_mods, f"the runs read {run.mods} mods, expected {args.transaction_mods}"
            rss[name] = run.peak_rss_mb
            print(f"{name}: {run.peak_rss_mb:.0f}  # load {os.getloadavg()[0]:.1f}", flush=True)
        began = time.monotonic()
        pieces = Path(tmp) / f"rss-mb-{txn}-txn" / "landing"
        equal = check_cut(database, pieces, Path(tmp) / "lake", txn_end)
        print(f"cut_{txn}_txn_tables_equal_source: {equal}", flush=True)
        print(f"cut_{txn}_txn_s: {time.monotonic() - began:.0f}  # load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"rss_growth_{label(sizes[-1])}_over_{label(sizes[0])}: {rss[sizes[-1]] / rss[sizes[0]]:.2f}")
    print(f"rss_mb_{label(baseline_size)}_one_chunk: {one_chunk:.0f}  # baseline: the same read landed as one chunk")
    print(f"rss_one_chunk_over_chunked_{label(baseline_size)}: {one_chunk / rss[baseline_size]:.2f}")
    print(f"rss_{txn}_txn_over_{label(sizes[0])}: {rss[f'rss_mb_{txn}_txn'] / rss[sizes[0]]:.2f}")
    print(f"rss_{txn}_txn_one_chunk_over_pieces: {rss[f'rss_mb_{txn}_txn_one_chunk'] / rss[f'rss_mb_{txn}_txn']:.2f}")


if __name__ == "__main__":
    main()
