"""A SparkSession with Delta Lake, local by default.

``configure_spark_with_delta_pip`` asks Maven for ``io.delta:delta-spark_<spark major.minor>_2.13:
<delta-spark version>`` (cached in ~/.ivy2.5.2); the same settings work on any cluster by
configuration (``master`` and ``extra``).
"""

from __future__ import annotations

import os
from typing import Mapping

from delta import configure_spark_with_delta_pip
from pyspark.sql import SparkSession

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
}


def delta_spark_session(app_name: str = "cs_platform", master: str = "local[*]", extra: Mapping[str, str] | None = None) -> SparkSession:
    if master.startswith("local"):
        # Local sessions bind to loopback only (the machine's other addresses are not ours to use).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in {**DELTA_CONF, **(extra or {})}.items():
        builder = builder.config(key, value)
    return configure_spark_with_delta_pip(builder).getOrCreate()
