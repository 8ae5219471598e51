"""Configurable resources: where Spanner is, which change stream to read and how, where to land.

All settings come from configuration (``EnvVar`` in ``cs_platform.definitions``), so the same code
runs against the embedded emulator and Cloud Spanner.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Optional

from dagster import ConfigurableResource
from google.cloud.spanner_v1.database import Database
from pydantic import PrivateAttr

from cs_platform.changestream.connection import SpannerTarget, database_dialect
from cs_platform.changestream.errors import InvalidArgumentError, MalformedRecordError
from cs_platform.changestream.metadata import PartitionMetadataStore
from cs_platform.changestream.query import ChangeStreamQuery, validate_heartbeat_millis, validate_identifier
from cs_platform.changestream.reader import PartitionReader
from cs_platform.changestream.values import parse_timestamp
from cs_platform.landing.store import LandingStore


class SpannerResource(ConfigurableResource):
    """A Spanner instance: Cloud Spanner with Application Default Credentials, or the emulator."""

    project_id: str
    instance_id: str
    database_id: str
    emulator_host: Optional[str] = None  # host:port of a Spanner emulator; empty for Cloud Spanner

    _databases: dict = PrivateAttr(default_factory=dict)

    def target(self, database_id: str | None = None) -> SpannerTarget:
        return SpannerTarget(self.project_id, self.instance_id, database_id or self.database_id, self.emulator_host or None)

    def database(self, database_id: str | None = None) -> Database:
        """The database handle (connected once per resource instance, checked to exist)."""
        name = database_id or self.database_id
        if name not in self._databases:
            self._databases[name] = self.target(name).connect()
        return self._databases[name]


class ChangeStreamResource(ConfigurableResource):
    """One change stream and how it is read: metadata table, time range, heartbeat, soft timeout."""

    spanner: SpannerResource
    stream_name: str
    metadata_database_id: Optional[str] = None  # default: the source database
    metadata_table: Optional[str] = None  # default: <stream_name>Metadata
    start_timestamp: Optional[str] = None  # RFC 3339; default: the first sensor tick
    end_timestamp: Optional[str] = None  # RFC 3339; default: read forever
    heartbeat_millis: int = 2000
    soft_timeout_seconds: float = 60.0  # one run reads at most this long, then lands and ends
    max_parallel_reads: int = 8  # reader runs the sensor keeps in flight
    stale_run_seconds: float = 900.0  # an unfinished run older than this is presumed dead
    # First pause before re-launching a read that made no progress (then doubled). Keep it above the
    # time a launched run takes to show up in the instance, or a slow start looks like a failure.
    retry_backoff_seconds: float = 30.0

    def validated(self) -> "ChangeStreamResource":
        """Fail early, naming the setting, before anything touches Spanner."""
        validate_identifier(self.stream_name, "change stream name")
        validate_identifier(self.metadata_table_name, "metadata table name")
        validate_heartbeat_millis(self.heartbeat_millis)
        if self.soft_timeout_seconds <= 0:
            raise InvalidArgumentError(f"soft_timeout_seconds must be positive, got {self.soft_timeout_seconds}")
        if self.max_parallel_reads < 1:
            raise InvalidArgumentError(f"max_parallel_reads must be at least 1, got {self.max_parallel_reads}")
        if self.stale_run_seconds <= self.soft_timeout_seconds:
            raise InvalidArgumentError(
                f"stale_run_seconds ({self.stale_run_seconds}) must exceed soft_timeout_seconds "
                f"({self.soft_timeout_seconds}): a healthy run would be presumed dead"
            )
        self.start(), self.end()
        return self

    @property
    def metadata_table_name(self) -> str:
        return self.metadata_table or f"{self.stream_name}Metadata"

    @property
    def soft_timeout(self) -> timedelta:
        return timedelta(seconds=self.soft_timeout_seconds)

    def start(self) -> datetime | None:
        return _timestamp_setting("start_timestamp", self.start_timestamp)

    def end(self) -> datetime | None:
        return _timestamp_setting("end_timestamp", self.end_timestamp)

    def source_database(self) -> Database:
        return self.spanner.database()

    def metadata_store(self) -> PartitionMetadataStore:
        return PartitionMetadataStore(self.spanner.database(self.metadata_database_id), self.metadata_table_name)

    def reader(self) -> PartitionReader:
        source = self.source_database()
        query = ChangeStreamQuery(self.stream_name, database_dialect(source), self.heartbeat_millis)
        return PartitionReader(source, query, self.metadata_store(), tail=self.spanner.target().live_tail)


class LandingResource(ConfigurableResource):
    """Where partition reads land as Parquet: a local directory or a ``gs://bucket/prefix`` URI."""

    root: str

    def store(self) -> LandingStore:
        return LandingStore(self.root)


def _timestamp_setting(name: str, value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return parse_timestamp(value)
    except MalformedRecordError as e:
        raise InvalidArgumentError(
            f"{name} {value!r} is not an RFC 3339 timestamp: use e.g. 2026-01-31T12:00:00Z"
        ) from e
