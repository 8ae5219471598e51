"""Whether unread records are about to expire: the unfinished partitions' watermarks against the
change stream's ``retention_period``.

Spanner keeps a change stream's records for its retention period (1 day by default, 1 day at
least). A partition whose watermark falls further behind than that can no longer be read: its
query fails with ``OUT_OF_RANGE`` (``StartTimestampOutOfRangeError``) and the records in between
are gone. This module says how close each unfinished partition is: past half the retention is a
warning, past ``ERROR_FRACTION`` of it an error raised while there is still time, and past all of
it the partition is expired, so the sensor stops launching it (a retry cannot succeed).

The retention is read only when the oldest watermark is older than half of Spanner's minimum
retention: before that nothing can be near expiry, and a tick reads nothing more.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

from cs_platform.changestream.catalog import MIN_STREAM_RETENTION
from cs_platform.changestream.metadata import PartitionMetadata, UnfinishedPartitions

WARN_FRACTION = 0.5
ERROR_FRACTION = 0.8


class RetentionLevel(str, enum.Enum):
    OK = "ok"
    WARN = "warn"  # some watermark is older than half the retention
    ERROR = "error"  # some watermark is older than ERROR_FRACTION of it, or already expired


WAY_OUT = (
    "Find out why the oldest partitions stopped (their runs' logs), and fix it while there is time. If records "
    "have expired, the way out is to start the stream over ({start_over}); the new start snapshots the source, so "
    "the mirrors are whole again, without the changes in between."
)


@dataclass(frozen=True)
class RetentionWatch:
    now: datetime
    low_watermark: datetime | None
    retention: timedelta | None  # None when not read: nothing was old enough to matter
    past_half: tuple[PartitionMetadata, ...] = ()
    near_expiry: tuple[PartitionMetadata, ...] = ()  # past ERROR_FRACTION of the retention
    expired: tuple[PartitionMetadata, ...] = ()  # past all of it: their next read would fail

    @property
    def level(self) -> RetentionLevel:
        if self.near_expiry or self.expired:
            return RetentionLevel.ERROR
        return RetentionLevel.WARN if self.past_half else RetentionLevel.OK

    @property
    def oldest_age(self) -> timedelta | None:
        return None if self.low_watermark is None else self.now - self.low_watermark

    def describe(self, stream: str, start_over: str) -> str:
        """One line a person can act on; ``start_over``: how this stream is started over."""
        if self.level is RetentionLevel.OK:
            age = "none unfinished" if self.oldest_age is None else f"oldest watermark {_hours(self.oldest_age)} old"
            return f"stream {stream}: no unread record near expiry ({age})"
        assert self.retention is not None and self.oldest_age is not None
        parts = [
            f"stream {stream} keeps records {_hours(self.retention)} (retention_period); the oldest unfinished "
            f"watermark is {_hours(self.oldest_age)} old"
        ]
        if self.expired:
            parts.append(f"{len(self.expired)} partition(s) expired, no longer launched: {_keys(self.expired)}")
        if self.near_expiry:
            left = self.retention - self.oldest_age
            parts.append(f"{len(self.near_expiry)} within {_hours(self.retention * (1 - ERROR_FRACTION))} of expiry "
                         f"({_hours(max(left, timedelta(0)))} left for the oldest): {_keys(self.near_expiry)}")
        if self.past_half:
            parts.append(f"{len(self.past_half)} past half the retention: {_keys(self.past_half)}")
        return "; ".join(parts) + ". " + WAY_OUT.format(start_over=start_over)


def watch_retention(
    unfinished: UnfinishedPartitions, retention_of: Callable[[], timedelta], now: datetime
) -> RetentionWatch:
    """Classify the unfinished partitions by the age of their watermarks; ``retention_of`` reads
    the stream's retention, only if some watermark is old enough for it to matter."""
    low = unfinished.low_watermark
    if low is None or now - low < MIN_STREAM_RETENTION * WARN_FRACTION:
        return RetentionWatch(now, low, None)
    retention = retention_of()
    expired, near, past_half = [], [], []
    for p in unfinished.partitions:
        age = now - p.watermark
        if age >= retention:
            expired.append(p)
        elif age >= retention * ERROR_FRACTION:
            near.append(p)
        elif age >= retention * WARN_FRACTION:
            past_half.append(p)
    return RetentionWatch(now, low, retention, tuple(past_half), tuple(near), tuple(expired))


def _hours(span: timedelta) -> str:
    return f"{span.total_seconds() / 3600:.1f}h"


def _keys(partitions: tuple[PartitionMetadata, ...], shown: int = 5) -> str:
    keys = ", ".join(p.key for p in partitions[:shown])
    return keys + (f" and {len(partitions) - shown} more" if len(partitions) > shown else "")
