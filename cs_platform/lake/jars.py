"""``cs-platform-fetch-jars``: every jar a lake run's JVM loads that pip does not install, fetched
into the Ivy cache (``~/.ivy2.5.2``) once, so that later JVMs start without Maven Central.

Those are Delta's jars (``spark.jars.packages``, resolved with their dependencies by a first JVM,
which records what they resolved to: ``lake/ivy.py``) and Google's GCS connector
(``lake/gcs_connector.py``). Both are otherwise fetched on a machine's first use; a pod starts on a
fresh disk every time, so the image runs this as it is built (``deploy/image/Containerfile``) and
no pod asks Maven Central for anything.

    cs-platform-fetch-jars          # prints each jar, then how many and their size
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cs_platform.lake.gcs_connector import connector_jar
from cs_platform.lake.ivy import IVY_HOME, resolved_jars
from cs_platform.lake.spark import delta_packages, delta_spark_session


class JarsNotFetchedError(RuntimeError):
    """A JVM started, but what it resolved was not recorded (or has gone): terminal for a build."""


def fetch_jars() -> list[Path]:
    """Delta's jars and the GCS connector in the Ivy cache, fetched if they are not there yet."""
    packages = delta_packages()
    if resolved_jars(packages) is None:
        delta_spark_session(app_name="cs_platform_fetch_jars", master="local[1]").stop()  # resolves and records them
    delta = resolved_jars(packages)
    if delta is None:
        raise JarsNotFetchedError(f"a JVM started with {packages} but recorded no resolved jars under {IVY_HOME}")
    return [Path(jar.removeprefix("file://")) for jar in delta] + [connector_jar()]


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="cs-platform-fetch-jars", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    jars = fetch_jars()
    for jar in jars:
        print(jar)
    print(f"{len(jars)} jars, {sum(j.stat().st_size for j in jars) / 1e6:.0f} MB, in {IVY_HOME}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
