"""The lake checked at its last cut (``lake/verify.py``): each history table against its mirror.
(Mirrors against the source read at the cut need Spanner: ``defs/test_mirror_rebuild.py`` drifts a
mirror and rebuilds it from what the check names.)"""

from cs_platform.lake.history_schema import HistoryPolicy
from cs_platform.lake.stream_lake import Lake
from cs_platform.lake.verify import history_against_mirrors
from cs_platform.landing.store import LandingStore
from cs_platform_tests.lake.bank_landing import land_bank


def test_a_history_that_drifted_from_its_mirror_is_named(spark, tmp_path):
    assert history_against_mirrors(Lake(spark, str(tmp_path / "empty"))).cut is None  # no cut yet: nothing to compare
    landing = LandingStore(str(tmp_path / "landing"))
    cuts = land_bank(landing, accounts=5, transfers=20, files=2)
    lake = Lake(spark, str(tmp_path / "lake"), history=HistoryPolicy(None))
    lake.changelog.ingest(landing.files("Bank"))
    lake.apply_cut(cuts[-1])
    found = history_against_mirrors(lake)
    assert found.cut == cuts[-1] and found.differing == []
    assert found.tables == {"Accounts": {"rows": 5, "differing_rows": 0}, "Transfers": {"rows": 20, "differing_rows": 0}}
    # A version lost from one history table: the comparison names that table, and only it.
    spark.sql(f"DELETE FROM delta.`{lake.history_table('Accounts').uri}` WHERE AccountId = 'acct-000'")
    drifted = history_against_mirrors(lake)
    assert drifted.differing == ["Accounts"] and drifted.tables["Accounts"]["differing_rows"] >= 1
