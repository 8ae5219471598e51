"""The code location loaded by ``dagster dev -w workspace.yaml``, ``[tool.dagster]`` and Dagster+.

Configuration comes from the environment, so the same code reads the emulator or Cloud Spanner:

==================================  ==========================================================
CS_PLATFORM_SPANNER_PROJECT         Google Cloud project of the source database (required)
CS_PLATFORM_SPANNER_INSTANCE        Spanner instance (required)
CS_PLATFORM_SPANNER_DATABASE        source database (required)
SPANNER_EMULATOR_HOST               host:port of an emulator; unset for Cloud Spanner (ADC)
CS_PLATFORM_CHANGE_STREAMS          comma-separated stream names (default BankStream)
CS_PLATFORM_METADATA_DATABASE       database of the partition metadata tables (default: source)
CS_PLATFORM_START_TIMESTAMP         RFC 3339 start (default: first sensor tick)
CS_PLATFORM_END_TIMESTAMP           RFC 3339 end (default: none, read forever)
CS_PLATFORM_HEARTBEAT_MILLIS        heartbeat interval, 100..300000 (default 2000)
CS_PLATFORM_SOFT_TIMEOUT_SECONDS    how long one run reads before it lands and ends (default 60)
CS_PLATFORM_MAX_PARALLEL_READS      reader runs in flight per stream (default 8)
CS_PLATFORM_STALE_RUN_SECONDS       unfinished runs older than this are presumed dead (default 900)
CS_PLATFORM_SENSOR_INTERVAL_SECONDS seconds between sensor ticks (default 30)
CS_PLATFORM_LANDING_ROOT            local directory or gs:// URI for landing files (default .demo/landing)
CS_PLATFORM_LAKE_ROOT               local directory or gs:// URI for the Delta tables (default .demo/lake)
CS_PLATFORM_SPARK_MASTER            Spark master (default local[*]); any cluster URL works
==================================  ==========================================================

The required settings are ``EnvVar``s, read when a run or tick needs them, so the UI loads even
before they are set (a tick then fails naming the missing variable).
"""

from __future__ import annotations

import os
from typing import Mapping

from dagster import Definitions, EnvVar

from cs_platform.defs.change_stream import ChangeStreamNames, change_stream_definitions
from dagster_pyspark import PySparkResource

from cs_platform.defs.lake_assets import LakeResource
from cs_platform.defs.resources import ChangeStreamResource, LandingResource, SpannerResource
from cs_platform.lake.spark import delta_spark_config


def build_definitions(environ: Mapping[str, str] = os.environ) -> Definitions:
    spanner = SpannerResource(
        project_id=EnvVar("CS_PLATFORM_SPANNER_PROJECT"),
        instance_id=EnvVar("CS_PLATFORM_SPANNER_INSTANCE"),
        database_id=EnvVar("CS_PLATFORM_SPANNER_DATABASE"),
        emulator_host=environ.get("SPANNER_EMULATOR_HOST") or None,
    )
    streams = [s.strip() for s in environ.get("CS_PLATFORM_CHANGE_STREAMS", "BankStream").split(",") if s.strip()]
    interval = int(environ.get("CS_PLATFORM_SENSOR_INTERVAL_SECONDS", "30"))
    per_stream = []
    resources: dict = {
        "landing": LandingResource(root=environ.get("CS_PLATFORM_LANDING_ROOT", ".demo/landing")),
        "lake": LakeResource(root=environ.get("CS_PLATFORM_LAKE_ROOT", ".demo/lake")),
        "pyspark": PySparkResource(spark_config=delta_spark_config(environ.get("CS_PLATFORM_SPARK_MASTER", "local[*]"))),
    }
    for stream in streams:
        resource = ChangeStreamResource(
            spanner=spanner,
            stream_name=stream,
            metadata_database_id=environ.get("CS_PLATFORM_METADATA_DATABASE") or None,
            start_timestamp=environ.get("CS_PLATFORM_START_TIMESTAMP") or None,
            end_timestamp=environ.get("CS_PLATFORM_END_TIMESTAMP") or None,
            heartbeat_millis=int(environ.get("CS_PLATFORM_HEARTBEAT_MILLIS", "2000")),
            soft_timeout_seconds=float(environ.get("CS_PLATFORM_SOFT_TIMEOUT_SECONDS", "60")),
            max_parallel_reads=int(environ.get("CS_PLATFORM_MAX_PARALLEL_READS", "8")),
            stale_run_seconds=float(environ.get("CS_PLATFORM_STALE_RUN_SECONDS", "900")),
        )
        stream_defs = change_stream_definitions(stream, resource, sensor_interval_seconds=interval)
        per_stream.append(stream_defs)
        resources[ChangeStreamNames(stream).resource_key] = resource
    return Definitions.merge(*per_stream, Definitions(resources=resources))


defs = build_definitions()
