"""The snapshot at a stream's start, against a plain single-process read of the same rows, in one run.

On a private emulator, loads ``--rows`` rows over two tables watched by a change stream, then reads
them all at one timestamp twice:

- **baseline**: the client's ``snapshot.execute_sql`` of each table, every row into Python, in this
  one process;
- **snapshot**: what the first lake run does (``changestream.table_snapshot`` + ``lake.snapshot``):
  Spanner splits each table's read into partitions, Spark tasks (local[2]) read them in one read-only
  transaction, and the rows become Delta mirrors. Measured twice: cold (the first Python workers
  start) and warm.

Prints ``name: value`` lines: ``baseline_rows_per_s``, ``snapshot_rows_per_s`` (warm; cold too) and
``snapshot/baseline``.

    .venv/bin/python bench/snapshot_throughput.py [--rows 200000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from decimal import Decimal
from pathlib import Path

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import utc_now
from cs_platform.dev.emulator import SpannerEmulator
from cs_platform.dev.workload import create_database, create_instance
from cs_platform.lake.snapshot import SnapshotResult
from cs_platform.lake.spark import delta_spark_session
from cs_platform.lake.stream_lake import Lake
from cs_platform.stream.lake_steps import take_snapshot

PROJECT, INSTANCE, DATABASE, STREAM = "bench-project", "bench-instance", "snapshot-bench", "Everything"
DDL = [
    "CREATE TABLE Customers (Id INT64 NOT NULL, Name STRING(MAX), Balance NUMERIC, Since TIMESTAMP) PRIMARY KEY (Id)",
    "CREATE TABLE Orders (Id INT64 NOT NULL, CustomerId INT64, Amount FLOAT64, Lines ARRAY<INT64>, Note JSON) PRIMARY KEY (Id)",
    f"CREATE CHANGE STREAM {STREAM} FOR ALL",
]
PER_COMMIT = 500  # rows per write: a change stream makes larger commits slow on the emulator


def load(database, rows: int) -> None:
    began, since = time.monotonic(), utc_now()
    for first in range(0, rows // 2, PER_COMMIT):
        ids = range(first, min(first + PER_COMMIT, rows // 2))
        with database.batch() as batch:
            batch.insert("Customers", ["Id", "Name", "Balance", "Since"], [[i, f"customer {i}", Decimal(i) / 100, since] for i in ids])
            batch.insert("Orders", ["Id", "CustomerId", "Amount", "Lines", "Note"], [[i, i, i * 1.5, [i, i + 1], '{"gift": false}'] for i in ids])
        if (first // PER_COMMIT + 1) % 40 == 0:
            print(f"  loaded {2 * (first + PER_COMMIT):,} rows ({time.monotonic() - began:.0f} s)", flush=True)


def baseline(database, at) -> tuple[int, float]:
    """Every row of both tables into Python, one process, one query per table."""
    began, rows = time.monotonic(), 0
    for table in ("Customers", "Orders"):
        with database.snapshot(read_timestamp=at) as snapshot:
            rows += sum(1 for _ in snapshot.execute_sql(f"SELECT * FROM {table}"))
    return rows, time.monotonic() - began


def snapshot(spark, target: SpannerTarget, at, root: Path) -> tuple[SnapshotResult, float]:
    began = time.monotonic()
    result = take_snapshot(Lake(spark, str(root)), target, STREAM, at)
    return result, time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000, help="rows over both tables")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="snapshot_bench_"))
    with SpannerEmulator(churn=False, log_path=work / "emulator.log") as emulator:
        target = SpannerTarget(PROJECT, INSTANCE, DATABASE, emulator.host)
        database = create_database(create_instance(target.client(), INSTANCE), DATABASE, DDL)
        print(f"loading {args.rows:,} rows into 2 tables on {emulator.host}", flush=True)
        load(database, args.rows)
        at = utc_now()
        spark = delta_spark_session("snapshot_bench", "local[2]", jvm_log=work / "spark.log")
        try:
            rows, base_s = baseline(database, at)
            cold, cold_s = snapshot(spark, target, at, work / "cold")
            warm, warm_s = snapshot(spark, target, at, work / "warm")
        finally:
            spark.stop()
    assert sum(cold.rows.values()) == sum(warm.rows.values()) == rows, (cold.rows, warm.rows, rows)
    print(f"rows: {rows}")
    print(f"read_partitions: {warm.partitions}")
    print(f"baseline_rows_per_s: {rows / base_s:.0f} ({base_s:.1f} s)")
    print(f"snapshot_rows_per_s_cold: {rows / cold_s:.0f} ({cold_s:.1f} s)")
    print(f"snapshot_rows_per_s: {rows / warm_s:.0f} ({warm_s:.1f} s)")
    print(f"snapshot/baseline: {base_s / warm_s:.2f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
