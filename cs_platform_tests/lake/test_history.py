"""History tables: one version per transaction that wrote a key, full row state (partial updates
folded), bounded by commit timestamps, written by the cut that writes the mirror; and read at any
cut without time travel, equal to the mirror at that cut."""

from datetime import timedelta

import pytest

from cs_platform.changestream.records import ColumnType
from cs_platform.lake.history_schema import HistoryPolicy
from cs_platform.lake.stream_lake import Lake
from cs_platform.lake.types import utc
from cs_platform.landing.store import LandingStore
from cs_platform_tests.lake.readers import check_history_at_cut, history_versions
from cs_platform_tests.lake.test_stream_lake import ACCOUNTS, T0, land, rec

TS = [T0 + timedelta(seconds=i) for i in range(6)]
WITH_EMAIL = ACCOUNTS + (ColumnType("Email", {"code": "STRING"}, False, 4),)
RECORDS = [
    rec("t0", 0, TS[0], "Accounts", "INSERT", [({"AccountId": "A"}, {"Balance": "5", "UpdatedAt": "2026-11-22T12:00:00Z"}), ({"AccountId": "B"}, {"Balance": "7", "UpdatedAt": None})]),
    rec("t1", 0, TS[1], "Accounts", "UPDATE", [({"AccountId": "A"}, {"Balance": "6"})], capture="NEW_VALUES"),  # UpdatedAt kept
    rec("t2", 0, TS[2], "Accounts", "DELETE", [({"AccountId": "B"}, {})]),
    rec("t3", 0, TS[3], "Accounts", "INSERT", [({"AccountId": "B"}, {"Balance": "70", "UpdatedAt": None})]),
    rec("t4", 0, TS[4], "Accounts", "UPDATE", [({"AccountId": "A"}, {"Email": "a@example.com"})], types=WITH_EMAIL),  # a new column
    rec("t5", 0, TS[5], "Accounts", "UPDATE", [({"AccountId": "A"}, {"Balance": "8"})]),
]
# (key, valid_from, valid_to, transaction, operation, Balance, Email) of every version
EXPECTED = [
    ("A", TS[0], TS[1], "t0", "INSERT", 5, None),
    ("A", TS[1], TS[4], "t1", "UPDATE", 6, None),
    ("A", TS[4], TS[5], "t4", "UPDATE", 6, "a@example.com"),
    ("A", TS[5], None, "t5", "UPDATE", 8, "a@example.com"),
    ("B", TS[0], TS[2], "t0", "INSERT", 7, None),  # closed by the delete
    ("B", TS[3], None, "t3", "INSERT", 70, None),
]


def two_cuts(lake: Lake, store: LandingStore, second: Lake | None = None) -> None:
    land(store, "p", *RECORDS[:2], watermark=TS[1])
    lake.changelog.ingest(store.files("BankStream"))
    assert lake.apply_cut(TS[1]).applied
    land(store, "p2", *RECORDS[2:], watermark=TS[5])
    lake.changelog.ingest(store.files("BankStream"))
    assert (second or lake).apply_cut(TS[5]).applied  # delete + re-insert of B, three versions of A, in one cut


def summary(rows: list[dict]) -> list[tuple]:
    return [(r["AccountId"], r["_valid_from"], r["_valid_to"], r["_transaction_id"], r["_operation"], r["Balance"], r.get("Email")) for r in rows]


@pytest.mark.parametrize("local_time_zone", ["Asia/Kolkata"], indirect=True)  # PySpark's naive local times, east of UTC
def test_history_keeps_every_version_with_commit_timestamp_bounds(spark, tmp_path, local_time_zone):
    lake, store = Lake(spark, str(tmp_path / "lake"), history=HistoryPolicy(None)), LandingStore(str(tmp_path / "landing"))
    two_cuts(lake, store)
    versions = history_versions(lake, "Accounts")
    assert summary(versions) == EXPECTED
    # The NEW_VALUES update of Balance kept A's UpdatedAt in its version: full row state.
    assert {utc(r["UpdatedAt"]) for r in versions if r["AccountId"] == "A"} == {T0}
    for cut in lake.cuts():
        check_history_at_cut(lake, cut)  # the latest history version, filtered at the cut, is the mirror at the cut


def test_history_turned_on_later_starts_from_the_mirror_at_the_previous_cut(spark, tmp_path):
    root, store = str(tmp_path / "lake"), LandingStore(str(tmp_path / "landing"))
    two_cuts(Lake(spark, root), store, second=Lake(spark, root, history=HistoryPolicy.parse("Accounts")))
    lake = Lake(spark, root, history=HistoryPolicy(None))
    seeded = [("A", TS[1], TS[4], None, "SNAPSHOT", 6, None), ("B", TS[1], TS[2], None, "SNAPSHOT", 7, None)]
    assert summary(history_versions(lake, "Accounts")) == seeded[:1] + EXPECTED[2:4] + seeded[1:] + EXPECTED[5:]
    check_history_at_cut(lake, TS[5])


def test_the_setting_names_the_tables():
    assert HistoryPolicy.parse("none") == HistoryPolicy.parse("") == HistoryPolicy()
    assert HistoryPolicy.parse("all").keeps("Anything")
    assert HistoryPolicy.parse("Accounts, Transfers").tables == {"Accounts", "Transfers"}
    with pytest.raises(ValueError, match="CS_PLATFORM_HISTORY_TABLES='all,Accounts'"):
        HistoryPolicy.parse("all,Accounts")
