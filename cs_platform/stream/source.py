"""One change stream's Spanner side as plain objects: its source database and metadata database,
each connected once, its partition metadata table and its reader.

The Dagster resource (``defs/resources.ChangeStreamResource``) builds one from its fields; a script
outside Dagster (``python -m cs_platform.reset``, ``make demo``) from the settings, with
``StreamSource.from_settings``: the same objects either way, and no Dagster import.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Mapping

from google.cloud.spanner_v1.database import Database

from cs_platform import settings
from cs_platform.changestream.catalog import change_stream_retention, partition_mode, require_change_stream
from cs_platform.changestream.connection import SpannerTarget, database_dialect
from cs_platform.changestream.metadata import PartitionMetadataStore
from cs_platform.changestream.query import ChangeStreamQuery, RpcPriority, validate_identifier
from cs_platform.changestream.reader import PartitionReader
from cs_platform.landing.source import SourceIdentity
from cs_platform.stream.state import source_identity


class StreamSource:
    """Change stream ``stream`` of the database at ``target``; its metadata table ``metadata_table``
    in database ``metadata_database`` (None: the source database)."""

    def __init__(
        self,
        target: SpannerTarget,
        stream: str,
        metadata_table: str,
        metadata_database: str | None = None,
        priority: RpcPriority = RpcPriority.HIGH,
    ) -> None:
        self.target, self.stream, self.metadata_table = target, stream, metadata_table
        self.metadata_database = metadata_database or target.database
        self.priority = priority
        self._databases: dict[str, Database] = {}

    @classmethod
    def from_settings(cls, environ: Mapping[str, str], stream: str) -> "StreamSource":
        """The stream as the settings in ``environ`` configure it (a required one missing is named)."""
        validate_identifier(stream, "change stream name (CS_PLATFORM_CHANGE_STREAMS)")

        def value(env: str):
            return settings.value(environ, env)

        target = SpannerTarget(
            settings.required(environ, "CS_PLATFORM_SPANNER_PROJECT"),
            settings.required(environ, "CS_PLATFORM_SPANNER_INSTANCE"),
            settings.required(environ, "CS_PLATFORM_SPANNER_DATABASE"),
            value("SPANNER_EMULATOR_HOST"),
            value("CS_PLATFORM_SPANNER_TIMEOUT_SECONDS"),
            value("CS_PLATFORM_READ_MODE"),
        )
        return cls(
            target, stream, metadata_table_name(stream), value("CS_PLATFORM_METADATA_DATABASE"), RpcPriority(value("CS_PLATFORM_RPC_PRIORITY"))
        )

    def database(self, database_id: str) -> Database:
        """The database handle, connected (and checked to exist) once per source."""
        if database_id not in self._databases:
            self._databases[database_id] = replace(self.target, database=database_id).connect()
        return self._databases[database_id]

    def source_database(self) -> Database:
        return self.database(self.target.database)

    def metadata_store(self) -> PartitionMetadataStore:
        return PartitionMetadataStore(
            self.database(self.metadata_database), self.metadata_table, timeout_s=self.target.timeout_s, priority=self.priority
        )

    def require_stream(self) -> None:
        """The source database exists (``database`` checks) and has this change stream."""
        require_change_stream(self.source_database(), self.stream, self.target.timeout_s)

    def retention_period(self) -> timedelta:
        """How long Spanner keeps this stream's records (``retention_period``)."""
        return change_stream_retention(self.source_database(), self.stream, self.target.timeout_s)

    def source_identity(self) -> SourceIdentity:
        return source_identity(self.target, self.stream, self.metadata_store())

    def reader(self, heartbeat_millis: int) -> PartitionReader:
        source = self.source_database()
        mode = partition_mode(source, self.stream, self.target.timeout_s)
        query = ChangeStreamQuery(self.stream, database_dialect(source), heartbeat_millis, mode)
        return PartitionReader(source, query, self.metadata_store(), tail=self.target.live_tail, priority=self.priority)


def metadata_table_name(stream: str, configured: str | None = None) -> str:
    """The stream's partition metadata table: ``configured``, else ``<stream>Metadata``."""
    return configured or f"{stream}Metadata"
