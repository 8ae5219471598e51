"""One stream's lake, ``Lake``: its changelog, mirrors, history tables and manifest under one root,
and the consistent cuts it applies (the RisingWave idea): a transaction is visible in the mirrors
entirely or not at all, across partitions and tables.

A cut at T applies every transaction with previous cut < commit_timestamp <= T. T must be a low
watermark (every partition has landed everything <= T) and the changelog must have ingested the
landing files after T was read. Every transaction in the range is then complete; one that is not
(records seen != number_of_records_in_transaction) means lost data, so the cut stops with
:class:`IncompleteTransactionsError` and applies nothing. After every mirror of the cut has
committed, one append to the manifest records the cut and each mirror's Delta version: readers open
all mirrors at one cut by time travel (:func:`mirrors_at_cut`). Every mirror commit also records
its cut in its ``userMetadata`` (``published.cut_record``), so a version says which cut it belongs
to. A cut at or before the last one is a no-op; a crash before the manifest append is repaired by
re-running (mirrors apply final effects, see ``mirrors``; history tables, see ``history``). A
mirror whose changes only insert is appended to, not merged, while nothing but published cuts
wrote it (``Lake._appendable``): a mirror the crashed attempt wrote is merged by the re-run.

Before anything is applied, every value of the cut is checked against its column's type. A value
that cannot be typed stops the cut with :class:`UntypedValueError` naming the transaction, table,
column and raw value (policy ``fail``, the default), or, with policy ``quarantine``, its whole
transaction is moved to the quarantine table and the cut applies the rest (atomicity holds: a
transaction is never applied in part).

Timestamps handed back by PySpark are naive datetimes in the *Python process's* local time zone,
whatever the Spark session time zone is; ``types.utc`` turns them back into UTC. Which cuts are
published, and at which mirror versions, is read from the manifest's log without Spark (``published``).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Collection

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cs_platform.lake.changelog import Changelog
from cs_platform.lake.delta import USER_METADATA, DeltaPath, session_conf
from cs_platform.lake.fence import FENCE_TABLE, Fence
from cs_platform.lake.history import apply_history, history_at, history_columns, seed_history
from cs_platform.lake.history_schema import HistoryPolicy
from cs_platform.lake.identifiers import quoted
from cs_platform.lake.mirrors import MATERIALIZE_SOURCE, append_inserts, apply_changes, column_types_by_table, ensure_columns, final_effects
from cs_platform.lake.published import (
    ROOT_SETTING,
    PublishedCut,
    absolute_root,
    cut_record,
    latest_cut,
    published_cut,
    published_cuts,
)
from cs_platform.lake.quarantine import Quarantine, UntypedValue, untyped_values
from cs_platform.lake.types import mapped
from cs_platform.landing.source import SourceIdentity, bind
from cs_platform.storage.location import Location

POLICIES = ("fail", "quarantine")
INCOMPLETE_SAMPLE = 5  # incomplete transactions named in the error
PARALLEL_WRITES = 4  # mirror and history MERGEs a cut runs at once
# The manifest's columns but its commit time, in order: one row per mirror of a cut.
MANIFEST_ROWS = (
    "array<struct<cut_timestamp: timestamp, previous_cut: timestamp, table_name: string, "
    "mirror_version: bigint, transactions: bigint, mods: bigint>>"
)
TIME_TRAVEL_GUARD = "spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration"
TIMESTAMP_ENCODING = "spark.sql.parquet.outputTimestampType"


class IncompleteTransactionsError(RuntimeError):
    """Transactions under the cut lack records: data was lost upstream; nothing was applied."""

    def __init__(self, message: str, missing: list[tuple[str, int, int]], count: int) -> None:
        super().__init__(message)
        self.missing = missing  # (transaction id, records seen, records expected), a sample
        self.count = count  # all of them


class StaleSnapshotError(RuntimeError):
    """A snapshot was read at a cut that is no longer the lake's latest; nothing was recorded."""


class ManifestOrderError(RuntimeError):
    """A cut at or below the newest published one was about to be published: nothing was."""


class UnmappedColumnTypeError(RuntimeError):
    """A column under the cut has a Spanner type the lake has no mirror type for; nothing was applied
    (the changelog keeps its changes, so a cs_platform that maps the type applies them all).
    ``columns`` holds (table, column, Spanner type) of each such column."""

    def __init__(self, message: str, columns: list[tuple[str, str, dict]]) -> None:
        super().__init__(message)
        self.columns = columns


class UntypedValueError(RuntimeError):
    """A value under the cut has no value of its column's type; nothing was applied."""

    def __init__(self, message: str, values: list[UntypedValue]) -> None:
        super().__init__(message)
        self.values = values


@dataclass(frozen=True)
class CutResult:
    cut: datetime
    previous: datetime | None
    applied: bool
    transactions: int = 0
    mods: int = 0
    versions: dict[str, int] = field(default_factory=dict)
    quarantined: tuple[UntypedValue, ...] = ()  # values whose transactions the cut set aside
    histories: dict[str, int] = field(default_factory=dict)  # the history tables the cut wrote, at their new versions
    appended: tuple[str, ...] = ()  # the mirrors the cut appended to (only inserts), not merged into
    frozen: dict[str, datetime] = field(default_factory=dict)  # mirrors of tables the stream no longer watches, and since which cut


@dataclass(frozen=True)
class RangeSummary:
    """A cut's range in one pass: its size, its incomplete transactions, its tables' column types."""

    transactions: int
    mods: int
    incomplete: int
    incomplete_sample: list[tuple[str, int, int]]
    descriptions: list[tuple[str, str]]  # distinct (table_name, column_types)
    updated: frozenset[str]  # the tables with an UPDATE or a DELETE in the range (the others only take inserts)


def summarize(changes: DataFrame) -> RangeSummary:
    per_transaction = changes.groupBy("server_transaction_id").agg(
        F.countDistinct("record_sequence").alias("seen"),
        F.max("number_of_records_in_transaction").alias("expected"),
        F.count("*").alias("mods"),
        F.collect_set(F.struct("table_name", "column_types")).alias("descriptions"),
        F.collect_set(F.when(F.col("mod_type") != "INSERT", F.col("table_name"))).alias("updated"),
    )
    incomplete = F.col("seen") != F.col("expected")
    row = per_transaction.agg(
        F.count("*"),
        F.coalesce(F.sum("mods"), F.lit(0)),
        F.count_if(incomplete),
        F.slice(F.collect_list(F.when(incomplete, F.struct("server_transaction_id", "seen", "expected"))), 1, INCOMPLETE_SAMPLE),
        F.array_distinct(F.flatten(F.collect_list("descriptions"))),
        F.array_distinct(F.flatten(F.collect_list("updated"))),
    ).first()
    return RangeSummary(row[0], row[1], row[2], [tuple(m) for m in row[3]], [tuple(d) for d in row[4] or []], frozenset(row[5] or ()))


def changelog_table(location: Location) -> DeltaPath:
    return DeltaPath.under(location, "changelog")


class Lake:
    """The Delta tables under one root: changelog, mirrors/<table>, and the manifest."""

    def __init__(
        self,
        spark: SparkSession,
        root: str,
        untyped_policy: str = "fail",
        history: HistoryPolicy = HistoryPolicy(),
        append_inserts: bool = True,
        holder: str = "a lake writer",
    ) -> None:
        if untyped_policy not in POLICIES:
            raise ValueError(f"untyped value policy {untyped_policy!r} is not one of {', '.join(POLICIES)}")
        self.spark = spark
        # Which mirror versions stay readable is decided by the kept cuts (``maintenance``), not by
        # the clock: Delta would otherwise refuse a kept cut once it is older than the retention
        # the last maintenance pass set, though its files are all there until the next pass.
        spark.conf.set(TIME_TRAVEL_GUARD, "false")
        # Parquet keeps min/max statistics of TIMESTAMP_MICROS columns, not of INT96 (Spark's
        # default): with them a scan of a commit range skips the changelog's row groups outside it,
        # so a cut reads rows in proportion to its range, not to the file that holds it.
        spark.conf.set(TIMESTAMP_ENCODING, "TIMESTAMP_MICROS")
        self.root = absolute_root(root)
        self.location = Location(self.root, ROOT_SETTING)
        # Taken on the first write, with ``holder`` naming who writes (``lake.fence``): a writer
        # that only reads takes no epoch.
        self.fence = Fence(spark, DeltaPath.under(self.location, FENCE_TABLE), holder, self.tables)
        self.changelog = Changelog(spark, changelog_table(self.location), self.fence)
        self.quarantine = Quarantine(spark, DeltaPath.under(self.location, "quarantine"), self.fence)
        self.manifest = DeltaPath.under(self.location, "manifest")
        self.untyped_policy = untyped_policy
        self.history = history
        self.append_inserts = append_inserts  # see ``_appendable``

    def bind(self, source: SourceIdentity) -> None:
        """Record ``source`` as this lake's owner if it has none; refuse another (``landing.source``)."""
        bind(self.location, self.location.base, source, "lake")

    @property
    def manifest_path(self) -> str:
        return self.manifest.uri

    def mirror(self, table: str) -> DeltaPath:
        return DeltaPath.under(self.location, "mirrors", table)

    def mirror_path(self, table: str) -> str:
        return self.mirror(table).uri

    def history_table(self, table: str) -> DeltaPath:
        return DeltaPath.under(self.location, "history", table)

    def tables(self) -> list[DeltaPath]:
        """Every Delta table of the lake but the fence: changelog, manifest, quarantine, mirrors, history tables."""
        fixed = [self.changelog.delta, self.manifest, self.quarantine.delta]
        base = self.location.base
        kept = [DeltaPath.under(self.location, kind, name) for kind in ("mirrors", "history") for name in self.location.children(f"{base}/{kind}")]
        return [t for t in (*fixed, *kept) if t.exists()]

    def last_published(self) -> PublishedCut | None:
        """The latest cut and its mirror versions, from the manifest's last commit (no Spark job)."""
        return latest_cut(self.location)

    def last_cut(self) -> datetime | None:
        published = self.last_published()
        return published.cut if published else None

    def cuts(self) -> list[datetime]:
        """Every kept cut, oldest first, in UTC (from the manifest's log: ``published``)."""
        return [c.cut for c in published_cuts(self.location)]

    def changes(self, after: datetime | None, upto: datetime) -> DataFrame:
        rows = self.changelog.table().where(F.col("commit_timestamp") <= F.lit(upto))
        return rows if after is None else rows.where(F.col("commit_timestamp") > F.lit(after))

    def keys_with_values(self, table: str, columns: dict[str, dict], after: datetime, upto: datetime) -> int:
        """How many keys of ``table`` the changes in (``after``, ``upto``] leave present with a value
        in one of ``columns`` (a key they delete last, or leave without one, does not count)."""
        if not self.changelog.exists():
            return 0  # nothing landed yet: no change gave a key a value
        effects = final_effects(self.changes(after, upto).where(F.col("table_name") == table), columns)
        has_value = " OR ".join(f"{quoted(name)} IS NOT NULL" for name in columns)
        return effects.where(f"__op != 'DELETE' AND ({has_value})").count()

    def apply_cut(
        self,
        cut: datetime,
        snapshot_instead: Collection[str] = (),
        unwatched: Collection[str] = (),
        shapes: dict[str, str] | None = None,
        widened: dict[str, dict[str, dict]] | None = None,
    ) -> CutResult:
        """Apply every complete transaction in (the last published cut, ``cut``] to the mirrors and
        publish ``cut``. The changes of the tables in ``snapshot_instead`` are left out: a snapshot
        read at ``cut`` replaces their mirrors right after (``lake_steps``: a table the stream watches
        since the lake's start), and no published cut holds part of one. The mirrors of the tables
        in ``unwatched`` (the stream watches them no more at ``cut``) take the cut's changes, all
        committed while the stream still watched them, and are recorded frozen from this cut on.
        ``shapes`` (the watched tables' digests at ``cut``) is recorded for every mirror the cut
        brings to it, not for those in ``snapshot_instead``: theirs comes with their snapshot, so a
        crash before it leaves the old digest, and the next cut reads them whole again. The mirrors
        (and history tables) of the tables in ``widened`` first take the columns given for each,
        NULL in every row and version before (``lake_steps.widened_tables``)."""
        began = time.monotonic()
        cut = plain_datetime(cut)
        published = self.last_published()
        previous = published.cut if published else None
        if (previous is not None and cut <= previous) or not self.changelog.exists():
            return CutResult(cut, previous, applied=False)  # already applied, or nothing landed yet
        frozen = {**{table: cut for table in unwatched}, **(published.frozen if published else {})}
        shapes = {**(published.shapes if published else {}), **{t: s for t, s in (shapes or {}).items() if t not in snapshot_instead}}
        widened_versions = self._widen(widened or {}, cut_record(cut, previous))
        latest = self.changelog.latest_commit()
        if published is not None and latest is not None and latest <= previous:
            # Nothing was committed after the previous cut (an idle stream whose watermark moved on
            # heartbeats): the cut publishes the same versions, with no Spark job but its manifest append.
            versions = {**published.versions, **widened_versions}
            self._publish(PublishedCut(cut, versions, previous, frozen, shapes, time.monotonic() - began), 0, 0)
            return CutResult(cut, previous, True, versions=versions, frozen=frozen)
        changes = self.changes(previous, cut).cache()  # the range is scanned once
        try:
            summary = summarize(changes)
            if summary.incomplete:
                sample = ", ".join(f"{t} ({seen}/{expected} records)" for t, seen, expected in summary.incomplete_sample)
                raise IncompleteTransactionsError(
                    f"{summary.incomplete} transactions committed in ({previous}, {cut}] are incomplete in the changelog: "
                    f"{sample}. The cut was not applied. Either the cut is above the low watermark, or landing "
                    "files were not ingested: ingest them and retry; if it persists, re-read the partitions "
                    "(re-materialize them) from before these commits.",
                    summary.incomplete_sample,
                    summary.incomplete,
                )
            types = column_types_by_table(summary.descriptions)
            _refuse_unmapped(types, previous, cut)
            transactions, mods, applied, updated = summary.transactions, summary.mods, changes, summary.updated
            if snapshot_instead:
                types = {t: c for t, c in types.items() if t not in snapshot_instead}
                applied = changes.where(~F.col("table_name").isin(sorted(snapshot_instead)))
            bad = untyped_values(applied, types)
            if bad and self.untyped_policy == "fail":
                raise UntypedValueError(
                    f"{len(bad)} value(s) committed in ({previous}, {cut}] cannot be typed, so the cut was not "
                    f"applied: {'; '.join(v.describe() for v in bad[:5])}. Set CS_PLATFORM_UNTYPED_VALUES="
                    "quarantine to set such transactions aside and apply the rest (see docs/lake.md, Quarantine).",
                    bad,
                )
            if bad:
                self.quarantine.add(changes, bad, cut)
                applied = applied.where(~F.col("server_transaction_id").isin(sorted({v.transaction for v in bad})))
                kept = summarize(applied)
                transactions, mods, updated = kept.transactions, kept.mods, kept.updated
                types = {t: c for t, c in types.items() if t in {table for table, _ in kept.descriptions}}
            versions, histories, appended = self._write_tables(applied, types, updated, cut_record(cut, previous), published)
        finally:
            changes.unpersist()
        if not versions and previous is None:
            return CutResult(cut, previous, applied=False)  # nothing under the first cut: no mirror to record
        versions = dict(sorted({**(published.versions if published else {}), **widened_versions, **versions}.items()))
        self._publish(PublishedCut(cut, versions, previous, frozen, shapes, time.monotonic() - began), transactions, mods)
        return CutResult(cut, previous, True, transactions, mods, versions, tuple(bad), histories, appended, frozen)

    def _write_tables(
        self,
        changes: DataFrame,
        types: dict[str, dict[str, dict]],
        updated: frozenset[str],
        record: str,
        published: PublishedCut | None,
    ) -> tuple[dict[str, int], dict[str, int], tuple[str, ...]]:
        """Each table's mirror and history brought to the cut, all side by side: one write's
        planning, log reads and commit overlap another's (a small MERGE is mostly fixed cost, not
        work; 10-mod cuts with a history table went from 1.8x to 1.5x the cut without). Nothing
        reads what another writes: a history's prior state is itself at the previous cut, which no
        write of this cut changes. A mirror whose changes only insert is appended to when
        ``_appendable``. Two groups of writes, each under one fenced transaction version
        (``lake.fence``: a table is written at most once in each): first the tables' shapes (a
        mirror or history created, columns added, a history turned on seeded from its mirror at
        the previous cut), then their rows. Returns the new versions of the mirrors and of the
        history tables, and the mirrors appended to."""
        appended = self._appendable([t for t in types if t not in updated], published)
        prior = published.versions if published else {}
        shapes, writes = [], {}
        for table, columns in types.items():
            changed = changes.where(F.col("table_name") == table)
            shapes.append(partial(ensure_columns, self.spark, self.mirror(table), columns))
            write = append_inserts if table in appended else apply_changes
            writes[("mirror", table)] = partial(write, self.spark, self.mirror(table), changed, columns)
            if self.history.keeps(table):
                history = self.history_table(table)
                if not history.exists() and table in prior:  # turned on for a table with a mirror: seeded from it
                    before = self.mirror(table).read(self.spark, prior[table])
                    shapes.append(partial(seed_history, self.spark, history, before, columns, published.cut))
                else:
                    shapes.append(partial(ensure_columns, self.spark, history, history_columns(columns)))
                writes[("history", table)] = partial(self._write_history, table, changed, columns, published)
        # Set once on the session for all of them (SQL commits take both from there): every commit
        # names its cut, and no MERGE copies its source, a checkpoint already (``mirrors``).
        settings = {USER_METADATA: record, MATERIALIZE_SOURCE: "none"}
        with session_conf(self.spark, settings):
            self._side_by_side(shapes)
            done = dict(zip(writes, self._side_by_side(list(writes.values()))))
        return (
            {table: v for (kind, table), v in done.items() if kind == "mirror"},
            {table: v for (kind, table), v in done.items() if kind == "history"},
            appended,
        )

    def _widen(self, widened: dict[str, dict[str, dict]], record: str) -> dict[str, int]:
        """Add each table's new columns to its mirror and history table (one fenced group of
        writes); returns the mirrors' new versions. Most cuts widen nothing, and pay nothing here."""
        if not widened:
            return {}
        writes = []
        for table, columns in widened.items():
            writes.append(partial(ensure_columns, self.spark, self.mirror(table), columns))
            history = self.history_table(table)
            if self.history.keeps(table) and history.exists():
                writes.append(partial(ensure_columns, self.spark, history, columns))
        with session_conf(self.spark, {USER_METADATA: record}):
            self._side_by_side(writes)
        return {table: self.mirror(table).version() for table in widened}

    def _side_by_side(self, writes: list) -> list:
        """Run ``writes`` (no table twice), at most PARALLEL_WRITES at once, as one fenced group."""
        if not writes:
            return []
        with self.fence.writing(), ThreadPoolExecutor(min(len(writes), PARALLEL_WRITES), "cut") as pool:
            return list(pool.map(lambda write: write(), writes))

    def _appendable(self, tables: list[str], published: PublishedCut | None) -> tuple[str, ...]:
        """Those of ``tables`` (whose changes only insert) whose mirror holds exactly the source table
        at the last published cut, so that a key inserted after it is not in the mirror
        (``mirrors.append_inserts``). None do if the stream may leave deletes out (``append_inserts``
        off: CS_PLATFORM_APPEND_INSERTS) or a transaction was ever set aside (the quarantine table
        exists); a mirror does not if something wrote it since (a cut that crashed before its
        manifest append, a rebuild not yet published, a maintenance pass): its version differs, and
        the cut MERGEs, which is exact over a half-applied attempt."""
        if not self.append_inserts or self.quarantine.exists():
            return ()
        published_versions = published.versions if published else {}
        return tuple(t for t in tables if t in published_versions and self.mirror(t).version() == published_versions[t])

    def histories_at_cut(self, cut: datetime | None = None) -> dict[str, DataFrame]:
        """Every history table's versions valid at one cut (the latest if None), read at the
        history's latest version: what a reader without time travel reads (``history``)."""
        published = published_cut(self.location, cut)
        tables = (t for t in published.versions if self.history_table(t).exists())
        return {t: history_at(self.history_table(t).read(self.spark), published.cut) for t in tables}

    def _write_history(self, table: str, changes: DataFrame, columns: dict[str, dict], published: PublishedCut | None) -> int:
        """The cut's versions into the table's history, the state before them read from the history
        itself at the previous cut (``history_at``: exact even after a crashed attempt wrote later
        versions, and a read of the latest version, not a time travel; a history turned on for a
        table with a mirror was seeded from that mirror at the previous cut: ``_write_tables``)."""
        history = self.history_table(table)
        new = published is None or table not in published.versions  # a table new in this cut
        before = None if new else history_at(history.read(self.spark), published.cut)
        return apply_history(self.spark, history, before, changes, columns)

    def publish_snapshot(self, cut: datetime, versions: dict[str, int], shapes: dict[str, str] | None = None) -> None:
        """Record mirrors a snapshot wrote as of ``cut``: the lake's first cut (later cuts apply
        commits after it), or, for mirrors rebuilt at the lake's latest cut, their new versions at
        that cut (the next cut applies what came after it). A frozen mirror a snapshot replaced (its
        table is watched again) is frozen no more; ``shapes`` are the digests of the tables read."""
        cut = plain_datetime(cut)
        published = self.last_published()
        if published is None:
            self._publish(PublishedCut(cut, dict(sorted(versions.items())), shapes=shapes or {}), 0, 0)
            return
        if published.cut != cut:
            raise StaleSnapshotError(
                f"the snapshot was read at {cut.isoformat()}, but the lake's latest cut is now {published.cut.isoformat()} "
                "(a cut was published meanwhile): nothing was recorded; rebuild again"
            )
        rows = self._manifest_frame(PublishedCut(cut, versions, published.previous), 0, 0)
        on = " AND ".join(f"t.{quoted(c)} = s.{quoted(c)}" for c in ("cut_timestamp", "table_name"))
        version, committed = quoted("mirror_version"), quoted("committed_at")
        frozen = {table: since for table, since in published.frozen.items() if table not in versions}
        shapes = {**published.shapes, **(shapes or {})}
        recorded = PublishedCut(cut, dict(sorted({**published.versions, **versions}.items())), published.previous, frozen, shapes)
        self.fence.check("recording its snapshot")
        with self.fence.writing():
            self.manifest.merge(
                self.spark,
                rows,
                f"ON {on} WHEN MATCHED THEN UPDATE SET {version} = s.{version}, {committed} = s.{committed} WHEN NOT MATCHED THEN INSERT *",
                recorded.to_json(),
            )
        self.fence.check("recording its snapshot")

    def _publish(self, cut: PublishedCut, transactions: int, mods: int) -> None:
        """One manifest append: a row per mirror, and the cut in the commit's metadata; fenced
        (``lake.fence``), and only above the newest published cut: the manifest is monotone."""
        self._check_order(cut.cut, "publishing its cut")
        rows = self._manifest_frame(cut, transactions, mods)
        with self.fence.writing():
            rows.write.format("delta").mode("append").option("userMetadata", cut.to_json()).save(self.manifest.uri)
        self._read_back(cut.cut, "publishing its cut")

    def _check_order(self, cut: datetime, doing: str) -> None:
        """Stop a writer the fence stopped, or one whose cut is not above the newest published."""
        self.fence.check(doing)
        newest = self.last_published()
        if newest is not None and cut <= newest.cut:
            raise ManifestOrderError(
                f"{self.fence.holder} was about to publish cut {cut.isoformat()}, but cut {newest.cut.isoformat()} is published: "
                "the manifest only moves forward, nothing was published"
            )

    def _read_back(self, cut: datetime, doing: str) -> None:
        """The newest published cut is ``cut``, or this writer was fenced (Delta skipped its append)."""
        newest = self.last_published()
        if newest is None or newest.cut != cut:
            self.fence.check(doing)
            raise ManifestOrderError(f"{self.fence.holder} published cut {cut.isoformat()}, but the manifest's newest cut is {newest and newest.cut}")

    def _manifest_frame(self, cut: PublishedCut, transactions: int, mods: int) -> DataFrame:
        """The manifest's rows of ``cut``: one per mirror, built from literals in the JVM (a frame
        of Python rows starts Python workers to unpickle them: 0.16 CPU-seconds every cut)."""
        rows = [F.struct(*map(F.lit, (cut.cut, cut.previous, table, v, transactions, mods))) for table, v in cut.versions.items()]
        return self.spark.range(1).select(F.inline(F.array(*rows).cast(MANIFEST_ROWS))).withColumn("committed_at", F.current_timestamp())

    def mirrors_at_cut(self, cut: datetime | None = None) -> dict[str, DataFrame]:
        """Every mirror as of one cut (the latest if None): a transaction-consistent snapshot."""
        versions = published_cut(self.location, cut).versions
        return {table: self.mirror(table).read(self.spark, version) for table, version in versions.items()}


def _refuse_unmapped(types: dict[str, dict[str, dict]], previous: datetime | None, cut: datetime) -> None:
    unmapped = [(table, name, column["type"]) for table, columns in types.items() for name, column in columns.items() if not mapped(column["type"])]
    if unmapped:
        named = "; ".join(f"{table}.{name} of type {json.dumps(spanner)}" for table, name, spanner in unmapped[:5])
        raise UnmappedColumnTypeError(
            f"{len(unmapped)} column(s) changed in ({previous}, {cut}] have a Spanner type the lake cannot "
            f"mirror yet: {named}. The cut was not applied and the changelog keeps every change: upgrade "
            "cs_platform to a version that maps the type (cs_platform.lake.types), or leave the column "
            "out of the change stream (ALTER CHANGE STREAM ... SET FOR Table(columns)).",
            unmapped,
        )


def plain_datetime(value: datetime) -> datetime:
    """A plain datetime (Spark rejects subclasses such as Spanner's DatetimeWithNanoseconds)."""
    return datetime.combine(value.date(), value.timetz())
