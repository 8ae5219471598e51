"""Cleanup of one stream, as a Dagster asset with its own schedule: what a stream leaves behind.

A stream that runs for months leaves a FINISHED metadata row and a dynamic partition key per
partition, a run per read and a landing file per read that landed anything. Each pass removes, by
retention (``RetentionResource``):

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

from dataclasses import dataclass
from datetime import datetime, timezone

from dagster import (
    AssetExecutionContext,
    AssetKey,
    DagsterInstance,
    Definitions,
    MaterializeResult,
    RunsFilter,
    asset,
)

from cs_platform.changestream.metadata import PartitionMetadataStore
from cs_platform.defs.names import ChangeStreamNames
from cs_platform.defs.resources import ChangeStreamResource, LakeResource, LandingResource, RetentionResource
from cs_platform.defs.runs import ENDED_RUN_STATUSES
from cs_platform.defs.schedules import scheduled_job
from cs_platform.landing.store import RemovedLanding

RUNS_PER_PASS = 20_000  # a pass deletes at most this many runs; the next pass goes on


@dataclass(frozen=True)
class CleanupResult:
    partitions_removed: int
    partition_keys_removed: int
    runs_removed: int
    runs_left: int  # ended before the retention, left for the next pass (RUNS_PER_PASS)
    landing: RemovedLanding


def remove_orphan_keys(instance: DagsterInstance, partitions_def: str, store: PartitionMetadataStore) -> int:
    """Delete the dynamic partition keys whose partition is gone from the metadata table."""
    keys = instance.get_dynamic_partitions(partitions_def)
    orphans = sorted(set(keys) - store.existing_keys(keys))
    for key in orphans:
        instance.delete_dynamic_partition(partitions_def, key)
    return len(orphans)


def remove_ended_runs(instance: DagsterInstance, job_name: str, ended_before: datetime) -> tuple[int, int]:
    """Delete runs of ``job_name`` that ended before ``ended_before``; returns (removed, left)."""
    old = RunsFilter(job_name=job_name, statuses=ENDED_RUN_STATUSES, updated_before=ended_before)
    records = instance.get_run_records(old, limit=RUNS_PER_PASS, ascending=True)
    for record in records:
        instance.delete_run(record.dagster_run.run_id)
    return len(records), instance.get_runs_count(old)


def clean_up(
    instance: DagsterInstance,
    change_stream: ChangeStreamResource,
    landing: LandingResource,
    lake: LakeResource,
    retention: RetentionResource,
    partitions_def: str,
    jobs: tuple[str, ...],
    log,
) -> CleanupResult:
    store = change_stream.metadata_store()
    stream = change_stream.stream_name
    removed = store.delete_finished(retention.metadata)
    log.info(f"removed {len(removed)} FINISHED partitions from {store.table}")
    keys_removed = remove_orphan_keys(instance, partitions_def, store)
    log.info(f"removed {keys_removed} dynamic partition keys of {partitions_def}")
    now = datetime.now(timezone.utc)
    runs_removed = runs_left = 0
    for job in jobs:  # the reader's, then the lake's
        removed_now, left = remove_ended_runs(instance, job, now - retention.runs)
        log.info(f"deleted {removed_now} runs of {job} that ended before {(now - retention.runs).isoformat()} ({left} left)")
        runs_removed, runs_left = runs_removed + removed_now, runs_left + left
    from cs_platform.lake.published import ingested_landing  # reads Delta logs with pyarrow: only when a pass runs, not in reader runs

    live_keys = {p.key for p in store.unfinished().partitions}
    marks = ingested_landing(lake.stream_root(stream))
    files = landing.store().remove_ingested(stream, marks, now - retention.landing, live_keys)
    log.info(
        f"removed {files.files} ingested landing files ({files.bytes} bytes) and {files.directories} directories; "
        f"kept {files.kept_not_ingested} not yet ingested and {files.kept_recent} within the retention"
    )
    return CleanupResult(len(removed), keys_removed, runs_removed, runs_left, files)


def cleanup_definitions(names: ChangeStreamNames, cron: str) -> Definitions:
    """The cleanup asset of one stream, its job and its schedule."""
    slug, stream, resource_key, partitions_def = names.slug, names.stream, names.resource_key, names.partitions
    jobs, key = (names.job, names.lake_job), AssetKey([slug, "cleanup"])

    @asset(
        key=key,
        group_name=slug,
        kinds={"spanner", "json"},
        required_resource_keys={resource_key, "landing", "lake", "retention"},
        description=(
            f"Removes what stream {stream} leaves behind, by retention: FINISHED partitions (metadata rows and "
            "dynamic partition keys), ended reader and lake runs, and landing files the changelog has ingested. Never a "
            "file the changelog has not read, never a parent of an unfinished partition; safe to kill and re-run."
        ),
    )
    def stream_cleanup(context: AssetExecutionContext) -> MaterializeResult:
        result = clean_up(
            context.instance,
            getattr(context.resources, resource_key).validated(),
            context.resources.landing,
            context.resources.lake,
            context.resources.retention.validated(),
            partitions_def,
            jobs,
            context.log,
        )
        return MaterializeResult(metadata=cleanup_metadata(result))

    what = f"One cleanup pass over stream {stream}: finished partitions, their keys, old runs, ingested landing files"
    job, schedule = scheduled_job(f"{slug}_cleanup", key, cron, "CS_PLATFORM_CLEANUP_CRON", what)
    return Definitions(assets=[stream_cleanup], jobs=[job], schedules=[schedule])


def cleanup_metadata(result: CleanupResult) -> dict:
    return {
        "partitions_removed": result.partitions_removed,
        "partition_keys_removed": result.partition_keys_removed,
        "runs_removed": result.runs_removed,
        "runs_left_for_next_pass": result.runs_left,
        "landing_files_removed": result.landing.files,
        "landing_bytes_removed": result.landing.bytes,
        "landing_directories_removed": result.landing.directories,
        "landing_files_not_yet_ingested": result.landing.kept_not_ingested,
        "landing_files_within_retention": result.landing.kept_recent,
    }
