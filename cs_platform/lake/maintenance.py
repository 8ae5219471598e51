"""Lake maintenance: compaction, purge of deletion vectors and VACUUM, never breaking a kept cut.

Every cut adds small files: one or more per MERGE on the changelog and on each touched mirror, one
per manifest append, and deletion vectors on the mirrors. A maintenance pass bounds them:

1. the manifest keeps the cuts of the last ``kept_seconds`` before its latest cut (the latest always);
   older cuts are deleted from it, so nobody opens them once their files are gone
   (``Lake.mirrors_at_cut`` then says the cut is no longer kept). A window of time, not a count: a
   lake run cuts every few seconds while the stream is busy and rarely while it is idle, so a count
   would keep minutes of history one day and weeks the next;
2. each mirror's deletion vectors are purged (``REORG ... APPLY (PURGE)``), then every table is
   compacted (``OPTIMIZE``; clustered tables are clustered by it; the changelog in small row
   groups, which a cut's commit-range scan skips);
3. ``VACUUM`` deletes the files no version within the table's retention references (its
   ``delta.deletedFileRetentionDuration``, set by each pass); the Delta log keeps the same horizon
   (``delta.logRetentionDuration``, 30 days by default), so a table that takes a version every few
   seconds does not keep a month of commit files.

Retention is per table. A kept cut opens each mirror at the version the manifest recorded. A file
of that version is removed, if ever, by a later commit, and lake writers are serialized (one lake
run per stream, and the lake's fence stops one presumed dead: ``lake.fence``), so its removal is
stamped no earlier than the version's own commit. A mirror's
retention therefore reaches back to the commit of the oldest version any kept cut pins, plus
``margin_seconds``. The manifest's log likewise reaches back to the commit of the oldest kept cut:
readers find the kept cuts in its commits (``published``), and the commit that deleted the older
ones records the oldest kept. The margin also covers tables no cut pins (changelog, quarantine) and
files written by a run still in flight, which are not yet in any commit: keep it above the longest
lake run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cs_platform.lake.delta import USER_METADATA, DeltaPath, session_conf
from cs_platform.lake.identifiers import quoted, sql_string
from cs_platform.lake.published import EXPIRED_BEFORE, published_cuts
from cs_platform.lake.stream_lake import Lake
from cs_platform.lake.types import sql_timestamp

KEPT_CUTS_SETTING = "CS_PLATFORM_LAKE_KEPT_CUTS_SECONDS"
MARGIN_SETTING = "CS_PLATFORM_LAKE_VACUUM_MARGIN_SECONDS"
_RETENTIONS = ("delta.deletedFileRetentionDuration", "delta.logRetentionDuration")
# VACUUM lists a table's directory with this many tasks; Spark's default (10,000) costs 30 s of
# scheduling on 2 cores, and a lake table is one directory (no partitions) anyway.
_LISTING_TASKS = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
# Compacted changelog files are written in row groups of this size: every cut scans the changelog
# by commit range, and Parquet skips the row groups outside it (their timestamp statistics), so a
# cut reads about one row group (~50k rows) of a compacted file, not the whole file.
_ROW_GROUP = "parquet.block.size"
CHANGELOG_ROW_GROUP_BYTES = 1 << 20


@dataclass(frozen=True)
class TableMaintenance:
    """One table before and after a pass."""

    name: str  # changelog, manifest, quarantine or mirrors/<table>
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int
    retention_hours: float
    pinned_version: int | None  # the oldest version a kept cut needs: a mirror's it opens, the manifest's commit of it


@dataclass(frozen=True)
class MaintenanceResult:
    kept_cuts: int
    oldest_kept_cut: datetime | None
    cuts_dropped: int
    tables: tuple[TableMaintenance, ...]

    @property
    def files_before(self) -> int:
        return sum(t.files_before for t in self.tables)

    @property
    def files_after(self) -> int:
        return sum(t.files_after for t in self.tables)


def maintain(lake: Lake, kept_seconds: float, margin_seconds: float) -> MaintenanceResult:
    """One maintenance pass over ``lake`` (module docstring). Run it while no lake run of the
    stream is in flight (the Dagster job shares the lake runs' concurrency tag)."""
    if kept_seconds < 0:
        raise ValueError(f"{KEPT_CUTS_SETTING}={kept_seconds:g}: cannot be negative (0 keeps the latest cut only)")
    if margin_seconds < 0:
        raise ValueError(f"{MARGIN_SETTING}={margin_seconds}: the VACUUM margin cannot be negative")
    lake.fence.check("starting maintenance")  # takes its epoch: a lake run presumed dead writes nothing after this (``lake.fence``)
    cuts, dropped, pinned = _expire_cuts(lake, kept_seconds)
    tables = [(name, table, None) for name, table in (("changelog", lake.changelog.delta), ("quarantine", lake.quarantine.delta))]
    tables += [(f"mirrors/{name}", lake.mirror(name), version) for name, version in sorted(pinned.items())]
    # The manifest's log keeps the commit of every kept cut: that is where ``published`` reads them.
    oldest = cuts[0].isoformat() if cuts else None
    recorded = (version for version, r in lake.manifest.all_recorded() if r.get("cut") == oldest)
    tables.append(("manifest", lake.manifest, next(recorded, None)))
    with session_conf(lake.spark, {_LISTING_TASKS: "8"}):
        done = tuple(_maintain_table(lake.spark, name, table, version, margin_seconds) for name, table, version in tables if table.exists())
    return MaintenanceResult(len(cuts), cuts[0] if cuts else None, dropped, done)


def _expire_cuts(lake: Lake, kept_seconds: float) -> tuple[list[datetime], int, dict[str, int]]:
    """Delete the cuts older than ``kept_seconds`` before the latest from the manifest; returns the
    kept cuts (oldest first), how many were dropped, and per mirror the oldest version a kept cut opens.
    The deleting commit records the oldest kept cut, so a reader of the manifest's log alone
    (``published``) no longer lists the dropped ones."""
    published = published_cuts(lake.location)
    if not published:
        return [], 0, {}
    kept = [c for c in published if c.cut >= published[-1].cut - timedelta(seconds=kept_seconds)]
    dropped = len(published) - len(kept)
    if dropped:
        expired = json.dumps({EXPIRED_BEFORE: kept[0].cut.isoformat()})
        with session_conf(lake.spark, {USER_METADATA: expired}), lake.fence.writing():
            lake.spark.sql(f"DELETE FROM delta.{quoted(lake.manifest.uri)} WHERE {quoted('cut_timestamp')} < {sql_timestamp(kept[0].cut)}")
    pinned: dict[str, int] = {}
    for cut in kept:
        for table, version in cut.versions.items():
            pinned[table] = min(version, pinned.get(table, version))
    return [c.cut for c in kept], dropped, pinned


def _maintain_table(spark: SparkSession, name: str, table: DeltaPath, pinned: int | None, margin_seconds: float) -> TableMaintenance:
    files_before, bytes_before = _size(spark, table)
    if name.startswith("mirrors/"):
        spark.sql(f"REORG TABLE delta.{quoted(table.uri)} APPLY (PURGE)")
    with session_conf(spark, {_ROW_GROUP: str(CHANGELOG_ROW_GROUP_BYTES)} if name == "changelog" else {}):
        spark.sql(f"OPTIMIZE delta.{quoted(table.uri)}")
    retention = margin_seconds
    if pinned is not None:
        retention += max((datetime.now(timezone.utc) - table.commit_timestamp(pinned)).total_seconds(), 0)
    # The table's own retention, exact to the second (VACUUM's RETAIN counts whole hours only), so
    # VACUUM and the tombstones kept in checkpoints agree on one horizon.
    interval = sql_string(f"interval {math.ceil(retention) + 1} seconds")
    properties = ", ".join(f"{sql_string(p)} = {interval}" for p in _RETENTIONS)
    spark.sql(f"ALTER TABLE delta.{quoted(table.uri)} SET TBLPROPERTIES ({properties})")
    spark.sql(f"VACUUM delta.{quoted(table.uri)}")
    files_after, bytes_after = _size(spark, table)
    return TableMaintenance(name, files_before, files_after, bytes_before, bytes_after, round(retention / 3600, 4), pinned)


def _size(spark: SparkSession, table: DeltaPath) -> tuple[int, int]:
    """Files and bytes of the table's latest version."""
    row = spark.sql(f"DESCRIBE DETAIL delta.{quoted(table.uri)}").select(F.col("numFiles"), F.col("sizeInBytes")).first()
    return int(row.numFiles), int(row.sizeInBytes)
