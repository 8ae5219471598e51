"""The lake's fence (``lake/fence.py``, DESIGN invariant 13): once a newer writer has taken a lake,
an older one changes no table of it, whatever it writes, and stops with one error saying so; the
manifest only moves forward. (Real processes, one paused mid-cut and resumed after its successor's
cuts: ``defs/test_crash_and_restart.py``.)"""

import pytest

from cs_platform.lake.fence import LakeFencedError
from cs_platform.lake.history_schema import HistoryPolicy
from cs_platform.lake.published import PublishedCut
from cs_platform.lake.stream_lake import Lake, ManifestOrderError
from cs_platform.landing.store import LandingStore
from cs_platform_tests.lake.bank_landing import land_bank


def versions(lake: Lake) -> dict[str, int | None]:
    """Every table of the lake (the fence's own but) at its latest Delta version."""
    return {t.path: t.version() for t in lake.tables()}


def test_an_older_writer_changes_no_table_once_a_newer_one_took_the_lake(spark, tmp_path):
    landing = LandingStore(str(tmp_path / "landing"))
    cuts = land_bank(landing, accounts=5, transfers=30, files=3)
    root = str(tmp_path / "lake")
    old = Lake(spark, root, history=HistoryPolicy(None), holder="the old lake run")
    files = landing.files("Bank")
    old.changelog.ingest(files[:2])
    assert old.apply_cut(cuts[0]).applied
    new = Lake(spark, root, history=HistoryPolicy(None), holder="the new lake run")
    assert new.fence.epoch > old.fence.epoch  # taken, and every table claimed with it
    before = versions(new)

    # Each kind of write of the old writer: the cut's mirrors (MERGE for Accounts, an append for
    # Transfers), the history tables, then the manifest; and an ingest (MERGE). Delta skips each
    # (its transaction version is below the claim), and the old writer stops before it publishes.
    with pytest.raises(LakeFencedError, match="the old lake run was fenced while publishing its cut"):
        old.apply_cut(cuts[1])
    with pytest.raises(LakeFencedError, match="the old lake run was fenced while ingesting"):
        old.changelog.ingest(files)
    assert versions(new) == before and old.cuts() == [cuts[0]]

    # The newer writer carries on from the last published cut.
    new.changelog.ingest(landing.files("Bank"))
    assert new.apply_cut(cuts[-1]).applied and new.cuts() == [cuts[0], cuts[-1]]
    total = sum(r.Balance for r in new.mirrors_at_cut()["Accounts"].collect())
    assert total == 5 * 1000


def test_the_manifest_never_goes_back(spark, tmp_path):
    """A cut at or below the newest published one is never published (a cut asks for it only by
    racing another writer: ``apply_cut`` itself finds such a cut already applied)."""
    landing = LandingStore(str(tmp_path / "landing"))
    cuts = land_bank(landing, accounts=3, transfers=10, files=2)
    lake = Lake(spark, str(tmp_path / "lake"))
    lake.changelog.ingest(landing.files("Bank"))
    assert lake.apply_cut(cuts[-1]).applied
    for cut in (cuts[0], cuts[-1]):
        with pytest.raises(ManifestOrderError, match="only moves forward"):
            lake._publish(PublishedCut(cut, lake.last_published().versions), 0, 0)
    assert lake.cuts() == [cuts[-1]]
