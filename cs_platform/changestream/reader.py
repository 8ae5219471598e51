"""Read one partition from its watermark until a soft deadline or the partition's end.

Beam's ``ReadChangeStreamPartitionDoFn`` + ``QueryChangeStreamAction``, minus the runner. The soft
deadline is passed to Spanner as the query's end timestamp: the server then ends the query cleanly
at the deadline having returned every record up to it, so the batch ends on an exact, safe
watermark instead of wherever a cancelled stream happened to stop. On the emulator the same range is
read as polled windows that are already past (``tail.LiveTail``; the emulator drops commits on its
internal scan boundaries when it streams).

The returned watermark W keeps DESIGN invariant 2: every record of this partition with
commit_timestamp <= W is in the batch. While streaming, W is the latest heartbeat, or just below the
latest data record (more records of that same timestamp may still follow), or the query's end once
the query completes. W is never inside a transaction: a transaction's records in one partition share
one commit timestamp, and W only passes a timestamp once a later record, a heartbeat or the end
proves that timestamp complete.

One exception bounds memory: when the mods of one commit timestamp T alone (a huge transaction)
fill a chunk, the chunk is handed out before T is complete, holding the first n mods of T that the
partition returns (``PartitionBatch.mods_past_watermark`` = n, counted from T's first mod), with
its watermark held at T - 1 µs. The next chunk starts at T; so does a re-read after a crash or a
retry, which returns T's mods again in the same order, so "the first n mods of T" names the same
mods in every read (docs/reader.md, "Huge transactions").

Both partition modes are read (docs/reader.md, "Both partition modes"): an IMMUTABLE_KEY_RANGE
partition ends at its child partitions record; a MUTABLE_KEY_RANGE one announces new partitions with
start records as it goes on, and ends at its end record.

New partitions are recorded in the metadata table as soon as their record arrives, but the partition is
not marked FINISHED here: the caller lands the batch first, then calls
``PartitionMetadataStore.record_progress(token, batch.watermark, batch.finished)``.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Iterator

from google.api_core import exceptions as gexc
from google.cloud.spanner_v1.database import Database

from cs_platform.changestream.errors import (
    DatabaseNotFoundError,
    InvalidPartitionTokenError,
    PartitionEndedWithoutChildrenError,
    ResultTooLargeError,
    StartTimestampOutOfRangeError,
    UnknownChangeStreamError,
)
from cs_platform.changestream.mapper import GoogleSqlRowMapper, PostgresRowMapper
from cs_platform.changestream.metadata import (
    ONE_MICROSECOND,
    PartitionMetadata,
    PartitionMetadataStore,
    utc_now,
)
from cs_platform.changestream.proto_mapper import ProtoRowMapper, is_proto_row_type
from cs_platform.changestream.query import ChangeStreamQuery, Dialect, RpcPriority
from cs_platform.changestream.records import (
    ChangeRecord,
    ChildPartition,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
    PartitionEndRecord,
    PartitionEventRecord,
    PartitionStartRecord,
)
from cs_platform.changestream.tail import STREAMING, LiveTail
from cs_platform.errors import InvalidArgumentError, TerminalError, TransientError

log = logging.getLogger(__name__)

# A query that returns this much earlier than its end timestamp without children ended early.
# Covers clock skew between this host and Spanner (the emulator runs ~70 ms ahead).
CLOCK_SKEW_ALLOWANCE = timedelta(seconds=2)
# How far ahead of now a query may end: a MUTABLE_KEY_RANGE stream refuses an end timestamp more
# than 30 minutes ahead (https://cloud.google.com/spanner/docs/change-streams/details); a longer read
# sends the next query when one ends. Less than 30, for the clock skew between this host and Spanner.
MAX_QUERY_AHEAD = timedelta(minutes=25)
# A window whose result the server could not hold is halved, down to this.
MIN_WINDOW = timedelta(milliseconds=100)
# A run lands its read in chunks of about this many mods, and at least this often while its
# watermark moves (the defaults of the settings that choose them).
DEFAULT_CHUNK_MODS = 20_000
DEFAULT_CHUNK_INTERVAL = timedelta(seconds=2)


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for transient gRPC failures; each retry resumes just after the safe watermark.

    ``max_attempts`` counts failures in a row without progress: a failure after the watermark moved
    starts the count again, so a long read that a flaky link interrupts now and then goes on for as
    long as it makes progress, and one that makes none gives up after ``max_attempts``. The backoff
    doubles from ``initial_backoff_s`` up to ``max_backoff_s`` and is jittered (half of it at random,
    https://cloud.google.com/spanner/docs/error-codes: "retry using exponential backoff"), so the
    runs that one outage interrupted do not all come back in the same instant."""

    max_attempts: int = 8
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 10.0

    def backoff(self, attempt: int) -> float:
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * (2 ** (attempt - 1)))
        return ceiling * random.uniform(0.5, 1.0)


@dataclass(frozen=True)
class PartitionBatch:
    """What one read of one partition produced."""

    partition_token: str
    query_start: datetime
    query_end: datetime
    records: tuple[DataChangeRecord, ...]
    children: tuple[ChildPartition, ...]
    watermark: datetime
    finished: bool
    heartbeats: int = 0
    retries: int = 0
    read_started_at: datetime | None = None  # wall clock when the first query was sent
    first_response_s: float | None = None  # seconds from then to the first record of any kind
    # 0: the batch holds nothing committed after its watermark. n > 0: it also holds mods committed
    # at watermark + 1 µs, the first n of them this partition returns (the last of those it holds is
    # the n-th): that commit timestamp's mods outgrew a chunk and are handed out in pieces.
    mods_past_watermark: int = 0

    @property
    def mod_count(self) -> int:
        return sum(len(r.mods) for r in self.records)

    @property
    def transaction_ids(self) -> set[str]:
        return {r.server_transaction_id for r in self.records}


def narrowed_window(failed: timedelta) -> timedelta | None:
    """After a window whose result the server could not hold: half of it, never less than
    ``MIN_WINDOW``; None once a window of ``MIN_WINDOW`` or less failed (nothing narrower is
    tried). A failure in the last 200 ms of a query's window (a loaded reader's query that reached
    its end late) is so tried again in a window of ``MIN_WINDOW``, not taken for a narrow one."""
    if failed <= MIN_WINDOW:
        return None
    return max(failed / 2, MIN_WINDOW)


@dataclass
class _Progress:
    """Mutable state of one read; survives retries. Counters are per chunk (reset when one is taken)."""

    watermark: datetime
    chunk_start: datetime  # where the records not yet handed out begin
    records: list[DataChangeRecord] = field(default_factory=list)
    mods: int = 0  # mods in ``records``
    children: dict[str, ChildPartition] = field(default_factory=dict)  # partitions this one announced
    end: datetime | None = None  # the partition's last timestamp, once a record said it ends
    heartbeats: int = 0
    retries: int = 0
    first_response_s: float | None = None
    chunk_began: float = field(default_factory=time.monotonic)  # when the last chunk was taken (or the read began)
    chunked: bool = False  # a chunk was taken in this read
    # Mods at watermark + 1 µs handed out in pieces so far, counted from that timestamp's first mod
    # (see the module docstring): 0 when no piece is open.
    pieces_mods: int = 0
    # A replay leaves the metadata table alone: its children were recorded by the first read, and
    # cleanup may have removed them since (inserting them again would read them again).
    record_children: bool = True

    def drop_unsafe_records(self) -> None:
        """Before a retry, drop records past the watermark: the retry returns them again, from the
        first mod at watermark + 1 µs, so a piece count open there starts again too."""
        self.records = [r for r in self.records if r.commit_timestamp <= self.watermark]
        self.mods = sum(len(r.mods) for r in self.records)
        self.pieces_mods = 0

    def take_records(self, chunk_mods: int | None) -> tuple[list[DataChangeRecord], int]:
        """Hand out the records at or below the watermark (every record up to it is among them) and
        keep the rest, which share the latest commit timestamp (more of it may follow); or, when
        none is safe and that timestamp's records alone hold ``chunk_mods`` mods, hand them all out
        as a piece. Returns the records and the batch's ``mods_past_watermark``."""
        safe = [r for r in self.records if r.commit_timestamp <= self.watermark]
        if self.watermark >= self.chunk_start:  # the timestamp handed out in pieces (if any) is complete
            self.pieces_mods = 0
        if not safe and chunk_mods and self.mods >= chunk_mods:
            self.pieces_mods += self.mods  # the mods of ``records``, kept as they arrive
            piece, self.records, self.mods = self.records, [], 0
            handed_out = self.pieces_mods
        else:
            self.records = [r for r in self.records if r.commit_timestamp > self.watermark]
            self.mods = sum(len(r.mods) for r in self.records)
            piece, handed_out = safe, 0
        self.chunk_start = self.watermark + ONE_MICROSECOND  # after a piece: the open timestamp
        self.chunk_began, self.chunked = time.monotonic(), True
        return piece, handed_out

    def chunk_due(self, chunk_mods: int | None, interval: timedelta | None) -> bool:
        """A chunk is due once ``chunk_mods`` mods are read (those safe below the watermark, or, if
        none is, those of the one open commit timestamp, as a piece), or ``interval`` after the last
        one if the watermark moved since (then it may hold heartbeats only: the watermark alone
        moves). The read's first chunk is due as soon as its watermark is within ``interval`` of
        now: a partition that was not being read (a new child of a split or a merge, or one a
        rotation resumes) is what holds every cut back, so it lands once it has caught up, not an
        interval after its run started."""
        if chunk_mods and self.mods >= chunk_mods:
            return True
        if interval is None or self.watermark < self.chunk_start:
            return False
        if not self.chunked and utc_now() - self.watermark <= interval:
            return True
        return time.monotonic() - self.chunk_began >= interval.total_seconds()


OUT_OF_MEMORY = "Out of memory"  # RESOURCE_EXHAUSTED for a result the server cannot hold: narrow, do not retry


def _is_transient(error: gexc.GoogleAPICallError) -> bool:
    """Whether the same query may succeed if sent again (docs/reader.md, "Errors and retries").

    Following https://cloud.google.com/spanner/docs/error-codes: UNAVAILABLE, ABORTED and
    DEADLINE_EXCEEDED are retried; RESOURCE_EXHAUSTED is a quota or an overloaded server, retried
    with backoff, unless the server ran out of memory for this query's result (then the window is
    narrowed instead); INTERNAL only for a reset stream (the errors the client library itself
    resumes, ``_STREAM_RESUMPTION_INTERNAL_ERROR_MESSAGES``); NOT_FOUND only for a session the
    server deleted (https://cloud.google.com/spanner/docs/sessions), never for a database."""
    text = str(error)
    if isinstance(error, (gexc.ServiceUnavailable, gexc.Aborted, gexc.DeadlineExceeded)):
        return True
    if isinstance(error, gexc.ResourceExhausted):
        return OUT_OF_MEMORY not in text
    if isinstance(error, gexc.NotFound):
        return "Session not found" in text
    return isinstance(error, gexc.InternalServerError) and (
        "RST_STREAM" in text or "unexpected EOS" in text or "Received RST" in text
    )


def translate_error(error: gexc.GoogleAPICallError, stream: str, key: str, start: datetime) -> Exception:
    """Map a Spanner error of a change stream query to a named error with a fix in its message.
    ``key``: the partition's key (``initial`` for the initial partition)."""
    text = str(error)
    where = f"partition {key}"
    if _is_transient(error):
        return TransientError(f"transient Spanner error reading {where} of stream {stream}: {text}")
    if isinstance(error, gexc.InvalidArgument) and "Table-valued function not found" in text:
        return UnknownChangeStreamError(
            f"change stream {stream!r} does not exist in the database: create it "
            f"(CREATE CHANGE STREAM {stream} FOR …) or fix the stream's name.",
            fixed_by=("stream",),
        )
    if isinstance(error, gexc.InvalidArgument) and "partition_token" in text:
        return InvalidPartitionTokenError(
            f"Spanner rejected the token of {where} for stream {stream}: it does not belong to this "
            "stream; drop the metadata table (or use a new one) to restart from the initial partition"
        )
    if isinstance(error, gexc.OutOfRange) and "heartbeat" in text:
        return InvalidArgumentError(f"heartbeat rejected by Spanner for stream {stream}: {text}")
    if isinstance(error, gexc.OutOfRange):
        return StartTimestampOutOfRangeError(
            f"start timestamp {start.isoformat()} for {where} of stream {stream} is outside what Spanner "
            "can serve (before the stream was created or older than its retention period): use a start "
            f"timestamp inside the retention window. Spanner said: {error.message}"
        )
    if isinstance(error, gexc.ResourceExhausted):  # out of memory: every other one is transient
        return ResultTooLargeError(f"Spanner ran out of memory for the query of {where} of stream {stream}: {error.message}")
    if isinstance(error, gexc.NotFound):
        return DatabaseNotFoundError(f"database or instance not found while reading stream {stream}: {error.message}")
    return TerminalError(f"Spanner error reading {where} of stream {stream}: {text}")


class _BoundedRestarts:
    """The client library restarts a query's stream after UNAVAILABLE at once and without end
    (google-cloud-spanner, ``snapshot._restart_on_unavailable``): against a server that kept
    refusing, reader runs spun at ~30% of a core each for an hour, holding their run slots. Given
    as the query's ``retry``, which the library's call applies to the stream's first call and to
    each restart, this waits before each restart as the reader's own retries do (so a burst of
    UNAVAILABLE from a busy server costs waits, not a spinning core), and past ``limit`` restarts
    of one query (minutes of backoff) ends it with DEADLINE_EXCEEDED, which the library does not
    restart: the reader's own retry (``RetryPolicy``) resumes from the safe watermark, and gives up
    when the watermark stops moving. A restart that the stream's resume token serves costs one
    backoff."""

    def __init__(self, policy: RetryPolicy, limit: int = 20) -> None:
        self.policy, self.limit, self.restarts = policy, limit, -1  # the first call is no restart

    def __call__(self, call):
        @functools.wraps(call)
        def bounded(*args, **kwargs):
            self.restarts += 1
            if self.restarts > self.limit:
                raise gexc.DeadlineExceeded(f"the query's stream was restarted {self.limit} times after UNAVAILABLE; retrying from the watermark")
            if self.restarts:
                time.sleep(self.policy.backoff(self.restarts))
            return call(*args, **kwargs)

        return bounded


class PartitionReader:
    """Reads partitions of one change stream (Beam's partition-reading DoFn, without the runner)."""

    def __init__(
        self,
        database: Database,
        query: ChangeStreamQuery,
        metadata: PartitionMetadataStore,
        retry: RetryPolicy = RetryPolicy(),
        tail: LiveTail = STREAMING,
        priority: RpcPriority = RpcPriority.HIGH,
    ) -> None:
        self.database = database
        self.options = RpcPriority(priority).request_options
        self.query = query
        self.metadata = metadata
        self.retry = retry
        self.tail = tail

    def read(self, partition: PartitionMetadata, soft_timeout: timedelta) -> PartitionBatch:
        """Read ``partition`` from just after its watermark for at most ``soft_timeout``, in one batch."""
        (batch,) = self.read_chunks(partition, soft_timeout, chunk_mods=None, chunk_interval=None)
        return batch

    def read_chunks(
        self,
        partition: PartitionMetadata,
        soft_timeout: timedelta,
        chunk_mods: int | None = DEFAULT_CHUNK_MODS,
        chunk_interval: timedelta | None = DEFAULT_CHUNK_INTERVAL,
        stop: threading.Event | None = None,
    ) -> Iterator[PartitionBatch]:
        """Read ``partition`` from just after its watermark for at most ``soft_timeout``, handing
        out a chunk whenever ``chunk_mods`` mods are safe below the watermark, and ``chunk_interval``
        after the last chunk if the watermark moved since (both None: one chunk).

        ``stop`` set (a drain: the run was asked to end) ends the read at the next response (a
        record or a heartbeat, one every heartbeat interval at least) or at once between polled
        windows: the last chunk then holds what is safe below the watermark so far, as any chunk
        does, and never says the partition finished.

        Each chunk holds every record of the partition in (previous chunk's watermark, its
        watermark], and a piece also the first ``mods_past_watermark`` mods just past it (a
        transaction larger than a chunk); the last one says whether the partition finished. Land a
        chunk and persist its watermark before asking for the next: memory then holds one chunk,
        not the whole read, and what the run read reaches the lake while the run goes on, not when
        it ends.
        """
        query_start = max(partition.reads_from, partition.watermark + ONE_MICROSECOND)
        query_end = utc_now() + soft_timeout
        if partition.end_timestamp is not None:
            query_end = min(query_end, partition.end_timestamp)
        return self._read(partition, query_start, max(query_end, query_start), partition.watermark, chunk_mods, chunk_interval, stop=stop)

    def replay(self, partition: PartitionMetadata, chunk_mods: int | None = None) -> Iterator[PartitionBatch]:
        """Re-read what the partition has already landed: [reads_from, watermark] (a backfill), in chunks.

        The chunks' ``finished`` and watermarks say nothing new about the partition; callers land
        them (duplicates are removed downstream by change identity) and leave the metadata row alone.
        """
        start = partition.reads_from
        end = max(partition.watermark, start)
        return self._read(partition, start, end, start - ONE_MICROSECOND, chunk_mods, None, replay=True)

    def _read(
        self,
        partition: PartitionMetadata,
        query_start: datetime,
        query_end: datetime,
        watermark: datetime,
        chunk_mods: int | None,
        chunk_interval: timedelta | None,
        replay: bool = False,
        stop: threading.Event | None = None,
    ) -> Iterator[PartitionBatch]:
        """Query ``[query_start, query_end]``: in one streaming query, or in polled windows (``tail``)."""
        stop = stop or threading.Event()
        progress = _Progress(watermark=watermark, chunk_start=query_start, record_children=not replay)
        read_started_at, began = utc_now(), time.monotonic()
        chunk = functools.partial(self._chunk, partition, query_end, progress, read_started_at, chunk_mods)
        span: timedelta | None = None  # set once a window's result was too large for the server
        while True:
            window_end = min(self.tail.window_end(utc_now(), query_end), utc_now() + MAX_QUERY_AHEAD)
            if span is not None:
                window_end = min(window_end, max(query_start, progress.watermark + ONE_MICROSECOND) + span)
            if window_end >= max(query_start, progress.watermark + ONE_MICROSECOND):
                try:
                    for _ in self._query(partition, query_start, window_end, progress, began, chunk_mods, chunk_interval, stop):
                        yield chunk(False)
                except ResultTooLargeError as e:
                    span = self._narrower(partition, progress, query_start, window_end, e)
                    continue
                if stop.is_set():  # the query may have ended early: its window is not done
                    break
                if self._window_done(partition, progress, window_end):
                    break
                if window_end < query_end and progress.chunk_due(None, chunk_interval):
                    yield chunk(False)  # polled windows: the interval is checked between them
            if window_end >= query_end or stop.wait(self.tail.pause_s(utc_now(), query_end)):
                break

        finished = not stop.is_set() and (
            progress.end is not None or (partition.end_timestamp is not None and progress.watermark >= partition.end_timestamp)
        )
        yield chunk(finished)

    def _narrower(
        self, partition: PartitionMetadata, progress: _Progress, query_start: datetime, window_end: datetime, error: ResultTooLargeError
    ) -> timedelta:
        """The window to read on in (``narrowed_window``); the records before the failure up to the watermark stay."""
        progress.drop_unsafe_records()
        span = narrowed_window(window_end - max(query_start, progress.watermark + ONE_MICROSECOND))
        if span is None:
            raise error
        log.info("[%s] the server could not hold the query's result; reading on in windows of %s", partition.key, span)
        return span

    def _chunk(
        self,
        partition: PartitionMetadata,
        query_end: datetime,
        progress: _Progress,
        read_started_at: datetime,
        chunk_mods: int | None,
        finished: bool,
    ) -> PartitionBatch:
        query_start = progress.chunk_start
        records, mods_past_watermark = progress.take_records(chunk_mods)
        batch = PartitionBatch(
            partition_token=partition.token,
            query_start=query_start,
            query_end=query_end,
            records=tuple(records),
            mods_past_watermark=mods_past_watermark,
            children=tuple(progress.children.values()) if finished else (),
            watermark=progress.watermark,
            finished=finished,
            heartbeats=progress.heartbeats,
            retries=progress.retries,
            read_started_at=read_started_at,
            first_response_s=progress.first_response_s,
        )
        progress.heartbeats = progress.retries = 0
        log.info(
            "[%s] read %d records (%d mods), %d heartbeats%s; watermark %s%s",
            partition.key,
            len(batch.records),
            batch.mod_count,
            batch.heartbeats,
            f", {len(batch.children)} children" if finished else " (a chunk)",
            batch.watermark.isoformat() + (f" (+{mods_past_watermark} mods after it: a piece)" if mods_past_watermark else ""),
            ", partition finished" if finished else "",
        )
        return batch

    def _query(
        self,
        partition: PartitionMetadata,
        query_start: datetime,
        query_end: datetime,
        progress: _Progress,
        began: float,
        chunk_mods: int | None,
        chunk_interval: timedelta | None,
        stop: threading.Event,
    ) -> Iterator[None]:
        """Run one query to completion (or until ``stop`` is set), retrying transient failures from
        the safe watermark; yield whenever a chunk is due (the caller takes it)."""
        attempt = 0
        failed_at = None  # the watermark at the last failure: a failure past it starts the count again
        while True:
            start = max(query_start, progress.watermark + ONE_MICROSECOND)
            try:
                for record in self._records(partition, start, query_end):
                    if progress.first_response_s is None:
                        progress.first_response_s = time.monotonic() - began
                    self._apply(partition, record, progress)
                    while progress.chunk_due(chunk_mods, chunk_interval):  # what a chunk leaves may fill a piece
                        yield
                    if stop.is_set():
                        return  # the query's generator, dropped here, is closed and its stream cancelled
                return
            except TransientError as e:
                attempt = 1 if failed_at is None or progress.watermark > failed_at else attempt + 1
                failed_at = progress.watermark
                progress.retries += 1
                if attempt >= self.retry.max_attempts:
                    raise
                progress.drop_unsafe_records()
                pause = self.retry.backoff(attempt)
                log.warning("[%s] %s; retry %d in %.1fs from %s", partition.key, e, attempt, pause, start)
                time.sleep(pause)

    def _window_done(self, partition: PartitionMetadata, progress: _Progress, window_end: datetime) -> bool:
        """A query up to ``window_end`` completed: advance the watermark; True if the partition ended."""
        if progress.end is not None:
            progress.watermark = max(progress.watermark, progress.end)
            return True
        if utc_now() + CLOCK_SKEW_ALLOWANCE < window_end:
            raise PartitionEndedWithoutChildrenError(
                f"the query for partition {partition.key} of stream {self.query.stream_name} "
                f"ended before its end timestamp {window_end.isoformat()} without reporting child partitions; "
                "not marking it finished (records would be lost). Re-run the read; report it if it repeats."
            )
        # A completed query has returned every record up to its end timestamp.
        progress.watermark = max(progress.watermark, window_end)
        return False

    def _apply(self, partition: PartitionMetadata, record: ChangeRecord, progress: _Progress) -> None:
        if isinstance(record, DataChangeRecord):
            progress.records.append(record)
            progress.mods += len(record.mods)
            progress.watermark = max(progress.watermark, record.commit_timestamp - ONE_MICROSECOND)
        elif isinstance(record, HeartbeatRecord):
            progress.heartbeats += 1
            progress.watermark = max(progress.watermark, record.timestamp)
        elif isinstance(record, ChildPartitionsRecord):
            self._announce(partition, record, progress)
            progress.end = record.start_timestamp - ONE_MICROSECOND  # every record of it precedes its children's start
        elif isinstance(record, PartitionStartRecord):
            # MUTABLE_KEY_RANGE: new partitions, read at once (no parent to wait for: the lake's cut
            # waits for every live partition); the initial query's announce the stream's first ones.
            parents = (partition.token,) if partition.is_initial else ()
            children = tuple(ChildPartition(token, parents) for token in record.partition_tokens)
            self._announce(partition, ChildPartitionsRecord(partition.token, record.start_timestamp, record.record_sequence, children), progress)
            progress.watermark = max(progress.watermark, record.start_timestamp - ONE_MICROSECOND)
            if partition.is_initial:
                progress.end = record.start_timestamp - ONE_MICROSECOND
        elif isinstance(record, PartitionEndRecord):
            progress.end = record.end_timestamp  # the partition's last record: nothing of it comes later
            progress.watermark = max(progress.watermark, record.end_timestamp)
        elif isinstance(record, PartitionEventRecord):
            progress.watermark = max(progress.watermark, record.commit_timestamp - ONE_MICROSECOND)
            log.info(
                "[%s] key ranges moved at %s: in from %d partition(s), out to %d",
                partition.key, record.commit_timestamp.isoformat(), len(record.moved_in_from), len(record.moved_out_to),
            )

    def _announce(self, partition: PartitionMetadata, record: ChildPartitionsRecord, progress: _Progress) -> None:
        """Record announced partitions as CREATED (once: several partitions may announce one)."""
        if progress.record_children:
            self.metadata.add_children(record, partition.end_timestamp, partition.heartbeat_millis, partition.owner)
        for child in record.child_partitions:
            progress.children[child.token] = child

    def _mapper(self, partition: PartitionMetadata, fields):
        """The mapper for a query's row type: a GoogleSQL MUTABLE_KEY_RANGE stream says so in it
        (a PROTO column); a PostgreSQL one is read through the function its mode names."""
        if self.query.dialect is Dialect.POSTGRESQL:
            return ProtoRowMapper(partition.token) if self.query.mutable else PostgresRowMapper(partition.token)
        return ProtoRowMapper(partition.token) if is_proto_row_type(fields) else GoogleSqlRowMapper(partition.token, fields)

    def _records(self, partition: PartitionMetadata, start: datetime, end: datetime) -> Iterator[ChangeRecord]:
        """Run one query and yield its records; Spanner errors come out as named errors."""
        token = partition.query_token
        statement = self.query.statement(start, end, token)
        try:
            with self.database.snapshot() as snapshot:
                results = snapshot.execute_sql(
                    statement.sql,
                    params=statement.params,
                    param_types=statement.param_types,
                    lazy_decode=True,
                    request_options=self.options,
                    retry=_BoundedRestarts(self.retry),
                )
                rows = iter(results)
                first = next(rows, None)
                if first is None:
                    return
                mapper = self._mapper(partition, results.fields)
                yield from mapper.map_row(first)
                for row in rows:
                    yield from mapper.map_row(row)
        except gexc.GoogleAPICallError as e:
            raise translate_error(e, self.query.stream_name, partition.key, start) from e
