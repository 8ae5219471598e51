"""``python -m cs_platform_tests.lake.killed_snapshot HOST PROJECT INSTANCE DATABASE METADATA STREAM LAKE MARKER``:
the snapshot at the stream's start (``lake_steps.start_from_snapshot``), stopping dead after the first
mirror committed (before the others and the manifest); writes MARKER and waits for SIGKILL."""

import sys
from pathlib import Path

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import PartitionMetadataStore
from cs_platform.lake import snapshot
from cs_platform.lake.spark import delta_spark_session
from cs_platform.lake.stream_lake import Lake
from cs_platform.stream.lake_steps import start_from_snapshot
from cs_platform_tests.lake.killed import stopping_after


def main(host: str, project: str, instance: str, database: str, metadata: str, stream: str, root: str, marker: Path) -> None:
    snapshot.replace_mirror = stopping_after(snapshot.replace_mirror, marker)
    store = PartitionMetadataStore(SpannerTarget(project, instance, metadata, host).connect(), f"{stream}Metadata")
    start_from_snapshot(Lake(delta_spark_session("killed_snapshot", "local[1]"), root), SpannerTarget(project, instance, database, host), stream, store)


if __name__ == "__main__":
    main(*sys.argv[1:8], Path(sys.argv[8]))
