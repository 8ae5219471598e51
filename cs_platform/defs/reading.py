"""The body of a per-token run: mark RUNNING, read until the soft timeout, land, persist, report.

The order is the correctness argument (DESIGN invariant 2, Beam's BundleFinalizer): the watermark
is persisted only after the landing write returned, so a crash at any point either loses nothing
(the next run resumes from the old watermark) or lands a duplicate (removed downstream by change
identity). A FINISHED partition is replayed instead: its range is read again and landed without
touching the metadata row, which is what a backfill means here.
"""

from __future__ import annotations

from dagster import AssetExecutionContext, Failure, MaterializeResult, MetadataValue

from cs_platform.changestream.metadata import PartitionMetadata, PartitionState, utc_now
from cs_platform.changestream.reader import PartitionBatch
from cs_platform.defs.resources import ChangeStreamResource, LandingResource
from cs_platform.defs.runs import live_runs_by_partition
from cs_platform.landing.store import LandedFile


def read_and_land(
    context: AssetExecutionContext, job_name: str, change_stream: ChangeStreamResource, landing_resource: LandingResource
) -> MaterializeResult:
    store = change_stream.metadata_store()
    key = context.partition_key
    partition = store.get_by_key(key)
    _refuse_concurrent_read(context, job_name, key)
    landing = landing_resource.store(change_stream.source_identity())
    landing.bind(change_stream.stream_name)  # refuse another source's directory before reading anything
    reader = change_stream.reader()
    replay = partition.state is PartitionState.FINISHED
    if replay:
        context.log.info(f"partition {key} is FINISHED: replaying {partition.start_timestamp} .. {partition.watermark}")
        batch = reader.replay(partition)
    else:
        store.transition([partition.token], PartitionState.RUNNING)
        partition = store.get(partition.token)
        context.log.info(
            f"reading partition {key} ({partition.state.value}) from watermark {partition.watermark.isoformat()} "
            f"for up to {change_stream.soft_timeout_seconds:g}s"
        )
        batch = reader.read(partition, change_stream.soft_timeout)
    landed = landing.write(change_stream.stream_name, key, batch)
    if landed:
        context.log.info(f"landed {landed.rows} mods in {landed.path} ({landed.bytes} bytes)")
    if not replay:
        store.record_progress(partition.token, batch.watermark, batch.finished)
    return MaterializeResult(metadata=materialization_metadata(partition, batch, landed, replay))


def _refuse_concurrent_read(context: AssetExecutionContext, job_name: str, key: str) -> None:
    """Two runs reading one partition would race on its watermark: refuse to be the second."""
    others = [
        r.dagster_run.run_id
        for r in live_runs_by_partition(context.instance, job_name, context.asset_key).get(key, [])
        if r.dagster_run.run_id != context.run_id
    ]
    if others:
        raise Failure(
            description=(
                f"partition {key} is already being read by run(s) {', '.join(others)}; wait for them to end "
                "or cancel them, then re-materialize"
            ),
            allow_retries=False,
        )


def _seconds_between(earlier, later) -> float | None:
    return None if earlier is None or later is None else round((later - earlier).total_seconds(), 2)


def materialization_metadata(
    p: PartitionMetadata, batch: PartitionBatch, landed: LandedFile | None, replay: bool
) -> dict:
    """What a data engineer asks of one read: how much, how far, how late, and what it found."""
    commits = [r.commit_timestamp for r in batch.records]
    # A replay re-reads a FINISHED partition: it is finished, and lags nothing.
    finished = replay or batch.finished
    metadata = {
        "partition_token": p.token,
        "replay": replay,
        "records": len(batch.records),
        "mods": batch.mod_count,
        "transactions": len(batch.transaction_ids),
        "heartbeats": batch.heartbeats,
        "children_found": len(batch.children),
        "partition_finished": finished,
        "query_start": MetadataValue.timestamp(batch.query_start),
        "query_end": MetadataValue.timestamp(batch.query_end),
        "watermark": MetadataValue.timestamp(batch.watermark),
        "watermark_lag_seconds": None if finished else round((utc_now() - batch.watermark).total_seconds(), 1),
        "transient_retries": batch.retries,
        "created_to_scheduled_seconds": _seconds_between(p.created_at, p.scheduled_at),
        "scheduled_to_running_seconds": _seconds_between(p.scheduled_at, p.running_at),
        "first_response_seconds": None if batch.first_response_s is None else round(batch.first_response_s, 2),
    }
    if commits:
        metadata["first_commit_timestamp"] = MetadataValue.timestamp(min(commits))
        metadata["last_commit_timestamp"] = MetadataValue.timestamp(max(commits))
    if landed:
        metadata["landing_path"] = MetadataValue.path(landed.path)
        metadata["landing_bytes"] = landed.bytes
    if batch.read_started_at:
        metadata["read_started_at"] = MetadataValue.timestamp(batch.read_started_at)
    return {k: v for k, v in metadata.items() if v is not None}
