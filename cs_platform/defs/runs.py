"""Which reader runs are alive, from the Dagster instance's run storage.

One query for all unfinished runs; a run belongs to a stream's reader if it is a run of the
stream's job (sensor runs) or selects the stream's asset (UI materializations and backfills).
"""

from __future__ import annotations

import time
from collections import defaultdict

from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunRecord, RunsFilter

LIVE_RUN_STATUSES = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]
PARTITION_TAG = "dagster/partition"
# Set by the sensor on live reader runs when partitions wait for a slot: the run lands, persists its
# watermark and ends at its next landing once it has read for yield_after_seconds.
YIELD_TAG = "cs_platform/yield_slot"


def live_runs_by_partition(instance: DagsterInstance, job_name: str, asset_key: AssetKey) -> dict[str, list[RunRecord]]:
    live: dict[str, list[RunRecord]] = defaultdict(list)
    for record in instance.get_run_records(RunsFilter(statuses=LIVE_RUN_STATUSES)):
        run = record.dagster_run
        key = run.tags.get(PARTITION_TAG)
        if key is not None and (run.job_name == job_name or asset_key in (run.asset_selection or ())):
            live[key].append(record)
    return dict(live)


def run_age_seconds(record: RunRecord, now: float | None = None) -> float | None:
    """Seconds since the run started (or was created, if it never started); None while QUEUED,
    because a queued run waits on concurrency limits, not on a worker that may have died."""
    if record.dagster_run.status is DagsterRunStatus.QUEUED:
        return None
    since = record.start_time or record.create_timestamp.timestamp()
    return (now or time.time()) - since


def ask_to_yield(instance: DagsterInstance, live: dict[str, list[RunRecord]]) -> int:
    """Tag every live reader run that is not yet asked to yield its slot; returns how many were asked.

    A tag rather than a cancel: the run ends on its own between two landings, with its last chunk
    durable and its watermark persisted, so a yield costs one run start and never a re-read."""
    asked = 0
    for records in live.values():
        for record in records:
            run = record.dagster_run
            if YIELD_TAG not in run.tags and run.status is not DagsterRunStatus.CANCELING:
                instance.add_run_tags(run.run_id, {YIELD_TAG: "true"})
                asked += 1
    return asked
