"""What Spark resolved Delta's jars to is recorded once and used by later starts, only while whole."""

from pathlib import Path

from cs_platform.lake.ivy import remember_resolved, resolved_jars
from cs_platform.lake.spark import delta_spark_config, resolves_jars

PACKAGES = "io.delta:delta-spark_4.0_2.13:4.4.0"


def jar(directory: Path, name: str) -> str:
    path = directory / "jars" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PK")
    return f"file://{path}"


def test_a_recorded_resolution_is_used_only_for_its_packages_and_while_every_jar_exists(tmp_path):
    jars = [jar(tmp_path, "io.delta_delta-spark.jar"), jar(tmp_path, "io.delta_delta-storage.jar")]
    assert resolved_jars(PACKAGES, tmp_path) is None  # nothing resolved on this machine yet
    remember_resolved(PACKAGES, ",".join(jars), tmp_path)
    assert resolved_jars(PACKAGES, tmp_path) == jars  # in Spark's order
    assert resolved_jars("io.delta:delta-spark_4.0_2.13:9.9.9", tmp_path) is None  # other packages: resolve them
    Path(jars[1].removeprefix("file://")).unlink()
    assert resolved_jars(PACKAGES, tmp_path) is None  # a jar has gone: resolve again


def test_the_lake_starts_spark_on_the_recorded_jars_once_a_start_resolved_them(spark):
    # The session's own start (the spark fixture) resolved them, or found them recorded.
    config = delta_spark_config("local[1]")
    assert not resolves_jars(config) and "spark.jars.packages" not in config
    assert config["spark.jars"] == spark.sparkContext.getConf().get("spark.jars")  # what Spark resolved, as it ordered them
    assert any("delta-spark" in j for j in config["spark.jars"].split(","))
