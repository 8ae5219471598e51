"""Spark with Delta Lake, local by default, any cluster by configuration.

``configure_spark_with_delta_pip`` decides which Maven artifact matches the installed packages
(``io.delta:delta-spark_<spark major.minor>_2.13:<delta-spark version>``, cached in ~/.ivy2.5.2);
:func:`delta_spark_config` turns its choice into a plain config dict, so the same settings feed
dagster-pyspark's ``PySparkResource`` and :func:`delta_spark_session` (tests, demo).
"""

from __future__ import annotations

import logging
import os
from typing import Mapping

from delta import configure_spark_with_delta_pip
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
}


def delta_spark_config(master: str = "local[*]", app_name: str = "cs_platform", extra: Mapping[str, str] | None = None) -> dict[str, str]:
    builder = configure_spark_with_delta_pip(SparkSession.builder)
    packages = builder._options["spark.jars.packages"]  # what the helper asked Maven for
    if master.startswith("local"):
        # Local sessions bind to loopback only (the machine's other addresses are not ours to use).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return {"spark.master": master, "spark.app.name": app_name, "spark.jars.packages": packages, **DELTA_CONF, **(extra or {})}


def delta_spark_session(app_name: str = "cs_platform", master: str = "local[*]", extra: Mapping[str, str] | None = None) -> SparkSession:
    builder = SparkSession.builder
    for key, value in delta_spark_config(master, app_name, extra).items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except PySparkRuntimeError as e:
        # Seen here twice when another JVM resolved the same Ivy cache at the same moment: the
        # gateway exits before reporting its port. One more attempt, then the error stands.
        if "JAVA_GATEWAY_EXITED" not in str(e):
            raise
        log.warning("Spark's Java gateway exited while starting (%s); starting it once more", e)
        return builder.getOrCreate()
