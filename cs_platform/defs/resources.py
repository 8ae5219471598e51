"""Configurable resources: where Spanner is, which change stream to read and how, where to land.

All settings come from configuration (``EnvVar`` in ``cs_platform.definitions``), so the same code
runs against the embedded emulator and Cloud Spanner.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Mapping, Optional

from dagster import ConfigurableResource, EnvVar
from google.cloud.spanner_v1.database import Database
from pydantic import PrivateAttr

from cs_platform import settings
from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.errors import MalformedRecordError
from cs_platform.changestream.metadata import PartitionMetadataStore
from cs_platform.changestream.query import RpcPriority, validate_identifier
from cs_platform.changestream.reader import PartitionReader
from cs_platform.changestream.values import parse_timestamp
from cs_platform.errors import InvalidArgumentError
from cs_platform.lake.history_schema import HistoryPolicy
from cs_platform.lake.layout import stream_root
from cs_platform.landing.source import SourceIdentity
from cs_platform.landing.store import LandingStore
from cs_platform.settings import env_name
from cs_platform.storage.gcs import GcsAccess, storage_for
from cs_platform.stream.cleanup import Retention
from cs_platform.stream.source import StreamSource, metadata_table_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cs_platform.lake.stream_lake import Lake


class SpannerResource(ConfigurableResource):
    """A Spanner instance: Cloud Spanner with Application Default Credentials, or the emulator."""

    project_id: str
    instance_id: str
    database_id: str
    emulator_host: Optional[str] = None  # host:port of a Spanner emulator; empty for Cloud Spanner
    timeout_seconds: float = settings.default("CS_PLATFORM_SPANNER_TIMEOUT_SECONDS")  # deadline of the calls that find the database and of metadata queries
    read_mode: str = settings.default("CS_PLATFORM_READ_MODE")  # streaming, polling, or auto (polling on an emulator): CS_PLATFORM_READ_MODE

    def target(self) -> SpannerTarget:
        settings.check_numbers(self)
        return SpannerTarget(
            self.project_id, self.instance_id, self.database_id, self.emulator_host or None, self.timeout_seconds, self.read_mode
        )


class ChangeStreamResource(ConfigurableResource):
    """One change stream and how it is read: metadata table, time range, heartbeat, soft timeout."""

    spanner: SpannerResource
    stream_name: str
    metadata_database_id: Optional[str] = None  # default: the source database
    metadata_table: Optional[str] = None  # default: <stream_name>Metadata
    start_timestamp: Optional[str] = None  # RFC 3339; default: the first sensor tick
    end_timestamp: Optional[str] = None  # RFC 3339; default: read forever
    heartbeat_millis: int = settings.default("CS_PLATFORM_HEARTBEAT_MILLIS")
    # One run reads at most this long, landing as it goes, then ends: long, because a run start costs
    # seconds and Dagster storage (~40 KB of rows) while landing no longer waits for a run's end.
    soft_timeout_seconds: float = settings.default("CS_PLATFORM_SOFT_TIMEOUT_SECONDS")
    max_parallel_reads: int = settings.default("CS_PLATFORM_MAX_PARALLEL_READS")  # reader runs the sensor keeps in flight
    # A run that has not landed (nor started) for this long is presumed dead and its partition re-launched.
    stale_run_seconds: float = settings.default("CS_PLATFORM_STALE_RUN_SECONDS")
    # First pause before re-launching a read that made no progress (then doubled). Keep it above the
    # time a launched run takes to show up in the instance, or a slow start looks like a failure.
    retry_backoff_seconds: float = 30.0
    rpc_priority: str = settings.default("CS_PLATFORM_RPC_PRIORITY")  # LOW, MEDIUM or HIGH (RequestOptions priority of our requests)
    landing_chunk_mods: int = settings.default("CS_PLATFORM_LANDING_CHUNK_MODS")  # a run lands (and persists its watermark) every this many mods
    landing_interval_seconds: float = settings.default("CS_PLATFORM_LANDING_INTERVAL_SECONDS")  # ... and at least this often
    yield_after_seconds: float = settings.default("CS_PLATFORM_YIELD_AFTER_SECONDS")  # asked to yield its slot (partitions wait), a run ends after reading this long
    report_interval_seconds: float = settings.default("CS_PLATFORM_REPORT_INTERVAL_SECONDS")  # a run's landings are reported to Dagster at most this often (cs_platform.stream.reporting)

    _source: StreamSource | None = PrivateAttr(default=None)

    def validated(self) -> "ChangeStreamResource":
        """Fail early, naming the setting (its environment variable), before anything touches Spanner."""
        validate_identifier(self.stream_name, "change stream name (CS_PLATFORM_CHANGE_STREAMS)")
        validate_identifier(self.metadata_table_name, "metadata table name")
        settings.check_numbers(self)
        stale, interval = env_name("stale_run_seconds"), env_name("landing_interval_seconds")
        if self.stale_run_seconds <= 2 * self.landing_interval_seconds:
            raise InvalidArgumentError(
                f"{stale} ({self.stale_run_seconds:g}) must exceed twice {interval} ({self.landing_interval_seconds:g}): "
                "a healthy run lands at least that often, and would be presumed dead"
            )
        if self.rpc_priority not in RpcPriority.__members__:
            raise InvalidArgumentError(
                f"{env_name('rpc_priority')}={self.rpc_priority!r} is not a priority: use one of {', '.join(RpcPriority.__members__)}"
            )
        self.start(), self.end()
        return self

    @property
    def metadata_table_name(self) -> str:
        return metadata_table_name(self.stream_name, self.metadata_table)

    def source(self) -> StreamSource:
        """The stream's Spanner side (``cs_platform.stream.source``), connected once per resource instance."""
        if self._source is None:
            self._source = StreamSource(
                self.spanner.target(), self.stream_name, self.metadata_table_name, self.metadata_database_id, RpcPriority(self.rpc_priority)
            )
        return self._source

    @property
    def max_runtime_seconds(self) -> float:
        """Dagster's run monitoring ends a reader run past this: its soft timeout, then stale_run_seconds."""
        return self.soft_timeout_seconds + self.stale_run_seconds

    @property
    def soft_timeout(self) -> timedelta:
        return timedelta(seconds=self.soft_timeout_seconds)

    @property
    def landing_interval(self) -> timedelta:
        return timedelta(seconds=self.landing_interval_seconds)

    def start(self) -> datetime | None:
        return _timestamp_setting("start_timestamp", self.start_timestamp)

    def end(self) -> datetime | None:
        return _timestamp_setting("end_timestamp", self.end_timestamp)

    def source_database(self) -> Database:
        return self.source().source_database()

    def metadata_store(self) -> PartitionMetadataStore:
        return self.source().metadata_store()

    def require_stream(self) -> None:
        self.source().require_stream()

    def retention_period(self) -> timedelta:
        return self.source().retention_period()

    def source_identity(self) -> SourceIdentity:
        return self.source().source_identity()

    def reader(self) -> PartitionReader:
        return self.source().reader(self.heartbeat_millis)


class LandingResource(ConfigurableResource):
    """Where partition reads land as gzipped JSON lines: a local directory or a ``gs://bucket/prefix`` URI."""

    root: str

    def store(self, source: SourceIdentity | None = None) -> LandingStore:
        """The landing store; given a source, it refuses to land into another source's directory."""
        return LandingStore(self.root, source)


class LakeResource(ConfigurableResource):
    """Where the Delta tables live: a local directory or gs:// URI; one sub-directory per stream."""

    root: str
    max_lag_seconds: float = settings.default("CS_PLATFORM_MAX_LAG_SECONDS")  # the lake is late beyond this (watermark_lag check, freshness policy)
    untyped_values: str = settings.default("CS_PLATFORM_UNTYPED_VALUES")  # or "quarantine": see cs_platform.lake.quarantine
    history_tables: str = settings.default("CS_PLATFORM_HISTORY_TABLES")  # or "all", or table names: see cs_platform.lake.history
    append_inserts: bool = settings.default("CS_PLATFORM_APPEND_INSERTS")  # a mirror that only takes inserts is appended to: see cs_platform.lake.stream_lake
    kept_cuts_seconds: float = settings.default("CS_PLATFORM_LAKE_KEPT_CUTS_SECONDS")  # cuts this recent stay readable; maintenance drops older ones (cs_platform.lake.maintenance)
    cut_interval_seconds: float = settings.default("CS_PLATFORM_CUT_INTERVAL_SECONDS")  # a lake run cuts at most this often (lake_steps.keep_cutting)
    lake_soft_timeout_seconds: float = settings.default("CS_PLATFORM_LAKE_SOFT_TIMEOUT_SECONDS")  # how long a sensor-launched lake run keeps cutting
    vacuum_margin_seconds: float = settings.default("CS_PLATFORM_LAKE_VACUUM_MARGIN_SECONDS")  # VACUUM spares files removed this long before the oldest kept cut
    report_interval_seconds: float = settings.default("CS_PLATFORM_REPORT_INTERVAL_SECONDS")  # a lake run's cuts are reported to Dagster at most this often (cs_platform.stream.reporting)

    def stream_root(self, stream: str) -> str:
        return stream_root(self.root, validate_identifier(stream, "change stream name"))

    def lake(self, spark: SparkSession, stream: str, holder: str = "a lake writer") -> Lake:
        """The lake of ``stream``; ``holder`` names who writes it (the lake's fence names it in its log and errors)."""
        from cs_platform.lake.stream_lake import POLICIES, Lake  # PySpark: only in the lake's steps (see SparkResource)

        settings.check_numbers(self)
        if self.untyped_values not in POLICIES:
            raise InvalidArgumentError(f"CS_PLATFORM_UNTYPED_VALUES={self.untyped_values!r} is not one of {', '.join(POLICIES)}")
        return Lake(
            spark,
            self.stream_root(stream),
            untyped_policy=self.untyped_values,
            history=self.history_policy(),
            append_inserts=self.append_inserts,
            holder=holder,
        )

    def history_policy(self) -> HistoryPolicy:
        try:
            return HistoryPolicy.parse(self.history_tables)
        except ValueError as e:
            raise InvalidArgumentError(str(e)) from e


class RetentionResource(ConfigurableResource):
    """How long cleanup keeps what a stream leaves behind (``cs_platform.stream.cleanup``)."""

    metadata_retention_seconds: float = settings.default("CS_PLATFORM_METADATA_RETENTION_SECONDS")
    run_retention_seconds: float = settings.default("CS_PLATFORM_RUN_RETENTION_SECONDS")
    landing_retention_seconds: float = settings.default("CS_PLATFORM_LANDING_RETENTION_SECONDS")

    def validated(self) -> "RetentionResource":
        settings.check_numbers(self)
        return self

    def retention(self) -> Retention:
        """What cleanup keeps, as the pass takes it."""
        return Retention(
            metadata=timedelta(seconds=self.metadata_retention_seconds),
            runs=timedelta(seconds=self.run_retention_seconds),
            landing=timedelta(seconds=self.landing_retention_seconds),
        )


class SparkResource(ConfigurableResource):
    """The lake's Spark session with Delta (``lake.spark.lake_spark_config``), built by dagster-pyspark's
    ``spark_session_from_config`` when a step that needs it starts: on the Spark Connect server at
    ``remote`` when set (a long-lived JVM), else a driver in the run's process on ``master`` (local, or
    a cluster's master), with Google's GCS connector when ``gcs`` (a root is on gs://).

    Not dagster-pyspark's ``PySparkResource`` itself: importing it imports PySpark, and every run
    loads the whole code location, reader runs included. Here PySpark and Delta are imported only by
    the steps that use Spark, so a reader run stays lean (``bench/reader_memory.py``). A server or
    master is checked to answer first: Spark alone would retry for minutes."""

    master: str = "local[*]"
    remote: str = ""
    gcs: bool = False
    gcs_emulator: Optional[str] = None  # http://host:port of a GCS emulator; None: Cloud Storage
    _session: Any = PrivateAttr(default=None)

    def spark_config(self) -> dict[str, str]:
        from cs_platform.lake.spark import lake_spark_config

        return lake_spark_config(self.master, self.remote, GcsAccess(self.gcs_emulator) if self.gcs else None)

    def setup_for_execution(self, context) -> None:
        from dagster_pyspark.resources import spark_session_from_config

        from cs_platform.lake.spark import check_reachable, start_session

        config = self.spark_config()
        check_reachable(config)
        self._session = start_session(config, lambda: spark_session_from_config(config))

    @property
    def spark_session(self) -> SparkSession:
        return self._session


def spark_resource(environ: Mapping[str, str], roots: list[str]) -> SparkResource:
    storage = storage_for(roots, environ)  # parsed now: a bad STORAGE_EMULATOR_HOST fails the load, named
    return SparkResource(
        master=settings.value(environ, "CS_PLATFORM_SPARK_MASTER"),
        remote=settings.value(environ, "CS_PLATFORM_SPARK_REMOTE") or "",
        gcs=storage is not None,
        gcs_emulator=storage.emulator if storage is not None else None,
    )


def _timestamp_setting(name: str, value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return parse_timestamp(value)
    except MalformedRecordError as e:
        raise InvalidArgumentError(
            f"{env_name(name)}={value!r} is not an RFC 3339 timestamp: use e.g. 2026-01-31T12:00:00Z"
        ) from e


def stream_slug(stream: str) -> str:
    """``BankStream`` -> ``bank_stream``: the prefix of every Dagster name of a stream."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", validate_identifier(stream, "change stream name (CS_PLATFORM_CHANGE_STREAMS)")).lower()


def change_stream_resource_key(stream: str) -> str:
    return f"{stream_slug(stream)}_change_stream"


def configured_resources(environ: Mapping[str, str], lazy: bool = False) -> dict:
    """Every resource, configured from the environment (see ``cs_platform.settings``).

    ``lazy`` (what ``Definitions`` use) leaves the required Spanner settings as ``EnvVar``s, read
    when a tick or run needs them. Plain Python (``lazy=False``: scripts, notebooks, the demo) gets
    the values now, and an error naming any missing one; the objects are the same either way, e.g.
    ``configured_resources(os.environ)["bank_stream_change_stream"].metadata_store()``.
    """

    def required(env: str):
        return EnvVar(env) if lazy else settings.required(environ, env)

    def optional_text(env: str) -> str | None:
        settings.value(environ, env)  # parse now: a bad value fails here, naming its variable
        return environ.get(env) or None

    spanner = SpannerResource(
        project_id=required("CS_PLATFORM_SPANNER_PROJECT"),
        instance_id=required("CS_PLATFORM_SPANNER_INSTANCE"),
        database_id=required("CS_PLATFORM_SPANNER_DATABASE"),
        emulator_host=settings.value(environ, "SPANNER_EMULATOR_HOST"),
        timeout_seconds=settings.value(environ, "CS_PLATFORM_SPANNER_TIMEOUT_SECONDS"),
        read_mode=settings.value(environ, "CS_PLATFORM_READ_MODE"),
    )
    landing_root, lake_root = settings.value(environ, "CS_PLATFORM_LANDING_ROOT"), settings.value(environ, "CS_PLATFORM_LAKE_ROOT")
    resources: dict = {
        "landing": LandingResource(root=landing_root),
        "lake": LakeResource(
            root=lake_root,
            max_lag_seconds=settings.value(environ, "CS_PLATFORM_MAX_LAG_SECONDS"),
            untyped_values=settings.value(environ, "CS_PLATFORM_UNTYPED_VALUES"),
            history_tables=settings.value(environ, "CS_PLATFORM_HISTORY_TABLES"),
            append_inserts=settings.value(environ, "CS_PLATFORM_APPEND_INSERTS"),
            kept_cuts_seconds=settings.value(environ, "CS_PLATFORM_LAKE_KEPT_CUTS_SECONDS"),
            cut_interval_seconds=settings.value(environ, "CS_PLATFORM_CUT_INTERVAL_SECONDS"),
            lake_soft_timeout_seconds=settings.value(environ, "CS_PLATFORM_LAKE_SOFT_TIMEOUT_SECONDS"),
            vacuum_margin_seconds=settings.value(environ, "CS_PLATFORM_LAKE_VACUUM_MARGIN_SECONDS"),
            report_interval_seconds=settings.value(environ, "CS_PLATFORM_REPORT_INTERVAL_SECONDS"),
        ),
        "retention": RetentionResource(
            metadata_retention_seconds=settings.value(environ, "CS_PLATFORM_METADATA_RETENTION_SECONDS"),
            run_retention_seconds=settings.value(environ, "CS_PLATFORM_RUN_RETENTION_SECONDS"),
            landing_retention_seconds=settings.value(environ, "CS_PLATFORM_LANDING_RETENTION_SECONDS"),
        ),
        "pyspark": spark_resource(environ, [landing_root, lake_root]),
    }
    for stream in settings.value(environ, "CS_PLATFORM_CHANGE_STREAMS"):
        resources[change_stream_resource_key(stream)] = ChangeStreamResource(
            spanner=spanner,
            stream_name=stream,
            metadata_database_id=settings.value(environ, "CS_PLATFORM_METADATA_DATABASE"),
            start_timestamp=optional_text("CS_PLATFORM_START_TIMESTAMP"),
            end_timestamp=optional_text("CS_PLATFORM_END_TIMESTAMP"),
            heartbeat_millis=settings.value(environ, "CS_PLATFORM_HEARTBEAT_MILLIS"),
            soft_timeout_seconds=settings.value(environ, "CS_PLATFORM_SOFT_TIMEOUT_SECONDS"),
            max_parallel_reads=settings.value(environ, "CS_PLATFORM_MAX_PARALLEL_READS"),
            stale_run_seconds=settings.value(environ, "CS_PLATFORM_STALE_RUN_SECONDS"),
            rpc_priority=settings.value(environ, "CS_PLATFORM_RPC_PRIORITY"),
            landing_chunk_mods=settings.value(environ, "CS_PLATFORM_LANDING_CHUNK_MODS"),
            landing_interval_seconds=settings.value(environ, "CS_PLATFORM_LANDING_INTERVAL_SECONDS"),
            yield_after_seconds=settings.value(environ, "CS_PLATFORM_YIELD_AFTER_SECONDS"),
            report_interval_seconds=settings.value(environ, "CS_PLATFORM_REPORT_INTERVAL_SECONDS"),
        )
    return resources
