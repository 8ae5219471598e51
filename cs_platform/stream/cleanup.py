"""Cleanup of one stream: what a stream leaves behind, removed in a safe order.

A stream that runs for months leaves a FINISHED metadata row and a dynamic partition key per
partition, a run per read and a landing file per read that landed anything. Each pass removes, by
retention:

1. FINISHED metadata rows, never a parent of an unfinished row (``delete_finished``);
2. the dynamic partition keys whose partition is no longer in the metadata table: found by looking
   the keys up, not from step 1's result, so a pass killed between the two steps is finished by
   the next one. Their materializations stay in the event log (until their runs are deleted);
3. reader and lake runs that ended before the run retention, with their event logs (a lake run
   lives up to CS_PLATFORM_LAKE_SOFT_TIMEOUT_SECONDS and records every cut it publishes);
4. landing files the changelog has ingested (its marks, from the lake's Delta log) whose watermark
   is older than the landing retention. A file the changelog has not ingested is never removed.

Every step deletes only what is safe to delete at any moment, so a pass may be killed anywhere
and run again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Protocol

from cs_platform.changestream.metadata import PartitionMetadataStore
from cs_platform.landing.store import LandingStore, RemovedLanding


class RunRecords(Protocol):
    """What cleanup needs of the orchestrator's storage (``defs/cleanup.DagsterRunRecords``)."""

    def partition_keys(self) -> list[str]:
        """The stream's partition keys the orchestrator holds."""

    def delete_partition_key(self, key: str) -> None: ...

    def delete_ended_runs(self, job: str, ended_before: datetime) -> tuple[int, int]:
        """Delete up to a pass's worth of ``job``'s runs that ended before ``ended_before``;
        returns (removed, left for the next pass)."""


@dataclass(frozen=True)
class Retention:
    metadata: timedelta  # FINISHED metadata rows
    runs: timedelta  # ended runs and their event logs
    landing: timedelta  # ingested landing files, by watermark


@dataclass(frozen=True)
class CleanupResult:
    partitions_removed: int
    partition_keys_removed: int
    runs_removed: int
    runs_left: int  # ended before the retention, left for the next pass
    landing: RemovedLanding


def remove_orphan_keys(runs: RunRecords, store: PartitionMetadataStore) -> int:
    """Delete the partition keys whose partition is gone from the metadata table."""
    keys = runs.partition_keys()
    orphans = sorted(set(keys) - store.existing_keys(keys))
    for key in orphans:
        runs.delete_partition_key(key)
    return len(orphans)


def clean_up(
    stream: str,
    store: PartitionMetadataStore,
    runs: RunRecords,
    jobs: tuple[str, ...],
    landing: LandingStore,
    lake_root: str,
    retention: Retention,
    log,
) -> CleanupResult:
    """One pass, in the order above; ``jobs``: the reader's, then the lake's; ``lake_root``: the
    stream's lake, whose changelog says which landing files it ingested."""
    removed = store.delete_finished(retention.metadata)
    log.info(f"removed {len(removed)} FINISHED partitions from {store.table}")
    keys_removed = remove_orphan_keys(runs, store)
    log.info(f"removed {keys_removed} partition keys whose partition is gone")
    now = datetime.now(timezone.utc)
    runs_removed = runs_left = 0
    for job in jobs:
        removed_now, left = runs.delete_ended_runs(job, now - retention.runs)
        log.info(f"deleted {removed_now} runs of {job} that ended before {(now - retention.runs).isoformat()} ({left} left)")
        runs_removed, runs_left = runs_removed + removed_now, runs_left + left
    from cs_platform.lake.published import ingested_landing  # reads Delta logs with pyarrow: only when a pass runs, not in reader runs

    live_keys = {p.key for p in store.unfinished().partitions}
    files = landing.remove_ingested(stream, ingested_landing(lake_root), now - retention.landing, live_keys)
    log.info(
        f"removed {files.files} ingested landing files ({files.bytes} bytes) and {files.directories} directories; "
        f"kept {files.kept_not_ingested} not yet ingested and {files.kept_recent} within the retention"
    )
    return CleanupResult(len(removed), keys_removed, runs_removed, runs_left, files)
