"""The partition metadata table (Beam's ``PartitionMetadataDao``): one row per partition token.

All SQL about partition state lives here. The table is in a GoogleSQL database (the source database
or, better, a separate one so metadata writes never contend with the workload). Rules kept here:

- states only move forward: CREATED -> SCHEDULED -> RUNNING -> FINISHED (each transition is a
  conditional DML update, so a late or duplicate caller cannot move a row back);
- a watermark never moves backwards, even with racing writers (Beam #36470): the update is
  ``WHERE Watermark < @new`` inside a read-write transaction;
- a child reported by several parents (a merge) is inserted once: existence check and insert share
  one read-write transaction;
- only the partition's owner moves its watermark and state (fencing, DESIGN invariant 11): a reader
  ``take``s the partition, which records it as ``Owner`` and hands it the watermark in the same
  read-write transaction, and ``record_progress`` refuses, in the transaction that would write,
  any reader that is not the owner now (``FencedOffError``). A run presumed dead and relaunched
  can therefore land late files but never move a watermark again (docs/reader.md, "Fencing");
- the initial pseudo-partition (token NULL in the query) has the fixed key ``initial``; initializing
  an existing table is a no-op, so restarts never re-initialize (Beam #32509).

Watermark semantics: every record of the partition with commit_timestamp <= Watermark is durably
landed. A new partition starts at ``reads_from - 1µs``: nothing landed yet. The stream's first
partitions (the initial query's children, which start at the stream's start T0)
read from just after T0: a commit at T0 belongs to the snapshot (DESIGN invariant 8), so the
changelog holds exactly the commits of (T0, end].
"""

from __future__ import annotations

import enum
import hashlib
import logging
import random
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Iterable, Sequence

from google.api_core import exceptions as gexc
from google.cloud import spanner
from google.cloud.spanner_v1 import param_types
from google.cloud.spanner_v1.database import Database

from cs_platform.changestream.errors import (
    FencedOffError,
    MetadataContentionError,
    PartitionNotFoundError,
    SettingsDriftError,
)
from cs_platform.changestream.query import RpcPriority, validate_heartbeat_millis, validate_identifier
from cs_platform.changestream.records import ChildPartitionsRecord
from cs_platform.errors import InvalidArgumentError

log = logging.getLogger(__name__)

INITIAL_PARTITION_TOKEN = "initial"
ONE_MICROSECOND = timedelta(microseconds=1)
ABORTED_RETRY_SECONDS = 120  # how long a metadata transaction that Spanner keeps aborting is retried (_in_transaction)
# When Spanner aborts a transaction without saying when to retry (RetryInfo: the emulator never
# does, Cloud Spanner may not), the Python client waits 2**attempts + random() seconds: 2-3 s, then
# 4-5, then 8-9. Go's database/sql driver waits a random 1-30 ms (googleapis/go-sql-spanner PR 398),
# and so do metadata transactions here: a reader taking its partition while others commit their
# watermarks waited 2.5 s for it. 16 readers taking a partition and persisting 5 watermarks each at
# once, on the emulator: 5.3-7.8 s with the client's wait, 0.55-0.98 s with this one
# (docs/benchmarks.md, "Metadata transactions under contention"). A RetryInfo Spanner sends wins.
ABORTED_RETRY_DELAY_SECONDS = (0.001, 0.030)


class PartitionState(str, enum.Enum):
    CREATED = "CREATED"
    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"


# target state -> (states it may come from, timestamp column it stamps)
_TRANSITIONS = {
    PartitionState.SCHEDULED: ((PartitionState.CREATED,), "ScheduledAt"),
    PartitionState.RUNNING: ((PartitionState.CREATED, PartitionState.SCHEDULED), "RunningAt"),
    PartitionState.FINISHED: (
        (PartitionState.CREATED, PartitionState.SCHEDULED, PartitionState.RUNNING),
        "FinishedAt",
    ),
}

COLUMNS = (
    "PartitionToken",
    "PartitionKey",
    "ParentTokens",
    "StartTimestamp",
    "EndTimestamp",
    "HeartbeatMillis",
    "State",
    "Watermark",
    "CreatedAt",
    "ScheduledAt",
    "RunningAt",
    "FinishedAt",
    "Owner",
)
INSERTED_COLUMNS = COLUMNS[:9]  # what a new row gets; the rest stamp or name its later life


def partition_key(token: str, start: datetime) -> str:
    """A short, stable name for a partition that is safe wherever tokens are not.

    Tokens are ~200 characters of base64 (``/ + =``); orchestrators, URLs and paths want short
    ``[0-9A-Za-z-]`` names, and commas or brackets break range syntax. The key is the partition's
    start second plus a hash of the token, so keys sort roughly by time and stay unique; the
    metadata table stores it next to the token for the reverse lookup.
    """
    if token == INITIAL_PARTITION_TOKEN:
        return INITIAL_PARTITION_TOKEN
    digest = hashlib.sha256(token.encode()).hexdigest()[:12]
    return f"{start.astimezone(timezone.utc):%Y%m%dT%H%M%S}Z-{digest}"


@dataclass(frozen=True)
class PartitionMetadata:
    token: str
    parent_tokens: tuple[str, ...]
    start_timestamp: datetime
    end_timestamp: datetime | None
    heartbeat_millis: int
    state: PartitionState
    watermark: datetime
    created_at: datetime | None = None
    scheduled_at: datetime | None = None
    running_at: datetime | None = None
    finished_at: datetime | None = None
    owner: str | None = None  # the reader that took the partition last; None until one does

    @property
    def key(self) -> str:
        return partition_key(self.token, self.start_timestamp)

    @property
    def is_initial(self) -> bool:
        return self.token == INITIAL_PARTITION_TOKEN

    @property
    def reads_from(self) -> datetime:
        """The first commit timestamp this partition reads (and replays). A child of the initial
        partition is one of the stream's first: it starts at T0, whose commits are the snapshot's,
        so it reads from just after T0. (The initial query itself returns only those children.)"""
        first_of_stream = self.parent_tokens == (INITIAL_PARTITION_TOKEN,)
        return self.start_timestamp + ONE_MICROSECOND if first_of_stream else self.start_timestamp

    @property
    def query_token(self) -> str | None:
        """The token to pass to the change stream query (NULL for the initial partition)."""
        return None if self.is_initial else self.token

    @classmethod
    def from_row(cls, row: Sequence) -> "PartitionMetadata":
        values = dict(zip(COLUMNS, row))
        return cls(
            token=values["PartitionToken"],
            parent_tokens=tuple(values["ParentTokens"] or ()),
            start_timestamp=values["StartTimestamp"],
            end_timestamp=values["EndTimestamp"],
            heartbeat_millis=values["HeartbeatMillis"],
            state=PartitionState(values["State"]),
            watermark=values["Watermark"],
            created_at=values["CreatedAt"],
            scheduled_at=values["ScheduledAt"],
            running_at=values["RunningAt"],
            finished_at=values["FinishedAt"],
            owner=values["Owner"],
        )


class PartitionMetadataStore:
    """Reads and writes the partition metadata table of one change stream."""

    def __init__(
        self, database: Database, table_name: str, timeout_s: float = 30.0, priority: RpcPriority = RpcPriority.HIGH
    ) -> None:
        self.database = database
        self.timeout_s = timeout_s  # deadline of each metadata query: a tick never hangs on Spanner
        self.options = RpcPriority(priority).request_options  # every read, query and commit carries it
        self.table = validate_identifier(table_name, "metadata table name")  # quoted as `table` in every statement

    # ------------------------------------------------------------------------------ schema

    def ddl(self) -> list[str]:
        name = self.table
        return [
            f"""CREATE TABLE `{name}` (
                PartitionToken STRING(MAX) NOT NULL,
                PartitionKey STRING(64) NOT NULL,
                ParentTokens ARRAY<STRING(MAX)> NOT NULL,
                StartTimestamp TIMESTAMP NOT NULL,
                EndTimestamp TIMESTAMP,
                HeartbeatMillis INT64 NOT NULL,
                State STRING(MAX) NOT NULL,
                Watermark TIMESTAMP NOT NULL,
                CreatedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp=true),
                ScheduledAt TIMESTAMP OPTIONS (allow_commit_timestamp=true),
                RunningAt TIMESTAMP OPTIONS (allow_commit_timestamp=true),
                FinishedAt TIMESTAMP OPTIONS (allow_commit_timestamp=true),
                Owner STRING(MAX)
            ) PRIMARY KEY (PartitionToken)""",
            f"CREATE INDEX `{name}ByState` ON `{name}`(State)",
            f"CREATE UNIQUE INDEX `{name}ByKey` ON `{name}`(PartitionKey)",
        ]

    def _columns(self) -> set[str]:
        """The table's columns; empty when there is no table."""
        with self.database.snapshot() as snap:
            rows = snap.execute_sql(
                "SELECT COLUMN_NAME FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @t",
                params={"t": self.table},
                param_types={"t": param_types.STRING},
                timeout=self.timeout_s,
                request_options=self.options,
            )
            return {row[0] for row in rows}

    def table_exists(self) -> bool:
        return bool(self._columns())

    def initialized(self) -> bool:
        """Whether the stream was started here: the table holds the initial partition."""
        if not self.table_exists():
            return False
        try:
            self.get(INITIAL_PARTITION_TOKEN)
        except PartitionNotFoundError:
            return False
        return True

    def create_table_if_missing(self) -> bool:
        """Create the table, or bring one of an earlier version up to today's columns (``Owner``:
        its rows have no owner, so the first reader to take each one becomes it)."""
        columns = self._columns()
        if "Owner" in columns:
            return False
        if columns:
            self.database.update_ddl([f"ALTER TABLE `{self.table}` ADD COLUMN Owner STRING(MAX)"]).result(timeout=300)
            log.info("added column Owner to partition metadata table %s (fencing)", self.table)
            return False
        try:
            self.database.update_ddl(self.ddl()).result(timeout=300)
        except gexc.FailedPrecondition as e:
            # Another process created it between our check and our DDL: fine if it exists now.
            if not self.table_exists():
                raise
            log.info("metadata table %s was created concurrently: %s", self.table, e.message)
            return False
        log.info("created partition metadata table %s", self.table)
        return True

    def drop_table(self) -> bool:
        """Drop the table and its indexes (a stream reset); False if there was none."""
        if not self.table_exists():
            return False
        name = self.table
        ddl = [f"DROP INDEX `{name}ByState`", f"DROP INDEX `{name}ByKey`", f"DROP TABLE `{self.table}`"]
        self.database.update_ddl(ddl).result(timeout=300)
        log.info("dropped partition metadata table %s", name)
        return True

    # ---------------------------------------------------------------------------- writes

    def _in_transaction(self, work, *args):
        # Spanner aborts a read-write transaction that loses a lock conflict; the client retries it,
        # after the RetryInfo's delay or ABORTED_RETRY_DELAY_SECONDS, until ``timeout_secs`` (30 s by
        # default), then raises Aborted. Metadata transactions are small and conflict mostly with each
        # other, when many readers take or finish partitions at once: at a load of 12 on two cores the
        # emulator (one transaction at a time) kept aborting a take for more than 30 s and the read
        # failed. They keep retrying longer.
        try:
            return self.database.run_in_transaction(
                work, *args, commit_request_options=self.options, timeout_secs=ABORTED_RETRY_SECONDS,
                default_retry_delay=random.uniform(*ABORTED_RETRY_DELAY_SECONDS),
            )
        except gexc.Aborted as e:
            message = f"a transaction on partition metadata table {self.table} kept aborting for {ABORTED_RETRY_SECONDS} s (lock conflicts): {e.message}"
            raise MetadataContentionError(message) from e

    def initialize(self, start: datetime | None, end: datetime | None, heartbeat_millis: int) -> bool:
        """Create the table if needed and insert the initial partition once. True if inserted.

        ``start`` None means "now" for a new table and "whatever it has" for an existing one. A
        configured start or end that differs from the existing table's is an error naming both:
        silently keeping the old one would read a range the user no longer asked for.
        """
        validate_heartbeat_millis(heartbeat_millis)
        if end is not None and start is not None and end < start:
            raise InvalidArgumentError(f"end timestamp {end} is before start timestamp {start}")
        self.create_table_if_missing()
        initial = PartitionMetadata(
            token=INITIAL_PARTITION_TOKEN,
            parent_tokens=(),
            start_timestamp=start or utc_now(),
            end_timestamp=end,
            heartbeat_millis=heartbeat_millis,
            state=PartitionState.CREATED,
            watermark=(start or utc_now()) - ONE_MICROSECOND,
        )
        if initial.end_timestamp is not None and initial.end_timestamp < initial.start_timestamp:
            raise InvalidArgumentError(f"end timestamp {end} is before start timestamp {initial.start_timestamp}")
        if self._in_transaction(self._insert_missing, [initial]):
            return True
        existing = self.get(INITIAL_PARTITION_TOKEN)
        drift = [
            (name, f"{name} {configured.isoformat()} but metadata table {self.table} has {kept.isoformat() if kept else 'none'}")
            for name, configured, kept in (("start", start, existing.start_timestamp), ("end", end, existing.end_timestamp))
            if configured is not None and configured != kept
        ]
        if drift:
            raise SettingsDriftError(
                f"the stream was started with another time range: {'; '.join(text for _, text in drift)}. Give the "
                "table's values back, or start the stream over with the new ones.",
                fixed_by=(*(name for name, _ in drift), "start_over"),
            )
        return False

    def add_children(self, record: ChildPartitionsRecord, end: datetime | None, heartbeat_millis: int, owner: str | None = None) -> int:
        """Insert the record's children as CREATED unless present, for the announcing partition's
        ``owner`` only (None: a partition no reader has taken); returns how many were new.

        The owner is checked in the same transaction as the insert, as ``record_progress`` checks
        it: a reader presumed dead that resumes inside its read loop could otherwise insert again a
        child that cleanup deleted once it finished (its old start would take the low watermark
        back). It gets ``FencedOffError`` instead, and so does one whose own row cleanup deleted."""
        children = [
            PartitionMetadata(
                token=c.token,
                parent_tokens=c.parent_tokens,
                start_timestamp=record.start_timestamp,
                end_timestamp=end,
                heartbeat_millis=heartbeat_millis,
                state=PartitionState.CREATED,
                watermark=record.start_timestamp - ONE_MICROSECOND,
            )
            for c in record.child_partitions
        ]
        children = [replace(c, watermark=c.reads_from - ONE_MICROSECOND) for c in children]  # nothing landed yet

        def work(tx) -> int:
            self._check_owner(tx, record.partition_token, owner, "its child partitions stay as they are")
            return self._insert_missing(tx, children)

        return self._in_transaction(work)

    def _check_owner(self, transaction, token: str, owner: str | None, kept: str) -> datetime:
        """The partition's watermark, if ``owner`` still owns it; else ``FencedOffError`` saying
        what is ``kept``. A row that is gone was finished by another reader and cleaned up (for a
        partition no reader took, ``PartitionNotFoundError``)."""
        found = list(transaction.read(self.table, ["Watermark", "Owner"], spanner.KeySet(keys=[[token]]), request_options=self.options))
        if not found and owner is None:  # no reader took it: not cleanup's doing
            raise PartitionNotFoundError(f"partition token {token[:40]}… is not in metadata table {self.table}; was the table dropped?")
        if not found:
            raise FencedOffError(
                f"partition token {token[:40]}… is no longer in metadata table {self.table}: another reader finished it and "
                f"cleanup deleted it after this one ({owner}) was presumed dead; {kept} and this reader stops"
            )
        watermark, holder = found[0]
        if holder != owner:
            raise FencedOffError(
                f"partition token {token[:40]}… was taken by reader {holder} after this one ({owner}) was "
                f"presumed dead: its watermark stays at {watermark.isoformat()}, {kept}, and this reader stops. What it "
                "landed since is read again by the owner; the lake takes each change once."
            )
        return watermark

    def _insert_missing(self, transaction, partitions: list[PartitionMetadata]) -> int:
        present = self._present(transaction, {p.token for p in partitions})
        new = [p for p in partitions if p.token not in present]
        if new:
            transaction.insert(
                self.table,
                INSERTED_COLUMNS,
                [
                    [
                        p.token,
                        p.key,
                        list(p.parent_tokens),
                        p.start_timestamp,
                        p.end_timestamp,
                        p.heartbeat_millis,
                        p.state.value,
                        p.watermark,
                        spanner.COMMIT_TIMESTAMP,
                    ]
                    for p in new
                ],
            )
        return len(new)

    def transition(self, tokens: Iterable[str], to: PartitionState) -> int:
        """Move partitions forward to ``to``; rows already there or beyond are left alone."""
        tokens = list(tokens)
        if not tokens:
            return 0
        return self._in_transaction(lambda tx: self._transition(tx, tokens, PartitionState(to)))

    def _transition(self, transaction, tokens: list[str], to: PartitionState) -> int:
        """Reads the rows by key and writes mutations: no statement that scans the table, so a
        transition costs the same with a long history (the emulator's DML scans whole tables)."""
        sources, stamp = _TRANSITIONS[to]
        allowed = {s.value for s in sources}
        rows = transaction.read(
            self.table, ["PartitionToken", "State"], spanner.KeySet(keys=[[t] for t in tokens]), request_options=self.options
        )
        moving = [token for token, state in rows if state in allowed]
        if moving:
            transaction.update(
                self.table, ["PartitionToken", "State", stamp], [[t, to.value, spanner.COMMIT_TIMESTAMP] for t in moving]
            )
        return len(moving)

    def take(self, token: str, owner: str) -> PartitionMetadata:
        """Make ``owner`` the only reader that may move the partition, RUNNING; return the row as taken.

        Whoever owned it before is fenced off from then on (``record_progress``). The watermark a
        reader starts from is read in the transaction that makes it the owner, so no earlier owner
        can move it between the two. A FINISHED partition is returned untaken: there is nothing
        left to move (a replay reads it again without writing).
        """

        def work(tx) -> None:
            found = list(tx.read(self.table, ["State"], spanner.KeySet(keys=[[token]]), request_options=self.options))
            if not found:
                raise PartitionNotFoundError(f"partition token {token[:40]}… is not in metadata table {self.table}")
            if found[0][0] != PartitionState.FINISHED.value:
                self._transition(tx, [token], PartitionState.RUNNING)
                tx.update(self.table, ["PartitionToken", "Owner"], [[token, owner]])

        self._in_transaction(work)
        return self.get(token)  # with its RunningAt; an earlier owner can no longer move it

    def record_progress(self, token: str, watermark: datetime, finished: bool, owner: str | None) -> None:
        """Persist a partition's watermark (never backwards) and, if done, FINISHED, atomically,
        for the partition's ``owner`` only (None: a partition no reader has taken).

        Call only after the records up to ``watermark`` are durably landed (Beam's BundleFinalizer).
        The read and the write share one read-write transaction, so racing writers cannot move the
        watermark back, and a reader that another has taken the partition from moves nothing: it
        gets ``FencedOffError``.
        """

        def work(tx) -> None:
            if self._check_owner(tx, token, owner, "its watermark does not move") < watermark:
                tx.update(self.table, ["PartitionToken", "Watermark"], [[token, watermark]])
            if finished:
                self._transition(tx, [token], PartitionState.FINISHED)

        self._in_transaction(work)

    def delete_finished(self, older_than: timedelta, batch_rows: int = 1_000) -> list[str]:
        """Delete FINISHED rows that finished more than ``older_than`` ago, except parents of
        unfinished rows and the initial partition; returns the partition keys deleted.

        The initial partition's row stays for the stream's life: it holds the stream's start, end
        and heartbeat (``initialize`` compares what it is given with it) and its creation time is the
        epoch of the stream's identity (``stream.state.source_identity``).

        Linear in the table: one snapshot reads the unfinished rows and the old FINISHED ones, then
        deletes by key go in commits of ``batch_rows``. Safe to interrupt and to repeat, because a
        row chosen in the snapshot stays safe to delete: a FINISHED partition's children were all
        inserted while it was still being read, so no row that names it as a parent appears later.
        """
        age = int(older_than / ONE_MICROSECOND)
        with self.database.snapshot(multi_use=True) as snap:
            unfinished = self._unfinished(snap)
            rows = snap.execute_sql(
                f"SELECT PartitionToken, PartitionKey FROM `{self.table}`@{{FORCE_INDEX=`{self.table}ByState`}} "
                "WHERE State = 'FINISHED' AND FinishedAt < TIMESTAMP_SUB(CURRENT_TIMESTAMP(), INTERVAL @age MICROSECOND)",
                params={"age": age},
                param_types={"age": param_types.INT64},
                timeout=self.timeout_s,
                request_options=self.options,
            )
            kept = {t for p in unfinished for t in p.parent_tokens} | {INITIAL_PARTITION_TOKEN}
            doomed = [(token, key) for token, key in rows if token not in kept]
        for i in range(0, len(doomed), batch_rows):
            with self.database.batch(request_options=self.options) as batch:
                batch.delete(self.table, spanner.KeySet(keys=[[token] for token, _ in doomed[i : i + batch_rows]]))
        if doomed:
            log.info("deleted %d FINISHED rows from %s", len(doomed), self.table)
        return [key for _, key in doomed]

    # ----------------------------------------------------------------------------- reads

    def _query(self, where: str = "", params: dict | None = None, types: dict | None = None) -> list[PartitionMetadata]:
        sql = f"SELECT {', '.join(COLUMNS)} FROM `{self.table}` p {where} ORDER BY p.StartTimestamp, p.PartitionToken"
        with self.database.snapshot() as snap:
            rows = snap.execute_sql(sql, params=params, param_types=types, timeout=self.timeout_s, request_options=self.options)
            return [PartitionMetadata.from_row(r) for r in rows]

    def get(self, token: str) -> PartitionMetadata:
        found = self._query("WHERE p.PartitionToken = @p", {"p": token}, {"p": param_types.STRING})
        if not found:
            raise PartitionNotFoundError(f"partition token {token[:40]}… is not in metadata table {self.table}")
        return found[0]

    def get_by_key(self, key: str) -> PartitionMetadata:
        found = self._query("WHERE p.PartitionKey = @k", {"k": key}, {"k": param_types.STRING})
        if not found:
            raise PartitionNotFoundError(
                f"no partition with key {key!r} in metadata table {self.table}: keys come from this table "
                "(the sensor adds them); was the table dropped or is the run configured for another stream?"
            )
        return found[0]

    def existing_keys(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` name a partition in the table (read by key, through the key index)."""
        keys = list(keys)
        if not keys:
            return set()
        with self.database.snapshot() as snap:
            rows = snap.read(
                self.table,
                ["PartitionKey"],
                spanner.KeySet(keys=[[k] for k in keys]),
                index=f"{self.table}ByKey",
                timeout=self.timeout_s,
                request_options=self.options,
            )
            return {row[0] for row in rows}

    def all(self) -> list[PartitionMetadata]:
        return self._query()

    def unfinished(self) -> "UnfinishedPartitions":
        """Every partition not yet FINISHED: what a sensor tick decides from.

        Its cost follows the live partitions, not the history (a stream that ran for months has far
        more FINISHED rows than live ones): the State index is read over the unfinished states'
        key ranges, then their rows by primary key, in one snapshot. Reads by key, not SQL: they
        seek on Cloud Spanner and on the emulator alike (the emulator's SQL scans whole tables).
        """
        with self.database.snapshot(multi_use=True) as snap:
            partitions = self._unfinished(snap)
            unfinished = {p.token for p in partitions}
            named = {t for p in partitions if p.state is PartitionState.CREATED for t in p.parent_tokens} - unfinished - {INITIAL_PARTITION_TOKEN}
            missing = frozenset(named - self._present(snap, named, timeout=self.timeout_s))  # parents of merge children, finished or not inserted yet
        return UnfinishedPartitions(tuple(partitions), missing)

    def _present(self, reader, tokens: set[str], **read) -> set[str]:
        """Which of ``tokens`` have a row, read by key in ``reader`` (a snapshot or a transaction)."""
        if not tokens:
            return set()
        keys = spanner.KeySet(keys=[[t] for t in sorted(tokens)])
        return {row[0] for row in reader.read(self.table, ["PartitionToken"], keys, request_options=self.options, **read)}

    def _unfinished(self, snap) -> list[PartitionMetadata]:
        states = spanner.KeySet(ranges=[spanner.KeyRange(start_closed=[s.value], end_closed=[s.value]) for s in UNFINISHED])
        index = f"{self.table}ByState"
        read = dict(timeout=self.timeout_s, request_options=self.options)
        tokens = [row[0] for row in snap.read(self.table, ["PartitionToken"], states, index=index, **read)]
        if not tokens:
            return []
        rows = snap.read(self.table, COLUMNS, spanner.KeySet(keys=[[t] for t in tokens]), **read)
        return sorted((PartitionMetadata.from_row(r) for r in rows), key=lambda p: (p.start_timestamp, p.token))

    def count_finished(self) -> int:
        """How many partitions are FINISHED (cleanup keeps them as long as its caller asks,
        ``delete_finished``): counted by Spanner over the State index, one row back however many."""
        with self.database.snapshot() as snap:
            rows = snap.execute_sql(
                f"SELECT COUNT(*) FROM `{self.table}`@{{FORCE_INDEX=`{self.table}ByState`}} WHERE State = 'FINISHED'",
                timeout=self.timeout_s,
                request_options=self.options,
            )
            return list(rows)[0][0]

    def schedulable(self) -> list[PartitionMetadata]:
        return self.unfinished().schedulable

    def low_watermark(self) -> datetime | None:
        return self.unfinished().low_watermark


UNFINISHED = (PartitionState.CREATED, PartitionState.SCHEDULED, PartitionState.RUNNING)


@dataclass(frozen=True)
class UnfinishedPartitions:
    """The unfinished rows of the metadata table, read in one snapshot, and what follows from them.

    A merge child waits for every parent. In one strongly consistent snapshot, a parent that is not
    among the unfinished rows is FINISHED, or has no row: ``missing`` holds the parents that CREATED
    rows name and the table lacks. A parent without a row may not be inserted *yet*: a merge child
    is inserted by the reader of whichever parent reaches the merge first, and the other parent may
    itself be the child of a split that its own parent's reader has not reached (Cloud Spanner
    splits and merges partitions of any age, https://cloud.google.com/spanner/docs/change-streams/details#change_stream_partitions;
    seen through the front's key-range partitions). Such a parent is announced by an unfinished
    partition whose watermark is still before the parent's start, so before the child's: a child
    with a missing parent waits until every other unfinished partition has passed its start. A
    parent cleanup removed (it keeps parents of unfinished rows, ``delete_finished``; the rule does
    not depend on it) then counts as finished, and no wait is endless: the partitions it waits for
    all read towards it.
    """

    partitions: tuple[PartitionMetadata, ...]
    missing: frozenset[str] = frozenset()  # parents named by CREATED rows that have no row

    def in_states(self, *states: PartitionState) -> list[PartitionMetadata]:
        return [p for p in self.partitions if p.state in states]

    @property
    def schedulable(self) -> list[PartitionMetadata]:
        """CREATED partitions whose parents are all finished (a merge child waits for every parent)."""
        unfinished = {p.token for p in self.partitions}
        return [
            p for p in self.in_states(PartitionState.CREATED)
            if not unfinished.intersection(p.parent_tokens) and not (self.missing.intersection(p.parent_tokens) and self._behind(p))
        ]

    def _behind(self, child: PartitionMetadata) -> bool:
        """Whether an unfinished partition other than ``child`` has not yet read up to its start
        (and so may still announce a parent of it)."""
        return any(p.watermark < child.start_timestamp - ONE_MICROSECOND for p in self.partitions if p.token != child.token)

    @property
    def low_watermark(self) -> datetime | None:
        """Min watermark over unfinished partitions: every record <= it is landed, in every partition.

        None when no partition is unfinished (the stream reached its end timestamp).
        """
        return min((p.watermark for p in self.partitions), default=None)


@dataclass(frozen=True)
class Lineage:
    """How partitions descended from each other: what a reader crossed."""

    partitions: int
    splits: int  # parents with two or more children
    merges: int  # children with two or more parents


def lineage(partitions: Sequence[PartitionMetadata]) -> Lineage:
    children_per_parent = Counter(t for p in partitions for t in p.parent_tokens if t != INITIAL_PARTITION_TOKEN)
    return Lineage(
        partitions=len(partitions),
        splits=sum(1 for n in children_per_parent.values() if n >= 2),
        merges=sum(1 for p in partitions if len(p.parent_tokens) >= 2),
    )


def utc_now() -> datetime:
    return datetime.now(timezone.utc)
