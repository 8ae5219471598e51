"""The lake checked at its last applied cut, as plain results (the lake step's asset checks report
them): each history table against its mirror, and each mirror against the source table read at
the cut (``changestream.catalog`` and ``changestream.source_reads``, from the reader core)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from google.cloud.spanner_v1.database import Database
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from cs_platform.changestream.catalog import WatchedTable, watched_tables_and_shapes
from cs_platform.changestream.source_reads import SourceSnapshot
from cs_platform.lake.identifiers import quoted
from cs_platform.lake.mirrors import key_values, primary_key, typed_rows
from cs_platform.lake.snapshot import table_columns
from cs_platform.lake.stream_lake import Lake

SAMPLE_KEYS = 100


@dataclass(frozen=True)
class HistoryComparison:
    cut: datetime | None  # the last applied cut; None before the first
    tables: dict[str, dict[str, int]] = field(default_factory=dict)  # table -> rows, differing_rows

    @property
    def differing(self) -> list[str]:
        return sorted(t for t, c in self.tables.items() if c["differing_rows"])


def history_against_mirrors(lake: Lake) -> HistoryComparison:
    """Each history table filtered at the last applied cut, row for row against its mirror at the cut."""
    cut = lake.last_cut()
    if cut is None:
        return HistoryComparison(None)
    mirrors = lake.mirrors_at_cut(cut)
    compared = {}
    for table, at_cut in lake.histories_at_cut(cut).items():
        mirror = mirrors[table]
        versions = at_cut.select(*[f"`{c}`" for c in mirror.columns])
        compared[table] = {"rows": mirror.count(), "differing_rows": versions.exceptAll(mirror).count() + mirror.exceptAll(versions).count()}
    return HistoryComparison(cut, compared)


@dataclass(frozen=True)
class SourceComparison:
    cut: datetime | None  # the cut compared; None before the first
    tables: dict[str, dict] = field(default_factory=dict)  # table -> what was compared
    mismatched: list[str] = field(default_factory=list)  # the tables whose mirror must be rebuilt


def mirrors_against_source(lake: Lake, database: Database, stream: str, samples: int = SAMPLE_KEYS, cut: datetime | None = None) -> SourceComparison:
    """At ``cut`` (the last published if None), each watched table has a mirror with the source's
    row count, and a random sample of ``samples`` of its rows equals, column by column, the same
    keys' rows in the source read at that timestamp (typed by the casts a snapshot types rows with:
    no value is compared in Python). A row missing from the source, a value reverted or a column
    the source lacks all count. A mirror of a table no longer watched keeps its last rows: not
    compared. Cost: per table one count and one sampled read on each side (no count of a mirror
    smaller than the sample: the sample holds all of it), and one key read of Spanner (docs/lake.md,
    Checks)."""
    cut = cut or lake.last_cut()
    if cut is None:
        return SourceComparison(None)
    source = SourceSnapshot(database, cut)
    mirrors = lake.mirrors_at_cut(cut)
    watched_tables, _ = watched_tables_and_shapes(database, stream, cut)
    watched = {t.name: t for t in watched_tables}
    mismatched = sorted(set(watched) - set(mirrors))  # watched, no mirror
    tables = {table: {"mirror_rows": 0, "source_rows": source.row_count(table), "note": "no mirror"} for table in mismatched}
    tables |= {table: {"note": "not watched at the cut: the mirror is frozen, it keeps its last rows"} for table in set(mirrors) - set(watched)}
    for table, mirror in ((t, m) for t, m in mirrors.items() if t in watched):
        compared = _compare_rows(lake, source, watched[table], mirror, samples)
        tables[table] = compared
        if compared["mirror_rows"] != compared["source_rows"] or compared["differing_rows"] or compared["columns_differ"]:
            mismatched.append(table)
    return SourceComparison(cut, tables, sorted(mismatched))


def _compare_rows(lake: Lake, source: SourceSnapshot, table: WatchedTable, mirror: DataFrame, samples: int) -> dict:
    """One table's mirror against the source: counts, and a sample of whole rows (``mirrors_against_source``)."""
    columns = table_columns(table)
    keys = primary_key(lake.spark, lake.mirror(table.name))
    common = [c for c in columns if c in mirror.columns]
    sampled = mirror.select(*map(quoted, common)).orderBy(F.rand(seed=7)).limit(samples).localCheckpoint()
    sampled_keys = key_values(sampled, keys)
    # A sample short of ``samples`` rows is the whole mirror: its size is the mirror's row count, with
    # no scan of its own (most tables a lake mirrors are small: a job less for each, at every check).
    mirror_rows = len(sampled_keys) if len(sampled_keys) < samples else mirror.count()
    at_source = source.rows_as_text(table.name, common, keys, sampled_keys)
    text = StructType([StructField(c, StringType()) for c in common])
    expected = typed_rows(lake.spark.createDataFrame(at_source, text), {c: columns[c] for c in common})
    differing = sampled.exceptAll(expected).unionAll(expected.exceptAll(sampled)).count()  # both sides in one job
    return {
        "mirror_rows": mirror_rows,
        "source_rows": source.row_count(table.name),
        "sampled_rows": len(sampled_keys),
        "differing_rows": differing,
        "columns_differ": sorted(set(columns) ^ set(mirror.columns)),
    }
