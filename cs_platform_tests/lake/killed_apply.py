"""``python -m cs_platform_tests.lake.killed_apply LANDING LAKE CUT MARKER``: ingest, then apply the
cut, stopping dead once the Transfers mirror, which only takes inserts, has its rows appended
(Accounts, merged beside it, may have committed too; the manifest has not); writes MARKER and
waits for SIGKILL. The re-run must not append those rows again."""

import sys
from datetime import datetime
from pathlib import Path

from cs_platform.lake import mirrors, stream_lake
from cs_platform.lake.spark import delta_spark_session
from cs_platform.landing.store import LandingStore
from cs_platform_tests.lake.killed import stopping_after


def main(landing: str, root: str, cut: str, marker: Path) -> None:
    stream_lake.append_inserts = stopping_after(mirrors.append_inserts, marker)
    lake = stream_lake.Lake(delta_spark_session("killed_apply", "local[1]"), root)
    lake.changelog.ingest(LandingStore(landing).files("Bank"))
    lake.apply_cut(datetime.fromisoformat(cut))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]))
