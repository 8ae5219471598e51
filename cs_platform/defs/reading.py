"""A per-token run in Dagster: ``stream.partition_read.read_partition`` (take, read, land, persist: the
body of every read, the order that is the correctness argument), wrapped with what a Dagster run adds.

- It refuses to read beside another live run of its partition, and lands only into its source's
  landing root.
- Before each landing it checks it was not presumed dead by the sensor meanwhile (then it stops:
  fencing refuses its watermark anyway, ``runs.stop_if_presumed_dead``) or cancelled (then it drains).
- After each landing it marks itself alive once per beat and reports its landings once per report
  interval (``cs_platform.stream.reporting``); it ends early, between two landings, when the sensor asked
  it to yield its slot (partitions wait for one) and it has read for yield_after_seconds: reads
  rotate instead of queueing behind soft timeouts.
- A run asked to end drains: Dagster's termination (its run worker gets SIGINT), a SIGTERM (a
  deploy, a scale-down) or the run found CANCELING make the read stop at its next response (a
  heartbeat comes every CS_PLATFORM_HEARTBEAT_MILLIS, 2 s by default), land what it read and persist
  its watermark, and the run then ends CANCELED: nothing it read is dropped, nothing is read twice
  (docs/operations.md, "Stop a stream").
- It is materialized once, at its end, with what a data engineer asks of a read.
"""

from __future__ import annotations

import dataclasses
import resource
import threading
import time
from dataclasses import dataclass
from datetime import datetime

from dagster import (
    AssetExecutionContext,
    AssetObservation,
    DagsterRun,
    Failure,
    MaterializeResult,
    MetadataValue,
)

from cs_platform.changestream.errors import FencedOffError
from cs_platform.changestream.metadata import PartitionMetadata, utc_now
from cs_platform.changestream.reader import PartitionBatch
from cs_platform.defs.resources import ChangeStreamResource, LandingResource
from cs_platform.defs.runs import (
    CANCELLED,
    YIELD_TAG,
    drain_on_interrupt,
    end_canceled,
    live_runs_by_partition,
    mark_progress,
    stop_if_presumed_dead,
)
from cs_platform.landing.store import LandedFile
from cs_platform.stream.partition_read import read_partition
from cs_platform.stream.reporting import Cadence, liveness_beat_seconds


def read_and_land(
    context: AssetExecutionContext, job_name: str, change_stream: ChangeStreamResource, landing_resource: LandingResource
) -> MaterializeResult:
    store = change_stream.metadata_store()
    key = context.partition_key
    partition = store.get_by_key(key)
    _refuse_concurrent_read(context, job_name, key)
    landing = landing_resource.store(change_stream.source_identity())
    landing.bind(change_stream.stream_name)  # refuse another source's directory before reading anything
    drain = threading.Event()  # set by SIGINT, SIGTERM or the run found CANCELING: the read lands what it read and ends
    totals = ReadTotals()
    reported = ReadTotals()  # the totals at the last report: a report covers what landed since
    # Dagster's storage grows with what a run records, so a run records its landings once per
    # report interval and marks itself alive once per beat, not at every landing (cs_platform.stream.reporting).
    report, alive = Cadence(change_stream.report_interval_seconds), Cadence(liveness_beat_seconds(change_stream.stale_run_seconds))
    started = time.monotonic()
    read: dict = {}  # what the hooks below learn: the partition as taken, the run as last seen

    def on_start(taken: PartitionMetadata, replay: bool) -> None:
        read.update(partition=taken, replay=replay)
        if replay:
            context.log.info(f"partition {key} is FINISHED: replaying {taken.reads_from} .. {taken.watermark}")
        else:
            context.log.info(
                f"reading partition {key} ({taken.state.value}) from watermark {taken.watermark.isoformat()} "
                f"for up to {change_stream.soft_timeout_seconds:g}s"
            )

    def before_landing() -> None:
        read["run"] = run = stop_if_presumed_dead(  # one run-storage lookup per chunk, against a chunk's Spanner read and file write
            context.instance, context.run_id, f"was still reading partition {key}: stopping before its next landing so that "
            "only the re-launched run reads it (what this run landed stays landed; a run paused after this check can land once "
            "more, and fencing refuses its watermark)",
        )
        if run is not None and run.status in CANCELLED:
            drain.set()  # terminated where no signal reached the step: drain all the same

    def after_landing(chunk: PartitionBatch, landed: LandedFile | None) -> bool:
        nonlocal reported
        if alive.due():
            mark_progress(context.instance, context.run_id)  # the sensor measures staleness from here
        totals.add(chunk, landed)
        if landed and report.due():  # an observation, shown in the run's event log too: no log line beside it
            context.log_event(landing_observation(context, key, chunk, totals, reported))
            reported = dataclasses.replace(totals)
        read_s = time.monotonic() - started
        if _yields(read["run"], read["replay"] or chunk.finished, read_s, change_stream.yield_after_seconds):
            totals.yielded = True
            context.log.info(f"partitions wait for a run slot: yielding after {read_s:.1f}s, watermark {chunk.watermark.isoformat()} persisted")
            return True
        return False

    with drain_on_interrupt(drain):
        try:
            read_partition(
                store, change_stream.reader(), landing, change_stream.stream_name, partition, context.run_id,
                change_stream.soft_timeout, change_stream.landing_chunk_mods, change_stream.landing_interval,
                stop=drain, started=on_start, before_landing=before_landing, after_landing=after_landing,
            )
        except FencedOffError as fenced:  # a re-launch took the partition: stop at once
            context.log.error(f"fenced off partition {key}: {fenced}")
            raise Failure(
                description=(
                    f"run {context.run_id} no longer owns partition {key}: {fenced} Raise "
                    "CS_PLATFORM_STALE_RUN_SECONDS if live runs are presumed dead on this machine."
                ),
                allow_retries=False,
            ) from fenced
    partition, replay = read["partition"], read["replay"]
    if drain.is_set():
        last = totals.last
        context.log.info(
            f"drained: asked to end, landed what it read ({totals.mods} mods in all) and persisted watermark "
            f"{last.watermark.isoformat() if last else 'none'}; ending CANCELED"
        )
        end_canceled(context.instance, context.run_id, f"partition {key}: drained on request, watermark persisted")
    # The run's process at its peak (Linux: KiB): what a run slot costs, for sizing workers.
    peak_rss_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return MaterializeResult(metadata={**materialization_metadata(partition, totals, replay), "peak_rss_mb": peak_rss_mb})


def landing_observation(
    context: AssetExecutionContext, key: str, chunk: PartitionBatch, read: ReadTotals, reported: ReadTotals
) -> AssetObservation:
    """The UI's view of a live run: an observation on the partition's timeline per report (the
    run's first landing, then at most one per CS_PLATFORM_REPORT_INTERVAL_SECONDS), covering the
    files landed since the previous one (``read`` now, less ``reported`` then).

    An observation, not a materialization: the partition is materialized once, when its run ends
    and reports the whole read; landings in between are progress, and must not look like completed
    reads to automation or to the lake's checks. Heartbeat-only landings (every few seconds) record
    nothing here, or a quiet partition would fill the event log."""
    return AssetObservation(
        asset_key=context.asset_key,
        partition=key,
        description="files landed while the run reads, since its previous observation",
        metadata={  # few entries: each costs ~0.3 KB of storage per report (the run's materialization has the rest)
            "landing_path": MetadataValue.path(read.landing_path),
            "landed_files": read.landed_chunks - reported.landed_chunks,
            "mods": read.mods - reported.mods,  # a chunk that landed no file had no mods
            "watermark": MetadataValue.timestamp(chunk.watermark),
            "landed_chunks_so_far": read.landed_chunks,
        },
    )


def _yields(run: DagsterRun | None, done: bool, read_s: float, yield_after_s: float) -> bool:
    """End now if the sensor asked this run to give its slot up and it has had its fair share."""
    return not done and run is not None and YIELD_TAG in run.tags and read_s >= yield_after_s


@dataclass
class ReadTotals:
    """What the chunks of one read add up to, for its materialization; keeps no records.

    Transactions add up across chunks: a transaction's records in one partition share one commit
    timestamp, and chunks are cut only between timestamps."""

    records: int = 0
    mods: int = 0
    transactions: int = 0
    heartbeats: int = 0
    retries: int = 0
    children: int = 0
    first_commit: datetime | None = None
    last_commit: datetime | None = None
    landed_chunks: int = 0
    landing_path: str | None = None  # the last file landed
    landed_bytes: int = 0
    last: PartitionBatch | None = None  # the last chunk: the read's end, watermark and timings
    query_start: datetime | None = None
    yielded: bool = False  # ended early to give its slot to a waiting partition

    def add(self, chunk: PartitionBatch, landed: LandedFile | None) -> None:
        self.records += len(chunk.records)
        self.mods += chunk.mod_count
        self.transactions += len(chunk.transaction_ids)
        self.heartbeats += chunk.heartbeats
        self.retries += chunk.retries
        self.children += len(chunk.children)
        if chunk.records:
            self.first_commit = self.first_commit or chunk.records[0].commit_timestamp
            self.last_commit = chunk.records[-1].commit_timestamp
        if landed:
            self.landed_chunks += 1
            self.landing_path = landed.path
            self.landed_bytes += landed.bytes
        self.query_start = self.query_start or chunk.query_start
        self.last = dataclasses.replace(chunk, records=())


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


def materialization_metadata(p: PartitionMetadata, read: ReadTotals, replay: bool) -> dict:
    """What a data engineer asks of one read: how much, how far, how late, and what it found."""
    last = read.last
    # A replay re-reads a FINISHED partition: it is finished, and lags nothing.
    finished = replay or last.finished
    metadata = {
        "partition_token": p.token,
        "replay": replay,
        "records": read.records,
        "mods": read.mods,
        "transactions": read.transactions,
        "heartbeats": read.heartbeats,
        "children_found": read.children,
        "partition_finished": finished,
        "query_start": MetadataValue.timestamp(read.query_start),
        "query_end": MetadataValue.timestamp(last.query_end),
        "watermark": MetadataValue.timestamp(last.watermark),
        "watermark_lag_seconds": None if finished else round((utc_now() - last.watermark).total_seconds(), 1),
        "transient_retries": read.retries,
        "created_to_scheduled_seconds": _seconds_between(p.created_at, p.scheduled_at),
        "scheduled_to_running_seconds": _seconds_between(p.scheduled_at, p.running_at),
        "first_response_seconds": None if last.first_response_s is None else round(last.first_response_s, 2),
        "landed_chunks": read.landed_chunks,
        "yielded_slot": read.yielded,
    }
    if read.first_commit:
        metadata["first_commit_timestamp"] = MetadataValue.timestamp(read.first_commit)
        metadata["last_commit_timestamp"] = MetadataValue.timestamp(read.last_commit)
    if read.landing_path:
        metadata["landing_path"] = MetadataValue.path(read.landing_path)
        metadata["landing_bytes"] = read.landed_bytes
    if last.read_started_at:
        metadata["read_started_at"] = MetadataValue.timestamp(last.read_started_at)
    return {k: v for k, v in metadata.items() if v is not None}
