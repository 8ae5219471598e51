"""Cleanup of one stream as a Dagster asset with its own schedule. The pass and its order are
``cs_platform.stream.cleanup``; this gives it Dagster's run storage and the resources' settings."""

from dataclasses import dataclass
from datetime import datetime

from dagster import (
    AssetExecutionContext,
    AssetKey,
    DagsterInstance,
    Definitions,
    MaterializeResult,
    RunsFilter,
    asset,
)

from cs_platform.defs.names import ChangeStreamNames
from cs_platform.defs.runs import ENDED_RUN_STATUSES
from cs_platform.defs.schedules import scheduled_job
from cs_platform.settings import naming_settings
from cs_platform.stream.cleanup import CleanupResult, clean_up

RUNS_PER_PASS = 20_000  # a pass deletes at most this many runs per job; the next pass goes on


@dataclass(frozen=True)
class DagsterRunRecords:
    """``cleanup.RunRecords`` on a Dagster instance: the stream's dynamic partition keys and runs.
    A deleted run takes its event log (its materializations) with it."""

    instance: DagsterInstance
    partitions_def: str

    def partition_keys(self) -> list[str]:
        return list(self.instance.get_dynamic_partitions(self.partitions_def))

    def delete_partition_key(self, key: str) -> None:
        self.instance.delete_dynamic_partition(self.partitions_def, key)

    def delete_ended_runs(self, job: str, ended_before: datetime) -> tuple[int, int]:
        old = RunsFilter(job_name=job, statuses=ENDED_RUN_STATUSES, updated_before=ended_before)
        records = self.instance.get_run_records(old, limit=RUNS_PER_PASS, ascending=True)
        for record in records:
            self.instance.delete_run(record.dagster_run.run_id)
        return len(records), self.instance.get_runs_count(old)


def cleanup_definitions(names: ChangeStreamNames, cron: str) -> Definitions:
    """The cleanup asset of one stream, its job and its schedule."""
    slug, stream, resource_key = names.slug, names.stream, names.resource_key
    key = AssetKey([slug, "cleanup"])

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
        retention = context.resources.retention.validated().retention()
        with naming_settings(stream):
            result = clean_up(
                stream,
                getattr(context.resources, resource_key).validated().metadata_store(),
                DagsterRunRecords(context.instance, names.partitions),
                (names.job, names.lake_job),
                context.resources.landing.store(),
                context.resources.lake.stream_root(stream),
                retention,
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
