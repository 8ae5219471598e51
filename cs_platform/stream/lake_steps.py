"""The steps of one stream's lake as plain functions: the mirrors asset, ``make demo``, the
benchmarks and the tests all call these, so there is one path for the data.

``advance_lake`` is a cut: read the stream's cut (the low watermark) *first*, then ingest the landing
files, then apply the cut. Every record at or below the cut was landed before the watermark moved
past it (DESIGN invariant 2), so once the files listed after reading the cut are ingested, every
transaction under the cut is complete (invariant 4). The landing directory and the lake must both
belong to the stream's source (invariant 7). A lake's first cut is the snapshot of the watched tables
at the stream's start (``start_from_snapshot``, invariant 8); ``rebuild_mirrors`` takes it again for
some tables at the latest cut. A table the stream watches since the lake's start (``ALTER CHANGE
STREAM … SET FOR …``, or a table created under ``FOR ALL``) starts the same way, with no step of
anyone's: the first cut that finds it watched leaves its changes out and publishes, and a snapshot of
it read at that cut replaces its mirror (``stream_membership``). Its rows from before it joined come
from the snapshot, its changes from the next cut on; no published cut holds part of it. A table the
stream watches no more (taken out of it, dropped under ``FOR ALL``, renamed) keeps its mirror as the
last cut that watched it left it, recorded frozen in every cut from then on; if the stream watches it
again, it joins again and is read whole. A rename is both: the old name's mirror is frozen, the new
name's is read whole. A table whose watched columns DDL changed (a column dropped, added or retyped:
no change record says so, and Spanner fills an added column's default into every row without one) is
read whole the same way at the first cut that finds its digest changed (``PublishedCut.shapes``),
so its mirror takes the table's columns and types at that cut. But not one whose only change is
columns added that no row holds a value in but those the cut's changes gave it (an ``ADD COLUMN``
with no default: every row NULL until written): its mirror and history take the new columns, NULL
in every row and version before, and the cut applies its changes as usual (``widened_tables``). A
table of a million rows is so not read again for a routine ``ADD COLUMN``.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterator, Sequence

from google.api_core.exceptions import FailedPrecondition
from google.cloud.spanner_v1.database import Database

from cs_platform.changestream.catalog import column_type, shape, watched_column_types, watched_tables_and_shapes
from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.errors import UnsupportedColumnTypeError
from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN, PartitionMetadataStore
from cs_platform.changestream.source_reads import SourceSnapshot
from cs_platform.changestream.table_snapshot import check_retention, plan_snapshot
from cs_platform.errors import TerminalError
from cs_platform.lake.changelog import IngestResult
from cs_platform.lake.published import ROOT_SETTING
from cs_platform.lake.snapshot import SnapshotResult, load_snapshot
from cs_platform.lake.stream_lake import CutResult, Lake
from cs_platform.landing.source import SourceIdentity
from cs_platform.landing.store import LandingStore
from cs_platform.storage.location import Location
from cs_platform.stream.state import StreamPosition, source_identity, stream_position

# How often a lake run waiting for the watermark to move reads it (a cut still comes at most every
# CS_PLATFORM_CUT_INTERVAL_SECONDS): a partition's first landing after a split or a merge, which
# held every cut back, is then seen within this, not up to an interval later.
WATERMARK_POLL_SECONDS = 1.0


class NoCutError(TerminalError):
    """A rebuild was asked of a lake that has no cut yet."""


class UnknownTableError(TerminalError):
    """A rebuild was asked of a table the change stream does not watch."""


@dataclass(frozen=True)
class LakeAdvance:
    position: StreamPosition
    ingested: IngestResult
    result: CutResult
    seconds: float  # what it took: ingest, the snapshots if taken, apply and publish
    snapshot: SnapshotResult | None = None  # the lake's start, when this advance took it
    joined: SnapshotResult | None = None  # the tables the stream watches since the lake's start, or reshaped, read at the cut
    reshaped: tuple[str, ...] = ()  # those of them whose watched columns DDL changed
    widened: tuple[str, ...] = ()  # tables whose only DDL was columns added with no value to read: not read whole

    @property
    def cut(self) -> datetime:
        return self.position.cut

    @property
    def versions(self) -> dict[str, int]:
        """The mirror versions published at the cut, the joined tables' included."""
        return dict(sorted({**self.result.versions, **(self.joined.versions if self.joined else {})}.items()))


def ingest_landing(lake: Lake, landing: LandingStore, stream: str, source: SourceIdentity) -> IngestResult:
    """Ingest the stream's new landing files, after checking that landing and lake are ``source``'s
    and taking the lake (its first call in a writer takes the writer's epoch)."""
    landing.check_source(stream, source)
    lake.bind(source)
    # Only then the writer's epoch (``lake.fence``): a lake run pointed at another source's lake must
    # be refused before it claims that lake's tables, or it would fence the lake's own run.
    lake.fence.check("starting a cut")
    return lake.changelog.ingest(landing.files(stream))


def start_from_snapshot(lake: Lake, target: SpannerTarget, stream: str, store: PartitionMetadataStore) -> SnapshotResult:
    """Cut T0 of every mirror: the watched tables read at the stream's start (``lake.snapshot``)."""
    start = store.get(INITIAL_PARTITION_TOKEN).start_timestamp
    return take_snapshot(lake, target, stream, start, f"the snapshot of stream {stream} at its start")


def rebuild_mirrors(lake: Lake, target: SpannerTarget, stream: str, tables: Sequence[str]) -> SnapshotResult:
    """Replace the mirrors of ``tables`` by their rows at the lake's latest cut (``lake.snapshot``)."""
    published = lake.last_published()
    if published is None:
        raise NoCutError(f"the lake of {stream} has no cut yet: its first lake run takes the snapshot of every table")
    return take_snapshot(lake, target, stream, published.cut, f"the rebuild of {', '.join(tables)} at the latest cut", tables)


@dataclass(frozen=True)
class StreamMembership:
    """How the tables a stream watches at a cut differ from the lake's live (not frozen) mirrors."""

    joined: tuple[str, ...]  # watched, with no mirror or a frozen one: read whole at the cut
    unwatched: tuple[str, ...]  # a live mirror, watched no more: frozen from the cut on
    reshaped: tuple[str, ...] = ()  # a live mirror whose table's watched columns changed: read whole at the cut
    shapes: dict[str, str] = field(default_factory=dict)  # every watched table's digest at the cut
    # Of the reshaped, those whose only change since the previous cut is columns added: each with
    # the added columns' Spanner types (``widened_tables`` decides whether they need a read).
    added: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def read_whole(self) -> tuple[str, ...]:
        return tuple(sorted((*self.joined, *self.reshaped)))


def stream_membership(
    source: Database, stream: str, cut: datetime, live: dict[str, str | None], previous: datetime | None = None
) -> StreamMembership:
    """Which tables ``stream`` watches at ``cut`` in ``source`` beside the ``live`` mirrors (every
    table watched at the lake's start has one, rows or not: the snapshot wrote it), each with the
    digest its rows have (None: not recorded, by a cs_platform before digests: taken as is). With
    the ``previous`` cut, a reshaped table whose watched columns at ``previous`` (read there, and
    the digest its mirror records) are all at ``cut`` unchanged is named with the columns added."""
    columns = watched_column_types(source, stream, cut)
    shapes = {table: shape(c) for table, c in columns.items()}
    watched = set(shapes)
    reshaped = sorted(t for t in watched & set(live) if live[t] not in (None, shapes[t]))
    added = {}
    if reshaped and previous is not None:
        before = _columns_at(source, stream, previous)
        for table in reshaped:
            was = before.get(table)
            if was is not None and shape(was) == live[table] and was.items() <= columns[table].items():
                added[table] = {name: kind for name, kind in columns[table].items() if name not in was}
    return StreamMembership(tuple(sorted(watched - set(live))), tuple(sorted(set(live) - watched)), tuple(reshaped), shapes, added)


def _columns_at(source: Database, stream: str, at: datetime) -> dict[str, dict[str, str]]:
    """The watched columns at an earlier cut; none once that cut is older than the database keeps
    versions (``version_retention_period``, an hour by default): Spanner refuses the read
    (FAILED_PRECONDITION), and the tables reshaped since are read whole, as before."""
    try:
        return watched_column_types(source, stream, at)
    except FailedPrecondition:
        return {}


def widened_tables(lake: Lake, source: Database, membership: StreamMembership, previous: datetime, cut: datetime) -> dict[str, dict[str, dict]]:
    """Of ``membership.added``, the tables that need no read: no row holds a value in an added
    column at ``cut`` but those the changes in (``previous``, ``cut``] gave one. The source counts
    its rows with a value there (one scan in Spanner, one number back); the lake counts the keys
    its changes leave with one (``Lake.keys_with_values``). The second are among the first, so the
    same count means the same rows: nothing was filled in without a change record (a default, a
    column newly watched). Each with the added columns, as ``mirrors.ensure_columns`` takes them."""
    widened = {}
    at_cut = SourceSnapshot(source, cut)
    for table, added in membership.added.items():
        try:
            columns = {name: {"name": name, "type": column_type(kind), "is_primary_key": False} for name, kind in added.items()}
        except UnsupportedColumnTypeError:
            continue  # read whole, as before: the cut names the column it cannot type
        if at_cut.rows_with_values(table, list(added)) == lake.keys_with_values(table, columns, previous, cut):
            widened[table] = columns
    return widened


def take_snapshot(
    lake: Lake, target: SpannerTarget, stream: str, at: datetime, what: str = "the snapshot", tables: Sequence[str] | None = None
) -> SnapshotResult:
    """``tables`` (every watched one if None) read at ``at`` into their mirrors (``lake.snapshot``);
    ``what`` names the snapshot in errors."""
    database = target.connect()
    check_retention(database, at, what)
    tables_at, shapes = watched_tables_and_shapes(database, stream, at)
    watched = {t.name: t for t in tables_at}
    unknown = sorted(set(tables or ()) - set(watched))
    if unknown:
        raise UnknownTableError(
            f"{', '.join(unknown)}: not watched by change stream {stream} at {at.isoformat()} (it watches "
            f"{', '.join(sorted(watched)) or 'nothing'}): a table the stream does not watch has no rows to rebuild from (a frozen "
            "mirror keeps its last ones); add it to the stream (ALTER CHANGE STREAM … SET FOR …) and the first cut after reads it whole"
        )
    transaction, plan = plan_snapshot(database, [watched[t] for t in (tables or sorted(watched))], at)
    try:
        return load_snapshot(lake, target, plan, {t: shapes[t] for t in tables or watched})
    finally:
        transaction.close()


def advance_lake(
    lake: Lake,
    landing: LandingStore,
    store: PartitionMetadataStore,
    target: SpannerTarget,
    stream: str,
    position: StreamPosition | None = None,
    connect: Callable[[], Database] | None = None,
) -> LakeAdvance | None:
    """One consistent cut at the stream's cut (``position``, read now if not given), after the
    snapshot at the stream's start if the lake has no cut yet; None before the stream has partitions.
    ``connect`` returns the source database: a caller that cuts again and again (``keep_cutting``)
    gives one that connects once; ``target.connect`` (a client and admin calls) otherwise."""
    started = time.monotonic()
    position = position or stream_position(store)  # first the watermark, then the files
    if position is None:
        return None
    ingested = ingest_landing(lake, landing, stream, source_identity(target, stream, store))
    published = lake.last_published()
    snapshot = start_from_snapshot(lake, target, stream, store) if published is None else None
    recorded = lake.last_published() if snapshot else published  # the start's snapshot records the digests at the start
    live = {t: recorded.shapes.get(t) for t in recorded.versions if t not in recorded.frozen}
    source = (connect or target.connect)()
    membership = stream_membership(source, stream, position.cut, live, recorded.cut)
    widened = widened_tables(lake, source, membership, recorded.cut, position.cut) if membership.added and position.cut > recorded.cut else {}
    replaced = tuple(t for t in membership.read_whole if t not in widened)
    result = lake.apply_cut(position.cut, snapshot_instead=replaced, unwatched=membership.unwatched, shapes=membership.shapes, widened=widened)
    if replaced and result.applied:  # the cut left their changes out: their rows at the cut replace their mirrors
        what = f"the snapshot of {', '.join(replaced)}, watched since the lake's start or reshaped by DDL"
        joined_snapshot = take_snapshot(lake, target, stream, position.cut, what, replaced)
    else:
        joined_snapshot = None
    reshaped = tuple(t for t in membership.reshaped if t not in widened)
    return LakeAdvance(position, ingested, result, round(time.monotonic() - started, 2), snapshot, joined_snapshot, reshaped, tuple(sorted(widened)))


@dataclass(frozen=True)
class TakenCut:
    advance: LakeAdvance
    last: bool  # the run's last cut: nothing follows it


def keep_cutting(
    lake: Lake,
    landing: LandingStore,
    store: PartitionMetadataStore,
    target: SpannerTarget,
    stream: str,
    seconds: float,
    interval_seconds: float,
    stop: threading.Event | None = None,
    before_cut: Callable[[], None] | None = None,
) -> Iterator[TakenCut]:
    """Cut the lake whenever the stream's low watermark moved, at most every ``interval_seconds``,
    for ``seconds`` (``math.inf``: until ``stop`` is set); what a lake run does with one Spark session.

    The first cut is taken at once, and the last at the end whether or not the watermark moved
    (then it is "already applied", a no-op), so a run always starts and ends on a cut that says
    where the lake stands; ``seconds=0`` is that one cut. A finished stream whose end is applied
    ends it early: nothing can come after. Nothing is yielded while the stream has no partitions.
    Each cut is ``advance_lake``, so every invariant of a single cut holds for each of them.
    ``before_cut`` is called before each: a run presumed dead stops there, by raising."""
    stop = stop or threading.Event()
    deadline = time.monotonic() + seconds
    applied: datetime | None = None
    next_cut = -math.inf  # the earliest the next cut may start
    connect = functools.cache(lambda: target.connect())  # the source, once for the run, not a client and admin calls per cut
    while True:
        now = time.monotonic()
        last = stop.is_set() or now + interval_seconds >= deadline
        position = stream_position(store)
        if position is not None and position.finished and position.cut == applied:
            last = True
        cutting = position is not None and (last or (position.cut != applied and now >= next_cut))
        if cutting:
            if before_cut is not None:
                before_cut()
            advance = advance_lake(lake, landing, store, target, stream, position, connect)
            yield TakenCut(advance, last)
            applied, next_cut = advance.cut, now + interval_seconds
        if last:
            return
        # After a cut the next may start once the interval has passed (the watermark has most
        # likely moved meanwhile); otherwise the watermark is looked at again every
        # WATERMARK_POLL_SECONDS (one metadata query), so a cut starts soon after it moves, not
        # up to an interval later.
        wake = next_cut if cutting else max(next_cut, now + WATERMARK_POLL_SECONDS)
        stop.wait(max(0.0, min(wake, deadline) - time.monotonic()))


@dataclass(frozen=True)
class ResetResult:
    lake_removed: bool
    landing_removed: bool
    metadata_dropped: bool


def reset_stream(lake_root: str, landing: LandingStore, stream: str, store: PartitionMetadataStore) -> ResetResult:
    """Forget a stream entirely: its lake (at ``lake_root``), its landing files, then its metadata table, so the next
    sensor tick starts it afresh (with the configured start) as a new epoch. Each step can be
    repeated; an interrupted reset is finished by running it again (the metadata table goes last,
    so a half-reset stream is refused by its own old lake rather than mixed into it)."""
    lake_location = Location(lake_root, ROOT_SETTING)
    return ResetResult(
        lake_removed=lake_location.delete_tree(lake_location.base),
        landing_removed=landing.location.delete_tree(landing.stream_directory(stream)),
        metadata_dropped=store.drop_table(),
    )
