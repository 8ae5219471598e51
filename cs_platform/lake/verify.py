"""The lake checked at its last applied cut, as plain results (the lake step's asset checks report
them): each history table against its mirror, and each mirror against the source table read at
the cut (``changestream.catalog`` and ``changestream.source_reads``, from the reader core)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from google.cloud.spanner_v1.database import Database

from cs_platform.changestream.catalog import watched_table_names
from cs_platform.changestream.source_reads import SourceSnapshot
from cs_platform.lake.mirrors import primary_key, sample_keys
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
    cut: datetime | None  # the last applied cut; None before the first
    tables: dict[str, dict] = field(default_factory=dict)  # table -> what was compared
    mismatched: list[str] = field(default_factory=list)  # the tables whose mirror must be rebuilt


def mirrors_against_source(lake: Lake, database: Database, stream: str, samples: int = SAMPLE_KEYS) -> SourceComparison:
    """At the last applied cut, each watched table has a mirror with the source's row count, and a
    random sample of its primary keys exists in the source read at that timestamp (values are
    compared by the tests). A mirror of a table no longer watched keeps its last rows: not compared."""
    cut = lake.last_cut()
    if cut is None:
        return SourceComparison(None)
    source = SourceSnapshot(database, cut)
    mirrors = lake.mirrors_at_cut(cut)
    watched = set(watched_table_names(database, stream, cut))
    mismatched = sorted(watched - set(mirrors))  # watched, no mirror
    tables = {table: {"mirror_rows": 0, "source_rows": source.row_count(table), "note": "no mirror"} for table in mismatched}
    tables |= {table: {"note": "not watched at the cut: the mirror is frozen, it keeps its last rows"} for table in set(mirrors) - watched}
    for table, mirror in ((t, m) for t, m in mirrors.items() if t in watched):
        keys = primary_key(lake.spark, lake.mirror(table))
        sample = sample_keys(mirror, keys, samples)
        rows, expected = mirror.count(), source.row_count(table)
        missing = len(sample) - len(source.existing_keys(table, keys, sample))
        tables[table] = {"mirror_rows": rows, "source_rows": expected, "sampled_keys": len(sample), "missing": missing}
        if rows != expected or missing:
            mismatched.append(table)
    return SourceComparison(cut, tables, sorted(mismatched))
