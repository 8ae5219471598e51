"""Spark's way to ``gs://``: Google's Hadoop GCS connector, configured from ``GcsAccess``.

The connector ships as one self-contained (shaded) jar: its plain Maven artifact leaves out its
dependencies, and ``spark.jars.packages`` cannot ask for a classifier. So the jar is resolved with
the Ivy that pyspark ships, from the same default repository and into the same cache directory as
Delta's jars, once per machine, and put on the class path of the driver and of the executors
(``extraClassPath``: a cluster's nodes need the jar at that path, as Dataproc's have it built in).
Not through ``spark.jars``: that list is Delta's (``lake/spark.py``: filled by
``spark.jars.packages`` on a machine's first start, recorded from it after), and one set by hand
beside ``spark.jars.packages`` replaces what Spark resolved: the executors then lose Delta's classes.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
from pathlib import Path

import pyspark

from cs_platform.lake.ivy import IVY_HOME, ivy_lock
from cs_platform.storage.gcs import GcsAccess

log = logging.getLogger(__name__)

GROUP, ARTIFACT, VERSION, CLASSIFIER = "com.google.cloud.bigdataoss", "gcs-connector", "3.0.13", "shaded"

IVY_MODULE = f"""\
<ivy-module version="2.0" xmlns:m="http://ant.apache.org/ivy/maven">
  <info organisation="cs_platform" module="gcs-connector-resolution"/>
  <dependencies>
    <dependency org="{GROUP}" name="{ARTIFACT}" rev="{VERSION}" transitive="false">
      <artifact name="{ARTIFACT}" type="jar" ext="jar" m:classifier="{CLASSIFIER}"/>
    </dependency>
  </dependencies>
</ivy-module>
"""


class ConnectorJarError(RuntimeError):
    """Raised when the GCS connector jar cannot be resolved (the message carries Ivy's last lines)."""


def connector_jar(ivy_home: Path = IVY_HOME, timeout_s: float = 300) -> Path:
    """The shaded connector jar, resolved from Maven Central on first use."""
    jar = ivy_home / "jars" / f"{GROUP}_{ARTIFACT}-{VERSION}-{CLASSIFIER}.jar"
    if jar.is_file():
        return jar
    with ivy_lock(ivy_home):
        if not jar.is_file():  # another process may have resolved it meanwhile
            _resolve(jar, ivy_home, timeout_s)
    return jar


def _resolve(jar: Path, ivy_home: Path, timeout_s: float) -> None:
    log.info("resolving %s:%s:%s (%s) into %s, once per machine", GROUP, ARTIFACT, VERSION, CLASSIFIER, jar.parent)
    ivy = next((Path(pyspark.__file__).parent / "jars").glob("ivy-*.jar"))
    jar.parent.mkdir(parents=True, exist_ok=True)
    # Retrieve into a temporary directory beside the cache, then rename: a jar in place is whole.
    with tempfile.TemporaryDirectory(dir=jar.parent, prefix=".gcs-connector-") as work:
        module = Path(work) / "ivy.xml"
        module.write_text(IVY_MODULE)
        pattern = f"{work}/retrieved/[artifact]-[revision]-[classifier].[ext]"
        command = ["java", "-jar", str(ivy), "-ivy", str(module), "-cache", str(ivy_home / "cache"), "-retrieve", pattern]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        retrieved = list(Path(work, "retrieved").glob("*.jar"))
        if done.returncode != 0 or len(retrieved) != 1:
            raise ConnectorJarError(
                f"could not resolve the GCS connector {GROUP}:{ARTIFACT}:{VERSION} ({CLASSIFIER}) that Spark needs for gs:// "
                f"(Maven Central must be reachable once):\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        retrieved[0].replace(jar)


def gcs_spark_config(access: GcsAccess) -> dict[str, str]:
    """Session settings that let Spark read and write ``gs://`` as ``access`` says."""
    jar = str(connector_jar())
    conf = {
        "spark.driver.extraClassPath": jar,
        "spark.executor.extraClassPath": jar,
        "spark.hadoop.fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
        # Renames (Delta's checksum files) as copy + delete: the newer move call is not served by
        # GCS emulators, and one code path for both is the one the tests prove.
        "spark.hadoop.fs.gs.operation.move.enable": "false",
    }
    if access.emulator is None:
        conf["spark.hadoop.fs.gs.auth.type"] = "APPLICATION_DEFAULT"
    else:
        conf["spark.hadoop.fs.gs.auth.type"] = "UNAUTHENTICATED"
        conf["spark.hadoop.fs.gs.storage.root.url"] = access.emulator
    return conf
