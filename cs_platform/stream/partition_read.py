"""The body of one read of one partition, the same wherever it runs: a Dagster run
(``defs/reading.py``), and the in-process driver of the reader's tests and benchmarks
(``dev/local_runner.py``).

Take the partition (from then on only this reader moves its watermark: fencing), read it in chunks,
land each chunk and only then persist its watermark (DESIGN invariant 2, Beam's BundleFinalizer),
until the soft timeout, the partition's end, a drain (``stop``: the read ends at its next response
and lands what it read), or the caller ending it early (``after_landing`` returns True: a run
yielding its slot). A FINISHED partition is replayed instead: its range is read again and landed,
its metadata row untouched (a backfill). No Dagster, no Spark: a reader run loads neither.
"""

from __future__ import annotations

import threading
from contextlib import closing
from datetime import timedelta
from typing import Callable, Protocol

from cs_platform.changestream.metadata import PartitionMetadata, PartitionMetadataStore, PartitionState
from cs_platform.changestream.reader import PartitionBatch, PartitionReader
from cs_platform.landing.store import LandedFile


class Landing(Protocol):
    """Where chunks land: a ``LandingStore``, or a test's collector."""

    def write(self, stream: str, key: str, batch: PartitionBatch) -> LandedFile | None: ...


def read_partition(
    store: PartitionMetadataStore,
    reader: PartitionReader,
    landing: Landing,
    stream: str,
    partition: PartitionMetadata,
    owner: str,
    soft_timeout: timedelta,
    chunk_mods: int | None,
    landing_interval: timedelta | None,
    *,
    stop: threading.Event | None = None,
    started: Callable[[PartitionMetadata, bool], None] | None = None,
    before_landing: Callable[[], None] | None = None,
    after_landing: Callable[[PartitionBatch, LandedFile | None], bool] | None = None,
) -> None:
    """Read ``partition`` as ``owner``: ``started`` is told the partition as taken (and whether
    this is a replay), ``before_landing`` runs before each chunk lands (it may raise, or set
    ``stop``), ``after_landing`` after its watermark is persisted (True: end the read now).
    ``chunk_mods`` and ``landing_interval`` of None read the whole soft timeout as one chunk.
    A ``FencedOffError`` from persisting means another reader took the partition: it propagates."""
    stop = stop or threading.Event()
    replay = partition.state is PartitionState.FINISHED
    if replay:
        chunks = reader.replay(partition, chunk_mods)
    else:
        partition = store.take(partition.token, owner=owner)  # any earlier reader is fenced off from here
        chunks = reader.read_chunks(partition, soft_timeout, chunk_mods, landing_interval, stop=stop)
    if started is not None:
        started(partition, replay)
    with closing(chunks):  # ending early closes the read's stream
        for chunk in chunks:  # each one durable, then its watermark persisted, before the next is read
            if before_landing is not None:
                before_landing()
            landed = landing.write(stream, partition.key, chunk)
            if not replay:
                store.record_progress(partition.token, chunk.watermark, chunk.finished, owner=owner)
            if after_landing is not None and after_landing(chunk, landed):
                return
            if replay and stop.is_set():  # a replay moves no watermark: it just stops
                return
