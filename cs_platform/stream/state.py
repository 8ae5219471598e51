"""Where a stream stands, from its metadata table alone: its cut and its source identity.

No Spark here: the partition sensor, reader runs, checks and cleanup need these, and a reader run
loads nothing of PySpark or Delta (``cs_platform.stream.lake_steps`` builds the lake from them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN, PartitionMetadataStore
from cs_platform.landing.source import SourceIdentity


@dataclass(frozen=True)
class StreamPosition:
    cut: datetime  # every transaction committed at or before it is landed
    finished: bool  # every partition FINISHED: the cut is the stream's end, nothing is left to read (nor late)


def stream_position(store: PartitionMetadataStore) -> StreamPosition | None:
    """The low watermark; once every partition is FINISHED, the stream's end timestamp (every
    partition read up to it; cleanup may have removed their rows since, never the initial one).
    None before the sensor's first tick created the metadata table."""
    if not store.table_exists():
        return None
    low = store.low_watermark()
    if low is not None:
        return StreamPosition(low, finished=False)
    return StreamPosition(store.get(INITIAL_PARTITION_TOKEN).end_timestamp, finished=True)


def stream_cut(store: PartitionMetadataStore) -> datetime | None:
    """The cut of :func:`stream_position`."""
    position = stream_position(store)
    return position.cut if position is not None else None


def source_identity(target: SpannerTarget, stream: str, store: PartitionMetadataStore) -> SourceIdentity:
    """The stream's source, with the creation time of its initial partition row as the epoch."""
    created = store.get(INITIAL_PARTITION_TOKEN).created_at
    return SourceIdentity(target.project, target.instance, target.database, stream, created.isoformat())
