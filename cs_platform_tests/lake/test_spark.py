"""The lake's Spark session: its JVM keeps UTC whatever the host's zone, so Delta trusts each commit's
checksum instead of rebuilding the new version's state after every commit."""

import os
import time

from pyspark.sql import SparkSession


def test_the_jvm_is_in_utc_on_a_host_outside_it_so_delta_skips_the_forced_state_rebuild(spark: SparkSession):
    assert os.environ["TZ"] != "UTC" and time.localtime().tm_zone != "UTC"  # the suite's host zone
    jvm = spark._jvm
    assert jvm.java.util.TimeZone.getDefault().getID() == "UTC"
    assert jvm.java.lang.System.getProperty("user.timezone") == "UTC"
    delta_snapshot = getattr(getattr(jvm.org.apache.spark.sql.delta, "Snapshot$"), "MODULE$")  # a Scala object
    assert not delta_snapshot.allFilesInCrcVerificationForceEnabled(spark._jsparkSession)
