"""One change stream as Dagster definitions: partitions, the per-token asset, its job and sensor.

A factory, so several streams are configured without copy-paste: each gets its own dynamic
partitions (one key per partition token), asset, job, sensor and resource key.
"""

import time

from dagster import (
    AssetExecutionContext,
    DefaultSensorStatus,
    Definitions,
    DynamicPartitionsDefinition,
    MaterializeResult,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    asset,
    define_asset_job,
    in_process_executor,
    sensor,
)

from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN
from cs_platform.changestream.retention import RetentionLevel
from cs_platform.changestream.table_snapshot import check_retention
from cs_platform.defs.cleanup import cleanup_definitions
from cs_platform.defs.lake_assets import lake_definitions
from cs_platform.defs.lake_maintenance import lake_maintenance_definitions
from cs_platform.defs.mirror_rebuild import mirror_rebuild_definitions
from cs_platform.defs.names import ChangeStreamNames
from cs_platform.defs.reading import read_and_land
from cs_platform.defs.resources import ChangeStreamResource, LandingResource
from cs_platform.defs.runs import PARTITION_TAG, ask_to_yield, live_runs_by_partition, queued_runs_allowed, seconds_since_progress
from cs_platform.defs.tags import READER_TAG, STREAM_TAG
from cs_platform.settings import env_name, naming_settings, start_over
from cs_platform.stream import detection as partition_detection
from cs_platform.stream.detection import LiveRead
from cs_platform.stream.launches import LaunchPlanner, SensorCursor


def change_stream_definitions(
    stream: str,
    resource: ChangeStreamResource,
    *,
    sensor_interval_seconds: int,
    lake_interval_seconds: int,
    max_lag_seconds: float,
    maintenance_cron: str,
    cleanup_cron: str,
    bounded: bool,
    history: bool,
) -> Definitions:
    """Every definition of one change stream, configured by the settings (``build_definitions``
    passes them: their defaults live in ``cs_platform.settings`` only); ``bounded``: an end
    timestamp is set (the stream finishes); ``history``: some of its tables keep history tables."""
    names = ChangeStreamNames(stream)
    partitions = DynamicPartitionsDefinition(name=names.partitions)

    @asset(
        key=names.asset_key,
        partitions_def=partitions,
        group_name=names.slug,
        required_resource_keys={names.resource_key, "landing"},
        kinds={"spanner", "json"},
        description=(
            f"Change records of stream {stream}, one dynamic partition per partition token, landed as "
            "gzipped JSON lines. Materializing a running partition reads on from its watermark until the soft "
            "timeout; a FINISHED one is replayed (idempotent)."
        ),
    )
    def landed_changes(context: AssetExecutionContext) -> MaterializeResult:
        change_stream: ChangeStreamResource = getattr(context.resources, names.resource_key).validated()
        with naming_settings(stream):
            return read_and_land(context, names.job, change_stream, context.resources.landing)

    job = define_asset_job(
        names.job,
        selection=[names.asset_key],
        # One step: with the default executor every run would start a step subprocess after its run
        # worker, doubling the start-up of the many short runs a stream makes.
        executor_def=in_process_executor,
        tags={STREAM_TAG: stream, READER_TAG: stream},
        description=f"Read one partition of change stream {stream} until its soft timeout, land it, persist its watermark.",
    )

    @sensor(
        name=names.sensor,
        job=job,
        minimum_interval_seconds=sensor_interval_seconds,
        required_resource_keys={names.resource_key, "landing"},
        default_status=DefaultSensorStatus.RUNNING,
        description=(
            f"Detects new partitions of {stream} in the metadata table and launches one run per partition "
            "token; re-launches partitions whose run ended (soft timeout) or died, from their watermark; "
            "when partitions wait for a run slot, asks live runs to yield theirs."
        ),
    )
    def partition_sensor(context: SensorEvaluationContext):
        change_stream: ChangeStreamResource = getattr(context.resources, names.resource_key).validated()
        with naming_settings(stream):
            return detect_partitions(context, names, partitions, change_stream, context.resources.landing)

    tables = DynamicPartitionsDefinition(name=names.tables)
    return Definitions.merge(
        Definitions(assets=[landed_changes], jobs=[job], sensors=[partition_sensor]),
        lake_definitions(
            names, tables=tables, max_lag_seconds=max_lag_seconds, interval_seconds=lake_interval_seconds, bounded=bounded, history=history
        ),
        mirror_rebuild_definitions(names, tables),
        lake_maintenance_definitions(names, maintenance_cron),
        cleanup_definitions(names, cleanup_cron),
    )


def detect_partitions(
    context: SensorEvaluationContext,
    names: ChangeStreamNames,
    partitions: DynamicPartitionsDefinition,
    change_stream: ChangeStreamResource,
    landing_resource: LandingResource,
) -> SensorResult:
    """The sensor's tick: ``stream.detection.detect_partitions`` decides; this translates
    Dagster's run records in, and its decisions out (failed runs, run requests, yield tags, logs)."""
    store = change_stream.metadata_store()
    cursor = SensorCursor.load(context.cursor)
    if not cursor.initialized:
        # The first tick checks what every run will need, so a wrong setting fails here, named.
        change_stream.require_stream()
        landing_resource.store().check_writable()
        start = change_stream.start()
        if start is not None and not store.initialized():  # a new stream's snapshot at T0 must still be readable
            check_retention(change_stream.source_database(), start, f"stream {names.stream}'s snapshot at its start")
        if store.initialize(start, change_stream.end(), change_stream.heartbeat_millis):
            began = store.get(INITIAL_PARTITION_TOKEN).start_timestamp  # the configured start, or now
            context.log.info(f"initialized {store.table} for stream {names.stream} from {began.isoformat()}")
        # A landing root of another source is refused here, not in every run.
        landing_resource.store(change_stream.source_identity()).bind(names.stream)

    now = time.time()
    by_partition = live_runs_by_partition(context.instance, names.job, names.asset_key)
    records = {record.dagster_run.run_id: record for runs in by_partition.values() for record in runs}
    live = [LiveRead(run_id, run.dagster_run.tags[PARTITION_TAG], seconds_since_progress(run, now)) for run_id, run in records.items()]
    # Reads rotate through the run queue when it holds reader runs to the slots itself: a run that
    # waits in it takes a slot the moment a yielding run frees one (at the queue's next pass).
    allowed = queued_runs_allowed(context.instance, READER_TAG)
    queue_ahead = change_stream.max_parallel_reads if allowed is not None and allowed <= change_stream.max_parallel_reads else 0
    detection = partition_detection.detect_partitions(
        store,
        live,
        cursor.launched,
        LaunchPlanner(change_stream.max_parallel_reads, change_stream.retry_backoff_seconds, queue_ahead=queue_ahead),
        stale_run_seconds=change_stream.stale_run_seconds,
        retention_period=change_stream.retention_period,
        now=now,
    )
    for read in detection.presumed_dead:
        context.instance.report_run_failed(
            records[read.run_id].dagster_run,
            f"presumed dead by {names.sensor}: no landing for {read.quiet_seconds:.0f}s (since its start or its last "
            f"landing), longer than stale_run_seconds={change_stream.stale_run_seconds:g}; partition {read.partition_key} "
            "will be re-launched",
        )
    watch = detection.retention
    if watch.level is not RetentionLevel.OK:
        (context.log.error if watch.level is RetentionLevel.ERROR else context.log.warning)(watch.describe(names.stream, start_over(names.stream)))
    if detection.plan is None:
        return SensorResult(
            skip_reason=f"every partition of {names.stream} is FINISHED (end timestamp {change_stream.end_timestamp} reached)",
            cursor=SensorCursor(True, {}).dump(),
        )
    plan = detection.plan
    requests = [
        RunRequest(
            run_key=launch.run_key,
            partition_key=launch.partition.key,
            tags={STREAM_TAG: names.stream, READER_TAG: names.stream, "dagster/max_runtime": str(int(change_stream.max_runtime_seconds))},
        )
        for launch in plan.launches
    ]
    for launch in plan.launches:
        context.log.info(f"{launch.reason}: {launch.partition.key} from {launch.partition.watermark.isoformat()}")
    if plan.starved:
        # Rotate: live runs end at their next landing after yield_after_seconds, and the slots go to
        # the partitions furthest behind on the next ticks.
        asked = ask_to_yield(context.instance, [records[read.run_id] for read in detection.alive])
        if asked:
            context.log.info(
                f"{plan.starved} partition(s) wait for a run slot: asked {asked} live run(s) to yield after "
                f"{change_stream.yield_after_seconds:g}s of reading"
            )
        if allowed is not None and allowed < change_stream.max_parallel_reads:
            context.log.warning(
                f"{env_name('max_parallel_reads')} is {change_stream.max_parallel_reads}, but this Dagster instance's run queue "
                f"starts at most {allowed} reader runs at once (dagster.yaml run_queue: the {READER_TAG} tag limit or "
                f"max_concurrent_runs): {plan.starved} partition(s) wait for slots it never grants. Raise the run queue's "
                f"limits to at least {change_stream.max_parallel_reads}, or lower the setting (docs/dagster.md, Concurrency)"
            )
    summary = detection.summary()
    if requests:
        context.log.info(summary)
    return SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=(
            [partitions.build_add_request([launch.partition.key for launch in plan.launches])]
            if plan.launches
            else []
        ),
        cursor=SensorCursor(True, plan.launched).dump(),
        skip_reason=None if requests else summary,
    )
