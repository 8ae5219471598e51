"""``python -m cs_platform_tests.lake.killed_apply LANDING LAKE CUT MARKER``: ingest, then apply the
cut, stopping dead after the first mirror's MERGE committed (before the others and the manifest);
writes MARKER and waits for SIGKILL."""

import sys
import time
from datetime import datetime
from pathlib import Path

from cs_platform.lake import cuts, mirrors
from cs_platform.lake.spark import delta_spark_session
from cs_platform.landing.store import LandingStore


def main(landing: str, root: str, cut: str, marker: Path) -> None:
    merge = mirrors.apply_changes

    def merge_then_stop(spark, mirror, changes, columns):
        version = merge(spark, mirror, changes, columns)
        marker.write_text(mirror.uri)
        time.sleep(3600)
        return version

    cuts.apply_changes = merge_then_stop
    lake = cuts.Lake(delta_spark_session("killed_apply", "local[1]"), root)
    lake.changelog.ingest(LandingStore(landing).files("Bank"))
    lake.apply_cut(datetime.fromisoformat(cut))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]))
