"""An in-process driver of one stream, for the reader's tests and benchmarks: initialize, find the
schedulable partitions, read each in a thread with ``stream.partition_read.read_partition`` (the body of a
Dagster run's read: take, read, land, persist), until every partition is FINISHED. What the partition
sensor and its runs do, without Dagster. Partitions move CREATED -> SCHEDULED -> RUNNING -> FINISHED;
a child is picked up only once all its parents are FINISHED.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

from cs_platform.changestream.metadata import PartitionMetadataStore, PartitionState
from cs_platform.changestream.reader import PartitionBatch, PartitionReader
from cs_platform.stream.partition_read import Landing, read_partition


@dataclass
class RunSummary:
    reads: int = 0
    records: int = 0
    mods: int = 0
    partitions_finished: int = 0


class LocalRunner:
    """Drives every partition of one stream to FINISHED; needs an end timestamp to terminate."""

    def __init__(
        self,
        reader: PartitionReader,
        landing: Landing | Callable[[PartitionBatch], None],
        soft_timeout: timedelta = timedelta(seconds=10),
        max_parallel: int = 8,
        poll_interval_s: float = 0.2,
    ) -> None:
        """``landing``: a ``LandingStore`` (files under the reader's stream, named by partition key as
        production names them), or a function each read's chunk is handed to."""
        self.reader = reader
        self.metadata: PartitionMetadataStore = reader.metadata
        self.landing: Landing = Collect(landing) if callable(landing) else landing
        self.stream = reader.query.stream_name
        self.soft_timeout = soft_timeout
        self.max_parallel = max_parallel
        self.poll_interval_s = poll_interval_s

    def run(self, start: datetime, end: datetime, heartbeat_millis: int, stop_after_s: float = 3600) -> RunSummary:
        self.metadata.initialize(start, end, heartbeat_millis)
        summary = RunSummary()
        deadline = time.monotonic() + stop_after_s
        running: dict[str, Future] = {}
        with ThreadPoolExecutor(max_workers=self.max_parallel, thread_name_prefix="partition") as pool:
            # Restart: partitions left SCHEDULED/RUNNING by an earlier process resume from their watermark.
            for p in self.metadata.unfinished().in_states(PartitionState.SCHEDULED, PartitionState.RUNNING):
                running[p.token] = pool.submit(self._read_one, p.token)
            while time.monotonic() < deadline:
                unfinished = self.metadata.unfinished()
                fresh = [p for p in unfinished.schedulable if p.token not in running]
                if fresh:
                    self.metadata.transition([p.token for p in fresh], PartitionState.SCHEDULED)
                    for p in fresh:
                        running[p.token] = pool.submit(self._read_one, p.token)
                if not running:
                    if not unfinished.partitions:
                        return summary
                    time.sleep(self.poll_interval_s)
                    continue
                done, _ = wait(running.values(), timeout=self.poll_interval_s, return_when=FIRST_COMPLETED)
                for token, future in list(running.items()):
                    if future not in done:
                        continue
                    batch = future.result()  # a terminal error stops the run here, loudly
                    summary.reads += 1
                    summary.records += len(batch.records)
                    summary.mods += batch.mod_count
                    if batch.finished:
                        summary.partitions_finished += 1
                        del running[token]
                    else:
                        running[token] = pool.submit(self._read_one, token)
            raise TimeoutError(f"stream not finished after {stop_after_s:.0f}s; low watermark {self.metadata.low_watermark()}")

    def _read_one(self, token: str) -> PartitionBatch:
        """One read of the partition, as one Dagster run reads it (its own owner), in one chunk."""
        chunks: list[PartitionBatch] = []

        def landed(chunk: PartitionBatch, _) -> bool:
            chunks.append(chunk)
            return False  # read on to the soft timeout or the partition's end

        read_partition(
            self.metadata, self.reader, self.landing, self.stream, self.metadata.get(token), f"local-{uuid.uuid4().hex}",
            self.soft_timeout, None, None, after_landing=landed,
        )
        return chunks[-1]


class Collect:
    """A landing that hands each chunk to ``sink`` instead of writing a file (a test's collector)."""

    def __init__(self, sink: Callable[[PartitionBatch], None]) -> None:
        self.sink = sink

    def write(self, stream: str, key: str, batch: PartitionBatch) -> None:
        self.sink(batch)
