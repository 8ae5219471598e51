"""Lake maintenance (compaction, purge, VACUUM) against kept cuts: every kept cut reads exactly as
before, files only older cuts needed are deleted, and small files are compacted."""

import time

import pyarrow.parquet as pq
import pytest

from cs_platform.lake.maintenance import maintain
from cs_platform.lake.stream_lake import Lake
from cs_platform.landing.store import LandingStore
from cs_platform_tests.lake.bank_landing import land_bank

MARGIN_S = 20.0  # VACUUM margin: above the moment between computing the retention and VACUUM using it


def contents(lake: Lake, cut) -> dict:
    return {table: sorted(tuple(r) for r in df.collect()) for table, df in lake.mirrors_at_cut(cut).items()}


@pytest.mark.parametrize("local_time_zone", ["Europe/Berlin"], indirect=True)
@pytest.mark.heavy
def test_maintenance_keeps_every_kept_cut_and_deletes_what_only_older_cuts_needed(spark, tmp_path, local_time_zone):
    landing = LandingStore(str(tmp_path / "landing"))
    # Five cuts: two before a first pass, three after it; the second pass keeps the last two. Each cut
    # more is a round of Spark jobs and of reads before and after, for no case the five leave out.
    cuts = land_bank(landing, files=5)
    files = landing.files("Bank")  # one per cut, in order
    lake = Lake(spark, str(tmp_path / "lake"))

    def advance(i: int) -> None:
        lake.changelog.ingest(files[: i + 1])
        lake.apply_cut(cuts[i])

    for i in range(2):
        advance(i)
    oldest_accounts = lake.last_published().versions["Accounts"] - 1  # the first cut's version
    # A first pass keeps everything; its purge and compaction remove the first cuts' small files.
    first = maintain(lake, kept_seconds=86400, margin_seconds=MARGIN_S)
    assert first.cuts_dropped == 0 and lake.cuts() == cuts[:2]
    removed_at = time.time()
    for i in range(2, len(cuts)):
        advance(i)
    time.sleep(max(0.0, removed_at + MARGIN_S + 1 - time.time()))  # the first pass's removals age past the margin
    kept = cuts[3:]
    before = {cut: contents(lake, cut) for cut in kept}

    result = maintain(lake, kept_seconds=(cuts[-1] - kept[0]).total_seconds(), margin_seconds=MARGIN_S)

    assert (result.kept_cuts, result.oldest_kept_cut, result.cuts_dropped) == (len(kept), kept[0], len(cuts) - len(kept))
    assert lake.cuts() == kept
    for cut in kept:
        assert contents(lake, cut) == before[cut], f"maintenance changed kept cut {cut}"
    with pytest.raises(KeyError, match="CS_PLATFORM_LAKE_KEPT_CUTS"):
        lake.mirrors_at_cut(cuts[0])
    # The files of the first cut's Accounts version were removed before the margin: VACUUM deleted them.
    with pytest.raises(Exception, match="(?i)not exist|FileNotFound|FAILED_READ_FILE"):
        lake.mirror("Accounts").read(spark, oldest_accounts).collect()
    tables = {t.name: t for t in result.tables}
    assert set(tables) == {"changelog", "manifest", "mirrors/Accounts", "mirrors/Transfers"}
    assert tables["manifest"].files_after == 1 < tables["manifest"].files_before
    assert tables["changelog"].files_after == 1 < tables["changelog"].files_before
    assert tables["mirrors/Accounts"].pinned_version is not None

    # The compacted changelog keeps min/max statistics of commit_timestamp in every row group (an
    # INT64 timestamp, not Spark's default INT96): a cut's range scan skips the row groups outside it.
    changelog = [f for f in (tmp_path / "lake").glob("**/changelog/**/*.parquet") if "_delta_log" not in f.parts]
    footers = [pq.ParquetFile(f).metadata for f in changelog]
    column = footers[0].schema.names.index("commit_timestamp")
    for footer in footers:
        for group in range(footer.num_row_groups):
            chunk = footer.row_group(group).column(column)
            assert chunk.physical_type == "INT64" and chunk.statistics.has_min_max, chunk
