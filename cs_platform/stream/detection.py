"""One tick of partition detection (Beam's DetectNewPartitions), as a plain function over the
metadata table and the reads that are live: what the sensor wraps, translating Dagster's run
records into ``LiveRead``s in and the ``Detection`` into run requests out.

A tick, in order:

1. a live read quiet (no landing, nor start) for longer than ``stale_run_seconds`` is *presumed
   dead*: its partition counts as without a run, so it is re-launched from its watermark. The old
   run, if alive after all, is fenced off by the metadata table (``FencedOffError``);
2. one metadata query: every unfinished partition;
3. the retention watch over their watermarks: a partition whose records have expired is not
   launched again (its read can only fail; the retention check says what to do);
4. the launch plan (``launches.LaunchPlanner``), and the new partitions marked SCHEDULED.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable, Iterable

from cs_platform.changestream.metadata import PartitionMetadataStore, PartitionState, utc_now
from cs_platform.changestream.retention import RetentionWatch, watch_retention
from cs_platform.stream.launches import LaunchPlan, LaunchPlanner, LaunchRecord


@dataclass(frozen=True)
class LiveRead:
    """A reader run not yet ended, as the sensor found it."""

    run_id: str
    partition_key: str
    quiet_seconds: float | None  # since its last landing, else its start; None while it waits in a queue


@dataclass(frozen=True)
class Detection:
    presumed_dead: tuple[LiveRead, ...]
    alive: tuple[LiveRead, ...]  # the live reads, the presumed dead left out
    retention: RetentionWatch
    plan: LaunchPlan | None  # None: every partition is FINISHED
    low_watermark: datetime | None

    @property
    def live_keys(self) -> frozenset[str]:
        """The partitions with a live read."""
        return frozenset(read.partition_key for read in self.alive)

    @property
    def finished(self) -> bool:
        return self.plan is None

    @property
    def expired(self) -> frozenset[str]:
        return frozenset(p.token for p in self.retention.expired)

    def summary(self) -> str:
        launched, waiting = (len(self.plan.launches), self.plan.waiting) if self.plan else (0, 0)
        low = self.low_watermark
        return (
            f"{launched} launched, {len(self.live_keys)} running, {waiting} waiting"
            + (f", {len(self.expired)} expired (not launched: see the change_stream_retention check)" if self.expired else "")
            + f"; low watermark {low.isoformat() if low else 'n/a'}"
        )


def presumed_dead(live: Iterable[LiveRead], stale_run_seconds: float) -> tuple[tuple[LiveRead, ...], tuple[LiveRead, ...]]:
    """Split the live reads into (presumed dead, alive). Progress, not age: a healthy read lands
    every landing interval however long it runs, so only a read that stopped landing is dead."""
    dead, alive = [], []
    for read in live:
        (dead if read.quiet_seconds is not None and read.quiet_seconds > stale_run_seconds else alive).append(read)
    return tuple(dead), tuple(alive)


def detect_partitions(
    store: PartitionMetadataStore,
    live: Iterable[LiveRead],
    launched: dict[str, LaunchRecord],
    planner: LaunchPlanner,
    *,
    stale_run_seconds: float,
    retention_period: Callable[[], timedelta],
    now: float,
) -> Detection:
    """One tick: ``launched`` is what earlier ticks launched (the sensor's cursor), ``now`` the wall
    clock in epoch seconds; ``retention_period`` is read only when some watermark is old enough."""
    dead, alive = presumed_dead(live, stale_run_seconds)
    unfinished = store.unfinished()  # the tick's one metadata query: everything below follows from it
    watch = watch_retention(unfinished, retention_period, utc_now())
    if not unfinished.partitions:
        return Detection(dead, alive, watch, None, None)
    expired = {p.token for p in watch.expired}
    active = [
        p for p in unfinished.in_states(PartitionState.SCHEDULED, PartitionState.RUNNING) + unfinished.schedulable if p.token not in expired
    ]
    queued = sum(1 for read in alive if read.quiet_seconds is None)
    plan = planner.plan(active, {read.partition_key for read in alive}, launched, now, queued)
    store.transition([launch.partition.token for launch in plan.launches if launch.reason == "new"], PartitionState.SCHEDULED)
    return Detection(dead, alive, watch, plan, unfinished.low_watermark)
