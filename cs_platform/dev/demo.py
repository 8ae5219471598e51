"""`make demo`: the product end to end on the embedded default.

Starts a private emulator (fast partition churn) with the bank database and a change stream, and a
real Dagster instance in ``.demo/dagster_home``. The bank opens its accounts and commits a few
hundred transfers before the stream's start: the first cut is the snapshot of the tables at the
start, which alone brings those rows. While a paced writer commits transfers, the real
sensor is evaluated every half second and the runs it requests execute in worker processes: one
run per partition token, each reading until its soft timeout, landing gzipped JSON lines under
``.demo/landing`` and then persisting the watermark. Meanwhile local Spark applies consistent cuts
at the low watermark to the Delta tables in ``.demo/lake/BankStream`` (changelog, one mirror per
table, manifest). At the end it checks the landed changes against the writer's commit log and
every cut's Accounts mirror against the bank invariant. Afterwards
``DAGSTER_HOME=$PWD/.demo/dagster_home dagster dev`` shows the runs and partitions.
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
from dagster import DagsterInstance

from cs_platform import settings
from cs_platform.changestream.metadata import PartitionMetadataStore, lineage, utc_now
from cs_platform.definitions import build_definitions
from cs_platform.dev.cutter import Cutter
from cs_platform.dev.embedded import STREAM, embedded_bank
from cs_platform.dev.oracle import committed, landed
from cs_platform.dev.sensor_loop import SensorLoop
from cs_platform.dev.workload import INITIAL_BALANCE, BankWorkload
from cs_platform.lake.engines import CutTables, history_statements
from cs_platform.lake.history_schema import HistoryPolicy
from cs_platform.lake.layout import stream_root
from cs_platform.lake.published import published_cut
from cs_platform.lake.snapshot import SnapshotResult
from cs_platform.lake.spark import delta_spark_session, warm_delta
from cs_platform.lake.stream_lake import Lake
from cs_platform.lake.types import utc
from cs_platform.landing.store import LandingStore
from cs_platform.stream.source import StreamSource

log = logging.getLogger("cs_platform.demo")
ACCOUNTS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=45, help="length of the read window")
    parser.add_argument("--writes-per-second", type=float, default=40)
    parser.add_argument("--before-start", type=int, default=300, help="transfers committed before the stream's start")
    parser.add_argument("--workdir", type=Path, default=Path(".demo"))
    parser.add_argument("--verbose", action="store_true", help="show library logs too (migrations, Spark, runs)")
    args = parser.parse_args()
    # The console shows the demo's own progress; libraries speak only when something is wrong.
    level = logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if not args.verbose:
        logging.disable(logging.INFO)  # Dagster's sensor logger sets its own level on every tick

    with embedded_bank(args.workdir) as bank:
        workload = BankWorkload(bank.bank)
        print(f"the bank opens {ACCOUNTS} accounts and commits {args.before_start} transfers before the stream starts")
        workload.run(accounts=ACCOUNTS, transfers=args.before_start, progress_every=0)
        spark_log = bank.workdir / "spark.log"
        print(f"starting Spark and warming Delta (the first run downloads Delta's jars from Maven Central; its log: {spark_log})")
        spark = delta_spark_session("cs_platform_demo", "local[2]", jvm_log=None if args.verbose else spark_log)
        warm_delta(spark, str((bank.workdir / "warm-up").resolve()))
        start = utc_now()
        end = start + timedelta(seconds=args.seconds)
        os.environ.update(
            CS_PLATFORM_START_TIMESTAMP=start.isoformat(),
            CS_PLATFORM_END_TIMESTAMP=end.isoformat(),
            CS_PLATFORM_SOFT_TIMEOUT_SECONDS="3",
            CS_PLATFORM_HEARTBEAT_MILLIS="500",
            CS_PLATFORM_HISTORY_TABLES="all",  # every version of every row, beside the mirrors
        )
        store = StreamSource.from_settings(os.environ, STREAM).metadata_store()  # what the runs' resources build
        writer = threading.Thread(
            target=workload.run_until, args=(end - timedelta(seconds=3), args.writes_per_second), kwargs={"accounts": 0}, daemon=True
        )
        print(f"reading {STREAM} from {start:%H:%M:%S} to {end:%H:%M:%S} while the writer commits transfers")
        writer.start()
        landing = LandingStore(settings.value(os.environ, "CS_PLATFORM_LANDING_ROOT"))
        lake = Lake(
            spark,
            stream_root(settings.value(os.environ, "CS_PLATFORM_LAKE_ROOT"), STREAM),
            untyped_policy=settings.value(os.environ, "CS_PLATFORM_UNTYPED_VALUES"),
            history=HistoryPolicy.parse(settings.value(os.environ, "CS_PLATFORM_HISTORY_TABLES")),
            append_inserts=settings.value(os.environ, "CS_PLATFORM_APPEND_INSERTS"),
        )
        cutter = Cutter(lake, landing, store, bank.target, STREAM, settings.value(os.environ, "CS_PLATFORM_CUT_INTERVAL_SECONDS")).start()
        with DagsterInstance.get() as instance, SensorLoop(build_definitions, instance, "bank_stream_partition_sensor", worker_log_level=level) as loop:
            progress = Progress(store, loop, workload, cutter)
            loop.run_until(progress.finished, timeout_s=args.seconds + 300)
        writer.join()
        print("every partition FINISHED: applying the final cut")
        cutter.stop()
        report(store, loop, workload, landing, start, end)
        report_snapshot(cutter.snapshot)
        report_cuts(lake, workload.committed[-1].commit_timestamp)
        report_readers(lake)


class Progress:
    """Prints a status line every few seconds while the loop runs; tells it when the stream is done."""

    def __init__(self, store: PartitionMetadataStore, loop: SensorLoop, workload: BankWorkload, cutter: Cutter) -> None:
        self.store, self.loop, self.workload, self.cutter = store, loop, workload, cutter
        self.last = 0.0

    def finished(self) -> bool:
        partitions = self.store.all()
        if time.monotonic() - self.last > 3:
            self.last = time.monotonic()
            states = Counter(p.state.value for p in partitions)
            low = self.store.low_watermark()
            lag = f"{(utc_now() - low).total_seconds():.1f}s" if low else "-"
            print(
                f"  {len(self.workload.committed):>5} committed | partitions {dict(sorted(states.items()))} | "
                f"runs {self.loop.stats.launched} launched, {self.loop.stats.succeeded} ok, "
                f"{self.loop.stats.failed} failed | low watermark lag {lag} | {len(self.cutter.results)} cuts"
            )
        return bool(partitions) and all(p.state.value == "FINISHED" for p in partitions)


def report(store: PartitionMetadataStore, loop: SensorLoop, workload: BankWorkload, landing: LandingStore, start, end) -> None:
    result = landed(landing, STREAM)
    expected = committed(workload, end, start)
    crossed = lineage(store.all())
    print(
        f"\n{sum(1 for t in workload.committed if start < t.commit_timestamp <= end)} transactions committed in the window; "
        f"{sum(result.mods.values())} mods landed in {result.files} files ({result.duplicates} duplicates); "
        f"{crossed.partitions} partitions ({crossed.splits} splits, {crossed.merges} merges); "
        f"{loop.stats.launched} runs launched by {loop.stats.ticks} sensor ticks, {loop.stats.failed} failed"
    )
    if result.mods != expected:
        raise SystemExit(f"MISMATCH: missing {expected - result.mods}, unexpected {result.mods - expected}")
    print("every committed mod landed: landing == source")


def report_snapshot(snapshot: SnapshotResult | None) -> None:
    if snapshot is None:
        raise SystemExit("MISSING: no cut took the snapshot at the stream's start")
    tables = ", ".join(f"{table} {rows} rows" for table, rows in snapshot.rows.items())
    print(f"\nsnapshot at the start {snapshot.cut:%H:%M:%S.%f}Z: {tables}; {snapshot.partitions} read partitions in {snapshot.seconds:.1f} s")


def report_cuts(lake: Lake, writes_ended: datetime) -> None:
    """Every cut of the manifest: the Accounts mirror must sum to 1000 x accounts. Says which cuts
    were published while the writer was still writing (live cuts, not only a final one)."""
    manifest = lake.spark.read.format("delta").load(lake.manifest_path)
    published = {utc(r.cut_timestamp): utc(r.committed_at) for r in manifest.select("cut_timestamp", "committed_at").distinct().collect()}
    cuts = lake.cuts()
    live = sum(1 for cut in cuts if published[cut] < writes_ended)
    print(f"\n{len(cuts)} consistent cuts in {lake.manifest_path}, {live} of them published while the writer was writing:")
    for cut in cuts:
        mirrors = lake.mirrors_at_cut(cut)
        balances = [r.Balance for r in mirrors["Accounts"].collect()] if "Accounts" in mirrors else []
        transfers = mirrors["Transfers"].count() if "Transfers" in mirrors else 0
        verdict = "ok" if sum(balances) == INITIAL_BALANCE * len(balances) else "BROKEN"
        when = "while writing" if published[cut] < writes_ended else "after the writes"
        print(f"  {cut:%H:%M:%S.%f}Z  {len(balances):>3} accounts, sum {sum(balances):>6}, {transfers:>5} transfers  {verdict}  ({when})")
        if verdict != "ok":
            raise SystemExit(f"cut {cut}: balances do not sum to {INITIAL_BALANCE} x accounts")
    lags = [(published[cut] - cut).total_seconds() for cut in cuts]
    print(f"cut lag (cut published - cut timestamp): max {max(lags):.1f}s, last {lags[-1]:.1f}s" if lags else "no cuts")
    print(f"open them together with Lake(spark, {lake.root!r}).mirrors_at_cut(cut)")


def report_readers(lake: Lake) -> None:
    """The bank at the latest cut as DuckDB reads it from the history tables, without Spark and
    without time travel: the statements are printed for the user to paste, and run here first."""
    tables = CutTables.of(lake.location, published_cut(lake.location))
    sql = history_statements(tables, "duckdb", latest=True) + 'SELECT count(*) AS accounts, sum("Balance") AS total FROM "Accounts";\n'
    with duckdb.connect() as con:
        accounts, total = con.execute(sql).fetchone()
    if total != INITIAL_BALANCE * accounts:
        raise SystemExit(f"DuckDB reads {accounts} accounts summing to {total} from the history tables")
    print("\nDuckDB reads the bank at the latest cut from the history tables, without Spark or time travel "
          f"({accounts} accounts, sum {total}); paste this into DuckDB {duckdb.__version__}:")
    print(sql)
    print(f"every mirror of any cut, for Spark SQL, DuckDB or Trino: .venv/bin/cs-platform-lake open {lake.root} --engine duckdb")


if __name__ == "__main__":
    main()
