"""One Delta table by its path: what its log says (``delta_log``), and SQL statements against it.

Every lake statement goes through Spark SQL (``MERGE INTO delta.`path` ...``, ``DELETE``), not the
``DeltaTable`` Python API, so the same code runs on an in-process session and on a Spark Connect
server (whose Delta plugin is not needed for SQL).
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql import DataFrame, Row, SparkSession

from cs_platform.lake.delta_log import DeltaLog
from cs_platform.lake.identifiers import quoted

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


@contextmanager
def session_conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """``settings`` on the session for the statements inside, unset after."""
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in settings:
            spark.conf.unset(key)


@dataclass(frozen=True)
class DeltaPath(DeltaLog):
    """A Delta table at ``path``: its log (:class:`DeltaLog`), and the Spark statements against it."""

    def read(self, spark: SparkSession, version: int | None = None) -> DataFrame:
        reader = spark.read.format("delta")
        return (reader if version is None else reader.option("versionAsOf", version)).load(self.uri)

    def merge(self, spark: SparkSession, source: DataFrame, statement: str, user_metadata: str | None = None) -> Row:
        """Run ``MERGE INTO <this table> AS t USING <source> AS s <statement>``, its commit recording
        ``user_metadata`` if given; returns its counts (num_affected_rows, num_updated_rows,
        num_deleted_rows, num_inserted_rows)."""
        view = f"cs_platform_merge_{uuid.uuid4().hex}"
        source.createOrReplaceTempView(view)
        # SQL commands take the commit's userMetadata from the session: set for this one only.
        metadata = {} if user_metadata is None else {USER_METADATA: user_metadata}
        try:
            with session_conf(spark, metadata):
                return spark.sql(f"MERGE INTO delta.{quoted(self.uri)} AS t USING {quoted(view)} AS s {statement}").first()
        finally:
            spark.catalog.dropTempView(view)
