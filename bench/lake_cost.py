"""What a cut costs as the lake grows, against a plain Delta append of the same rows in the same run.

Synthesizes landing files shaped like the reader's (one row per mod, transactions of 10 mods, one
table ``Accounts``), then:

- **growth**: ``--cuts`` cuts of ``--mods`` mods each (updates of existing keys, ``--new-keys`` new
  ones per cut): per cut, ingest + apply seconds, Spark jobs, rows read by Spark (input records of
  every stage the cut ran) and mirror rows copied; ``growth_slope_pct_per_cut`` is the fitted slope
  of cut seconds over the last 10 cuts, as a percentage of their median;
- **scale**: a mirror of ``--mirror-rows`` keys, a maintenance pass, then a small cut (10 mods)
  and a large one (``--mods``), each against a plain append of its rows and against the cut's
  physical floor: the three Delta commits no cut can avoid, timed on their own for as many rows (a
  plain append of the landed rows, as the changelog takes them; one bare MERGE of as many keys into a
  copy of the mirror, same size and layout, its source already computed; a one-row manifest append).
  Then a cut with nothing committed since the last (an idle stream's): ``idle_cut_over_small_cut``.

- **history**: the same small and large cuts on two lakes of ``--history-rows`` keys, one of them
  keeping a history table (``CS_PLATFORM_HISTORY_TABLES``): ``*_cut_history_over_without``.

A maintenance pass (what the schedule runs, keeping the latest cut) runs before every ``--maintain-every``-th
growth cut and prints its seconds, jobs and files before -> after.

Prints ``name: value`` lines. Spark is local[2] in this process (job and input-record counts come
from its status store).

    .venv/bin/python bench/lake_cost.py [--cuts 16 --mods 10000 --mirror-rows 1000000] [--only history]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from py4j.protocol import Py4JJavaError

from cs_platform.changestream.reader import PartitionBatch
from cs_platform.changestream.records import ColumnType, DataChangeRecord, Mod, ModType, ValueCaptureType
from cs_platform.lake.changelog import read_landed
from cs_platform.lake.delta import session_conf
from cs_platform.lake.history_schema import HistoryPolicy
from cs_platform.lake.identifiers import quoted
from cs_platform.lake.maintenance import maintain
from cs_platform.lake.mirrors import MATERIALIZE_SOURCE
from cs_platform.lake.spark import delta_spark_session
from cs_platform.lake.stream_lake import Lake
from cs_platform.landing.store import LandingStore

STREAM = "Bench"
COLUMNS = (
    ColumnType("AccountId", {"code": "STRING"}, True, 1),
    ColumnType("Balance", {"code": "INT64"}, False, 2),
    ColumnType("Note", {"code": "STRING"}, False, 3),
)
PER_TRANSACTION = 10
SETS = ("growth", "scale", "history")  # what --only chooses from


@dataclass
class Landing:
    """Writes one batch of synthetic transactions per call, each later than the last."""

    root: Path
    clock: datetime = datetime(2026, 11, 22, tzinfo=timezone.utc)
    batches: int = 0
    keys: int = 0  # keys inserted so far: acct-0 .. acct-(keys-1)

    def write(self, inserts: int, updates: int, rng: random.Random) -> tuple[list[str], datetime]:
        """Land ``inserts`` new keys and ``updates`` updates of existing ones; returns the new files
        and the last commit timestamp."""
        self.batches += 1
        store, records = LandingStore(str(self.root)), []
        new_keys = [f"acct-{k:08d}" for k in range(self.keys, self.keys + inserts)]
        self.keys += inserts
        changes = [(ModType.INSERT, k) for k in new_keys] + [(ModType.UPDATE, f"acct-{rng.randrange(max(1, self.keys - inserts)):08d}") for _ in range(updates)]
        for start in range(0, len(changes), PER_TRANSACTION):
            self.clock += timedelta(microseconds=100)
            chunk = changes[start : start + PER_TRANSACTION]
            for kind in (ModType.INSERT, ModType.UPDATE):
                mods = tuple(
                    Mod({"AccountId": key}, {"Balance": str(rng.randrange(10**6)), **({"Note": "opened"} if kind is ModType.INSERT else {})}, {})
                    for k, key in chunk if k is kind
                )
                if mods:
                    records.append(self._record(f"b{self.batches}-t{start}-{kind.value}", mods, kind))
        part = tuple(records)
        batch = PartitionBatch(STREAM, part[0].commit_timestamp, part[-1].commit_timestamp, part, (), part[-1].commit_timestamp, False)
        landed = store.write(STREAM, f"p{self.batches}", batch)
        return [landed.path], part[-1].commit_timestamp

    def _record(self, transaction: str, mods: tuple, kind: ModType) -> DataChangeRecord:
        return DataChangeRecord(
            STREAM, self.clock, "00000000", transaction, True, "Accounts", COLUMNS, mods,
            kind, ValueCaptureType.OLD_AND_NEW_VALUES, 1, 1, "", False,
        )


class SparkMeter:
    """Spark jobs and input records of whatever runs inside :meth:`measure` (one job group)."""

    def __init__(self, spark) -> None:
        self.context = spark.sparkContext
        self.store = self.context._jsc.sc().statusStore()
        self.groups = 0

    def measure(self, work) -> tuple[float, int, int]:
        """(seconds, jobs, input records) of ``work()``."""
        self.groups += 1
        group = f"bench-{self.groups}"
        tracker = self.context.statusTracker()
        ungrouped = set(tracker.getJobIdsForGroup(None))
        self.context.setJobGroup(group, group)
        began = time.perf_counter()
        work()
        seconds = time.perf_counter() - began
        self.context.setJobGroup("bench-idle", "bench-idle")
        # A cut writes its tables from threads of its own, whose jobs have no group: nothing else runs meanwhile.
        jobs = list(tracker.getJobIdsForGroup(group)) + sorted(set(tracker.getJobIdsForGroup(None)) - ungrouped)
        return seconds, len(jobs), sum(self._input_records(job) for job in jobs)

    def _input_records(self, job: int) -> int:
        stages = self.store.job(job).stageIds()
        return sum(self._stage_input(stages.apply(i)) for i in range(stages.size()))

    def _stage_input(self, stage: int) -> int:
        try:
            return int(self.store.lastStageAttempt(stage).inputRecords())
        except Py4JJavaError:  # a skipped stage (its shuffle output reused) has no attempt
            return 0


def last_merge_metric(spark, lake: Lake, name: str) -> int:
    """A metric of the latest commit to the Accounts mirror (0 when that commit did not report it)."""
    row = spark.sql(f"DESCRIBE HISTORY delta.{quoted(lake.mirror_path('Accounts'))} LIMIT 1").first()
    return int((row.operationMetrics or {}).get(name, 0))


def slope_pct(values: list[float]) -> float:
    """Least-squares slope of ``values`` per step, as a percentage of their median."""
    xs = range(len(values))
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(values)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, values)) / sum((x - mean_x) ** 2 for x in xs)
    return 100 * slope / statistics.median(values)


class Bench:
    def __init__(self, spark, work: Path, seed: int = 7) -> None:
        self.spark, self.work = spark, work
        self.meter = SparkMeter(spark)
        self.rng = random.Random(seed)
        self.appends = 0

    def append_seconds(self, files: list[str]) -> float:
        """The baseline: a plain Delta append of the same landed rows."""
        self.appends += 1
        target = str(self.work / f"append{self.appends}")
        return self.meter.measure(lambda: read_landed(self.spark, files).write.format("delta").mode("append").save(target))[0]

    def cut(self, lake: Lake, landing: Landing, inserts: int, updates: int) -> dict[str, float]:
        files, last = landing.write(inserts, updates, self.rng)
        append = self.append_seconds(files)
        ingest = self.meter.measure(lambda: lake.changelog.ingest(files))
        apply = self.meter.measure(lambda: lake.apply_cut(last))
        return {
            "seconds": ingest[0] + apply[0],
            "append_s": append,
            "jobs": ingest[1] + apply[1],
            "rows_read": ingest[2] + apply[2],
            "rows_copied": last_merge_metric(self.spark, lake, "numTargetRowsCopied"),
        }

    def idle_cut(self, lake: Lake, landing: Landing) -> tuple[float, int]:
        """(seconds, Spark jobs) of a cut with nothing committed since the last, as a lake run takes
        it when heartbeats alone moved the watermark: no new landing file, the cut is later."""
        later = landing.clock + timedelta(seconds=1)
        landing.clock = later
        # As :meth:`cut`, ingest is given the new files only: none.
        seconds, jobs, _ = self.meter.measure(lambda: (lake.changelog.ingest([]), lake.apply_cut(later)))
        return seconds, jobs


class Floor:
    """The Delta commits a cut cannot avoid, without anything of ours around them (module docstring)."""

    def __init__(self, bench: Bench, lake: Lake) -> None:
        self.bench, self.spark = bench, bench.spark
        self.mirror, self.manifest = str(bench.work / "floor_mirror"), str(bench.work / "floor_manifest")
        source = lake.mirror("Accounts")
        self.keys = source.read(self.spark).count()
        # The same table as the cut's mirror: its DDL's layout and properties, its rows, compacted.
        self.spark.sql(
            f"CREATE TABLE delta.{quoted(self.mirror)} USING delta CLUSTER BY ({quoted('AccountId')}) "
            "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true') "
            f"AS SELECT * FROM delta.{quoted(source.uri)}"
        )
        self.spark.sql(f"OPTIMIZE delta.{quoted(self.mirror)}")

    def seconds(self, append_s: float, mods: int) -> tuple[float, int]:
        """(seconds, Spark jobs) of the floor for ``mods`` updates whose landed rows took ``append_s``
        to append."""
        rows = [(f"acct-{k:08d}", self.bench.rng.randrange(10**6)) for k in self.bench.rng.sample(range(self.keys), mods)]
        changed = self.spark.createDataFrame(rows, "AccountId string, Balance long").localCheckpoint()
        changed.createOrReplaceTempView("floor_source")
        key, balance = quoted("AccountId"), quoted("Balance")
        merge = (
            f"MERGE INTO delta.{quoted(self.mirror)} AS t USING floor_source AS s ON t.{key} = s.{key} "
            f"WHEN MATCHED THEN UPDATE SET {balance} = s.{balance}"
        )
        with session_conf(self.spark, {MATERIALIZE_SOURCE: "none"}):  # as the cut's MERGE runs
            merged = self.bench.meter.measure(lambda: self.spark.sql(merge).collect())
        manifest = self.bench.meter.measure(
            lambda: self.spark.createDataFrame([(mods,)], "mods long").write.format("delta").mode("append").save(self.manifest)
        )
        return append_s + merged[0] + manifest[0], merged[1] + manifest[1]


def maintenance(bench: Bench, lake: Lake, name: str) -> None:
    """One maintenance pass (what the schedule runs), keeping the latest cut."""
    results = []
    seconds, jobs, _ = bench.meter.measure(lambda: results.append(maintain(lake, kept_seconds=0, margin_seconds=0)))
    print(
        f"{name}: {seconds:.2f} s, {jobs} jobs, files {results[0].files_before} -> {results[0].files_after}, "
        f"{results[0].cuts_dropped} cuts dropped",
        flush=True,
    )


def growth(bench: Bench, cuts: int, mods: int, new_keys: int, maintain_every: int) -> None:
    landing, lake = Landing(bench.work / "growth_landing"), Lake(bench.spark, str(bench.work / "growth_lake"))
    bench.cut(lake, landing, inserts=mods, updates=0)  # the keys the updates go to
    seconds = []
    for i in range(1, cuts + 1):
        if maintain_every and i % maintain_every == 0:
            maintenance(bench, lake, f"growth_maintenance_before_cut_{i:02d}")
        cut = bench.cut(lake, landing, inserts=new_keys, updates=mods - new_keys)
        seconds.append(cut["seconds"])
        print(
            f"growth_cut_{i:02d}: {cut['seconds']:.2f} s, {cut['jobs']} jobs, {cut['rows_read']} rows read, "
            f"{cut['rows_copied']} mirror rows copied, append {cut['append_s']:.2f} s, changelog {(i + 1) * mods} rows",
            flush=True,
        )
    print(f"growth_cut_s_median: {statistics.median(seconds[-10:]):.2f}")
    print(f"growth_slope_pct_per_cut: {slope_pct(seconds[-10:]):.2f}")


def scale(bench: Bench, mirror_rows: int, mods: int) -> None:
    landing, lake = Landing(bench.work / "scale_landing"), Lake(bench.spark, str(bench.work / "scale_lake"))
    began = time.perf_counter()
    bench.cut(lake, landing, inserts=mirror_rows, updates=0)
    bench.cut(lake, landing, inserts=0, updates=mirror_rows)
    print(f"scale_setup_s: {time.perf_counter() - began:.1f} ({mirror_rows} mirror rows, {2 * mirror_rows} changelog rows)", flush=True)
    maintenance(bench, lake, "scale_maintenance")
    bench.cut(lake, landing, inserts=0, updates=10)  # warm
    checks = fence_checks(lake)
    small = bench.cut(lake, landing, inserts=0, updates=10)
    fence_s = sum(checks)
    large = bench.cut(lake, landing, inserts=0, updates=mods)
    idle, idle_jobs = bench.idle_cut(lake, landing)
    floor = Floor(bench, lake)
    floor.seconds(small["append_s"], 10)  # warm
    small_floor, small_floor_jobs = floor.seconds(small["append_s"], 10)
    large_floor, _ = floor.seconds(large["append_s"], mods)
    print(f"small_cut_s: {small['seconds']:.2f}")
    print(f"small_cut_jobs: {small['jobs']}")
    print(f"small_cut_rows_read: {small['rows_read']}")
    print(f"small_cut_over_append: {small['seconds'] / small['append_s']:.2f}")
    print(f"mirror_rows_copied_small_cut: {small['rows_copied']}")
    print(f"small_cut_floor_s: {small_floor:.2f} ({small_floor_jobs} jobs beside the append)")
    print(f"small_cut_over_floor: {small['seconds'] / small_floor:.2f}")
    print(f"small_floor_over_append: {small_floor / small['append_s']:.2f}")
    print(f"large_cut_s: {large['seconds']:.2f}")
    print(f"large_cut_over_append: {large['seconds'] / large['append_s']:.2f}")
    print(f"large_cut_floor_s: {large_floor:.2f}")
    print(f"large_cut_over_floor: {large['seconds'] / large_floor:.2f}")
    print(f"large_floor_over_append: {large_floor / large['append_s']:.2f}")
    print(f"mirror_rows_copied_large_cut: {large['rows_copied']}")
    print(f"idle_cut_s: {idle:.2f} ({idle_jobs} jobs; nothing committed since the last cut)")
    print(f"idle_cut_over_small_cut: {idle / small['seconds']:.2f}")
    # The lake's fence: its checks in a cut (the fence's log listed before and after the manifest
    # append), and the claim a writer makes once, on its first write, of every table of the lake.
    print(f"fence_checks_s_per_small_cut: {fence_s:.3f} ({len(checks)} checks)")
    print(f"fence_share_of_small_cut: {fence_s / small['seconds']:.3f}")
    began = time.perf_counter()
    claimed = Lake(bench.spark, str(bench.work / "scale_lake"), holder="the bench's second writer")
    epoch = claimed.fence.epoch
    print(f"fence_claim_s: {time.perf_counter() - began:.2f} (epoch {epoch}, {len(claimed.tables())} tables)")


def fence_checks(lake: Lake) -> list[float]:
    """The seconds of each of ``lake``'s fence checks from now on (the fence's own timing)."""
    seconds: list[float] = []
    check = lake.fence.check

    def timed(doing: str) -> None:
        began = time.perf_counter()
        try:
            check(doing)
        finally:
            seconds.append(time.perf_counter() - began)

    lake.fence.check = timed
    return seconds


def history_cost(bench: Bench, rows: int, mods: int, repeats: int = 3) -> None:
    """The same cuts on two lakes of ``rows`` keys, one keeping a history table of Accounts: the
    history's share of a cut (medians of ``repeats`` cuts each, taken in turns)."""
    lakes = {
        "without": Lake(bench.spark, str(bench.work / "no_history_lake")),
        "with": Lake(bench.spark, str(bench.work / "history_lake"), history=HistoryPolicy(None)),
    }
    landings = {name: Landing(bench.work / f"{name}_history_landing") for name in lakes}
    for name, lake in lakes.items():
        bench.cut(lake, landings[name], inserts=rows, updates=0)
        bench.cut(lake, landings[name], inserts=0, updates=10)  # warm
    for size, updates in (("small", 10), ("large", mods)):
        seconds: dict[str, list[float]] = {name: [] for name in lakes}
        for _ in range(repeats):
            for name, lake in lakes.items():
                seconds[name].append(bench.cut(lake, landings[name], inserts=0, updates=updates)["seconds"])
        without, with_history = statistics.median(seconds["without"]), statistics.median(seconds["with"])
        print(f"{size}_cut_without_history_s: {without:.2f}  # {updates} mods, {rows} keys")
        print(f"{size}_cut_with_history_s: {with_history:.2f}")
        print(f"{size}_cut_history_over_without: {with_history / without:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cuts", type=int, default=16)
    parser.add_argument("--mods", type=int, default=10_000)
    parser.add_argument("--new-keys", type=int, default=1_000)
    parser.add_argument("--mirror-rows", type=int, default=1_000_000)
    parser.add_argument("--history-rows", type=int, default=100_000, help="keys of the lakes that compare cuts with and without history")
    parser.add_argument("--maintain-every", type=int, default=8, help="a maintenance pass before every N-th growth cut (0: never)")
    parser.add_argument("--only", action="append", choices=SETS, help="run this set only (repeat for several; default: all)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lake_cost_"))
    # SparkMeter reads every job of a cut from Spark's status store: keep Spark's default retention.
    retained = {"spark.ui.retainedJobs": "1000", "spark.ui.retainedStages": "1000"}
    spark = delta_spark_session("lake_cost_bench", "local[2]", extra=retained, jvm_log=work / "spark.log")
    try:
        bench = Bench(spark, work)
        sets = args.only or SETS
        if "growth" in sets:
            growth(bench, args.cuts, args.mods, args.new_keys, args.maintain_every)
        if "scale" in sets:
            scale(bench, args.mirror_rows, args.mods)
        if "history" in sets:
            history_cost(bench, args.history_rows, args.mods)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
