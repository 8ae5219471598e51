"""One Delta table by its path: what its log says, and SQL statements against it.

Every lake statement goes through Spark SQL (``MERGE INTO delta.`path` ...``, ``DELETE``), not the
``DeltaTable`` Python API, so the same code runs on an in-process session and on a Spark Connect
server (whose Delta plugin is not needed for SQL). Facts a cut needs on every run (does the table
exist, its latest version, what its last commit recorded) are read from the ``_delta_log`` commit
files directly: no Spark job, and nothing read that grows with the table.
"""

from __future__ import annotations

import json
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator

from pyarrow import fs as pafs
from pyspark.sql import DataFrame, Row, SparkSession

from cs_platform.landing.location import Location

_LOG = "_delta_log"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_COMMIT = ".json"  # <20-digit version>.json: one commit; checkpoints and .crc files are ignored


def quoted(name: str) -> str:
    """A name in Spark SQL (a column, a view, or the path in ``delta.`<path>```): backticks, with
    any backtick in it doubled."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """A Spark SQL string literal of ``text``."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


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
class DeltaPath:
    """A Delta table at ``path`` (as ``location.filesystem`` names it, under ``location.base``)."""

    location: Location
    path: str

    @classmethod
    def under(cls, location: Location, *parts: str) -> DeltaPath:
        return cls(location, "/".join((location.base, *parts)))

    @property
    def uri(self) -> str:
        """The path as Spark names it (a URI for object stores)."""
        return self.location.uri(self.path)

    def _commits(self) -> list[int]:
        selector = pafs.FileSelector(f"{self.path}/{_LOG}", allow_not_found=True)
        return sorted(
            int(name[: -len(_COMMIT)])
            for info in self.location.filesystem.get_file_info(selector)
            if (name := info.base_name).endswith(_COMMIT) and name[: -len(_COMMIT)].isdigit()
        )

    def version(self) -> int | None:
        """The latest committed version; None if there is no table here."""
        commits = self._commits()
        return commits[-1] if commits else None

    def exists(self) -> bool:
        return self.version() is not None

    def _commit(self, version: int) -> list[dict[str, Any]]:
        text = self.location.read_text(f"{self.path}/{_LOG}/{version:020d}{_COMMIT}")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def commit_timestamp(self, version: int) -> datetime:
        """When ``version`` was committed, by its writer's clock."""
        return datetime.fromtimestamp(self._commit_info(version)["timestamp"] / 1000, timezone.utc)

    def _commit_info(self, version: int) -> dict[str, Any]:
        return next(action["commitInfo"] for action in self._commit(version) if "commitInfo" in action)

    def commit_metrics(self, version: int) -> dict[str, str]:
        """The ``operationMetrics`` ``version``'s commit recorded (numOutputRows, ...)."""
        return self._commit_info(version).get("operationMetrics", {})

    def last_commit_metadata(self) -> dict[str, Any] | None:
        """What the latest commit that recorded ``userMetadata`` (a JSON object) recorded; commits
        without it (maintenance, say) are passed over. None if no commit recorded any."""
        for version in reversed(self._commits()):
            for action in self._commit(version):
                metadata = action.get("commitInfo", {}).get("userMetadata")
                if metadata:
                    return json.loads(metadata)
        return None

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
        metadata = {} if user_metadata is None else {_USER_METADATA: user_metadata}
        try:
            with session_conf(spark, metadata):
                return spark.sql(f"MERGE INTO delta.{quoted(self.uri)} AS t USING {quoted(view)} AS s {statement}").first()
        finally:
            spark.catalog.dropTempView(view)
