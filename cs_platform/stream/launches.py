"""Which partition reads to launch on a sensor tick (Beam's DetectNewPartitions, plus re-launches).

Pure decisions over the metadata rows, the set of partitions with a live run, and what earlier
ticks launched (kept in the sensor cursor). Rules:

- a CREATED partition whose parents are all FINISHED is launched once and marked SCHEDULED;
- a SCHEDULED or RUNNING partition without a live run is re-launched from its persisted watermark:
  at once if its watermark moved since the last launch (the run ended at its soft timeout), after
  an exponential backoff if it did not (the run failed, was killed, or never started);
- never two live runs for one partition, never more than ``max_parallel`` runs reading; the
  partitions furthest behind go first, because they hold the low watermark back;
- where the run queue itself holds reader runs to ``max_parallel`` at once, up to ``queue_ahead``
  more are launched to wait in it: a slot a yielding run frees then goes to the next partition at
  the queue's next pass, not after the sensor's next tick and a queue pass;
- a partition due now that finds no free slot (waiting in the queue or not launched) is *starved*:
  the sensor then asks the live runs to yield their slots (see ``runs.ask_to_yield``), so that
  reads rotate instead of waiting for soft timeouts;
- a run key names the partition, the watermark it resumes from and the attempt, so the same read is
  never launched twice, while a retry of a failed read gets a new key.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Iterable

from cs_platform.changestream.metadata import PartitionMetadata, PartitionState


@dataclass(frozen=True)
class LaunchRecord:
    """What the sensor last launched for a partition."""

    watermark: str
    attempt: int
    launched_at: float


@dataclass(frozen=True)
class Launch:
    partition: PartitionMetadata
    attempt: int  # launches of this partition from this watermark before this one
    reason: str  # "new", "resume" (soft timeout reached) or "retry" (no progress since last launch)

    @property
    def run_key(self) -> str:
        """Names the read: partition, resume watermark, attempt. Dagster never runs a key twice."""
        return f"{self.partition.key}@{self.partition.watermark.isoformat()}#{self.attempt}"


@dataclass(frozen=True)
class LaunchPlan:
    launches: tuple[Launch, ...]
    launched: dict[str, LaunchRecord]  # the next cursor: one entry per unfinished launched partition
    waiting: int  # partitions due for a launch but held back by backoff or the parallelism cap
    starved: int = 0  # partitions due now that have no slot to read in: not launched, or waiting in the run queue


class LaunchPlanner:
    def __init__(self, max_parallel: int, retry_backoff_s: float, max_backoff_s: float = 300.0, queue_ahead: int = 0) -> None:
        self.max_parallel = max_parallel
        self.retry_backoff_s = retry_backoff_s
        self.max_backoff_s = max_backoff_s
        self.queue_ahead = queue_ahead  # 0 unless the run queue holds reader runs to max_parallel itself

    def backoff(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.retry_backoff_s * 2 ** (attempt - 1)) if attempt else 0.0

    def plan(
        self,
        partitions: Iterable[PartitionMetadata],
        live_keys: set[str],
        launched: dict[str, LaunchRecord],
        now: float,
        queued: int = 0,
    ) -> LaunchPlan:
        """``partitions``: every schedulable (CREATED, parents FINISHED), SCHEDULED or RUNNING
        partition; ``queued``: how many of the live runs wait in the run queue for a slot."""
        candidates: list[Launch] = []
        held_back = 0
        for p in partitions:
            key = p.key
            if key in live_keys:
                continue
            watermark = p.watermark.isoformat()
            last = launched.get(key)
            if p.state is PartitionState.CREATED:
                candidates.append(Launch(p, 0, "new"))
            elif last is None or last.watermark != watermark:
                candidates.append(Launch(p, 0, "resume"))
            elif now - last.launched_at >= self.backoff(last.attempt + 1):
                candidates.append(Launch(p, last.attempt + 1, "retry"))
            else:
                held_back += 1
        candidates.sort(key=lambda launch: (launch.partition.watermark, launch.partition.key))
        free_slots = max(0, self.max_parallel - (len(live_keys) - queued))
        capacity = max(0, self.max_parallel + self.queue_ahead - len(live_keys))
        chosen = tuple(candidates[:capacity])
        active = {p.key for p in partitions}
        cursor = {k: v for k, v in launched.items() if k in active}
        for launch in chosen:
            cursor[launch.partition.key] = LaunchRecord(launch.partition.watermark.isoformat(), launch.attempt, now)
        unlaunched = len(candidates) - len(chosen)
        starved = unlaunched + max(0, queued + len(chosen) - free_slots)  # due now, and no slot to read in yet
        return LaunchPlan(chosen, cursor, held_back + unlaunched, starved)


@dataclass(frozen=True)
class SensorCursor:
    """What the sensor remembers between ticks. Losing it is safe: it only re-initializes (a no-op
    on an existing table) and resumes partitions from their persisted watermarks."""

    initialized: bool = False
    launched: dict[str, LaunchRecord] = field(default_factory=dict)

    def dump(self) -> str:
        launched = {k: asdict(v) for k, v in sorted(self.launched.items())}
        return json.dumps({"initialized": self.initialized, "launched": launched}, separators=(",", ":"))

    @classmethod
    def load(cls, text: str | None) -> "SensorCursor":
        if not text:
            return cls()
        try:
            data = json.loads(text)
            return cls(bool(data["initialized"]), {k: LaunchRecord(**v) for k, v in data["launched"].items()})
        except (ValueError, TypeError, KeyError):
            return cls()
