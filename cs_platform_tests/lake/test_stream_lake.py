"""Changelog, complete transactions under a cut, mirrors and the manifest, on landing files shaped
the way Cloud Spanner sends them (a transaction's records spread over partitions, landed at
different times), applied with local Spark + Delta."""

import base64
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cs_platform.changestream.reader import PartitionBatch
from cs_platform.changestream.records import ColumnType, DataChangeRecord, Mod, ModType, ValueCaptureType
from cs_platform.lake.published import cut_of_version, published_cuts
from cs_platform.lake.stream_lake import IncompleteTransactionsError, Lake, UnmappedColumnTypeError, UntypedValueError
from cs_platform.lake.types import utc
from cs_platform.landing.store import LandingStore
from cs_platform_tests.lake.readers import check_readers_agree
from cs_platform_tests.landing.test_store import readable_by_others

# The tests that compare commit timestamps with cuts, read a TIMESTAMP back or write their own run
# east of UTC (PySpark hands back naive local datetimes); the suite itself, and so every other lake
# test and every lake run, runs west of it.
east_of_utc = pytest.mark.usefixtures("local_time_zone")

T0 = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
US = timedelta(microseconds=1)

ACCOUNTS = (
    ColumnType("AccountId", {"code": "STRING"}, True, 1),
    ColumnType("Balance", {"code": "INT64"}, False, 2),
    ColumnType("UpdatedAt", {"code": "TIMESTAMP"}, False, 3),
)
TRANSFERS = (
    ColumnType("TransferId", {"code": "STRING"}, True, 1),
    ColumnType("Amount", {"code": "INT64"}, False, 2),
)


def rec(txn, seq, ts, table, mod_type, mods, records=1, partitions=1, capture="OLD_AND_NEW_VALUES", types=None):
    return DataChangeRecord(
        partition_token=f"p{seq}",
        commit_timestamp=ts,
        record_sequence=f"{seq:08d}",
        server_transaction_id=txn,
        is_last_record_in_transaction_in_partition=True,
        table_name=table,
        column_types=types or (ACCOUNTS if table == "Accounts" else TRANSFERS),
        mods=tuple(Mod(k, n, {}) for k, n in mods),
        mod_type=ModType(mod_type),
        value_capture_type=ValueCaptureType(capture),
        number_of_records_in_transaction=records,
        number_of_partitions_in_transaction=partitions,
        transaction_tag="",
        is_system_transaction=False,
    )


def land(store: LandingStore, partition: str, *records, watermark: datetime):
    batch = PartitionBatch(partition, T0 - timedelta(seconds=10), watermark, records, (), watermark, False)
    return store.write("BankStream", partition, batch)


def balances(lake: Lake, cut=None) -> dict[str, int]:
    mirrors = lake.mirrors_at_cut(cut)
    return {r.AccountId: r.Balance for r in mirrors["Accounts"].collect()}


@pytest.fixture
def lake(spark, tmp_path):
    return Lake(spark, str(tmp_path / "lake")), LandingStore(str(tmp_path / "landing"))


@east_of_utc
def test_transaction_spread_over_partitions_is_applied_only_when_complete_and_under_the_cut(lake):
    lake, store = lake
    t0, t1 = T0, T0 + timedelta(seconds=1)
    opened = [("A", "1000"), ("B", "1000")]
    for i, (account, balance) in enumerate(opened):
        land(store, f"part{i}", rec(f"open-{account}", 0, t0, "Accounts", "INSERT", [({"AccountId": account}, {"Balance": balance, "UpdatedAt": None})]), watermark=t0)
    # Transfer A -> B: three records in three partitions (Cloud Spanner's shape); two land first.
    transfer = dict(records=3, partitions=3)
    debit = rec("xfer", 0, t1, "Accounts", "UPDATE", [({"AccountId": "A"}, {"Balance": "900"})], **transfer)
    credit = rec("xfer", 1, t1, "Accounts", "UPDATE", [({"AccountId": "B"}, {"Balance": "1100"})], **transfer)
    row = rec("xfer", 2, t1, "Transfers", "INSERT", [({"TransferId": "x1"}, {"Amount": "100"})], **transfer)
    land(store, "part0", debit, watermark=t1)
    land(store, "part1", credit, watermark=t1)
    lake.changelog.ingest(store.files("BankStream"))

    # The third partition's watermark is still below t1, so the low watermark is too.
    first = lake.apply_cut(t1 - US)
    assert first.applied and first.transactions == 2 and balances(lake) == {"A": 1000, "B": 1000}
    assert "Transfers" not in lake.mirrors_at_cut()
    # A cut above the low watermark finds the incomplete transfer and applies nothing.
    with pytest.raises(IncompleteTransactionsError, match=r"xfer \(2/3 records\)") as incomplete:
        lake.apply_cut(t1)
    assert incomplete.value.missing == [("xfer", 2, 3)]  # what the mirrors asset's check reports
    assert lake.last_cut() == t1 - US

    land(store, "part2", row, watermark=t1)
    assert lake.changelog.ingest(store.files("BankStream")).files == 1  # only the new file
    second = lake.apply_cut(t1)
    assert second.applied and second.transactions == 1 and second.mods == 3
    assert balances(lake) == {"A": 900, "B": 1100}
    assert [r.Amount for r in lake.mirrors_at_cut()["Transfers"].collect()] == [100]
    # The earlier cut is still readable as it was: time travel through the manifest.
    assert balances(lake, t1 - US) == {"A": 1000, "B": 1000}

    # Replays change nothing: the same files again, a duplicate file, the same cut again.
    before = lake.changelog.table().count()
    land(store, "part2-replay", row, watermark=t1 + US)
    lake.changelog.ingest(store.files("BankStream"))
    assert lake.changelog.table().count() == before == 5
    assert not lake.apply_cut(t1).applied
    assert balances(lake) == {"A": 900, "B": 1100}
    # The lake's files hold whole rows too: the service's user alone reads them (spark.DELTA_CONF).
    assert readable_by_others(lake.root) == []


@east_of_utc
def test_mirror_semantics_patch_delete_reinsert_many_changes_and_new_columns(lake):
    lake, store = lake
    ts = [T0 + timedelta(seconds=i) for i in range(6)]
    with_email = ACCOUNTS + (ColumnType("Email", {"code": "STRING"}, False, 4),)
    records = [
        rec("t0", 0, ts[0], "Accounts", "INSERT", [({"AccountId": "A"}, {"Balance": "5", "UpdatedAt": "2026-11-22T12:00:00Z"}), ({"AccountId": "B"}, {"Balance": "7", "UpdatedAt": None})]),
        # NEW_VALUES update of Balance only: UpdatedAt must be kept.
        rec("t1", 0, ts[1], "Accounts", "UPDATE", [({"AccountId": "A"}, {"Balance": "6"})], capture="NEW_VALUES"),
        rec("t2", 0, ts[2], "Accounts", "DELETE", [({"AccountId": "B"}, {})]),
        rec("t3", 0, ts[3], "Accounts", "INSERT", [({"AccountId": "B"}, {"Balance": "70", "UpdatedAt": None})]),
        # A column added to the source table shows up in column_types.
        rec("t4", 0, ts[4], "Accounts", "UPDATE", [({"AccountId": "A"}, {"Email": "a@example.com"})], types=with_email),
        rec("t5", 0, ts[5], "Accounts", "UPDATE", [({"AccountId": "A"}, {"Balance": "8"})]),
    ]
    land(store, "p", *records[:2], watermark=ts[1])
    lake.changelog.ingest(store.files("BankStream"))
    lake.apply_cut(ts[1])
    land(store, "p2", *records[2:], watermark=ts[5])
    lake.changelog.ingest(store.files("BankStream"))
    lake.apply_cut(ts[5])  # delete + re-insert of B and three changes of A inside one cut

    rows = {r.AccountId: r.asDict() for r in lake.mirrors_at_cut()["Accounts"].collect()}
    assert rows["A"]["Balance"] == 8 and rows["A"]["Email"] == "a@example.com"
    assert utc(rows["A"]["UpdatedAt"]) == T0  # kept through the NEW_VALUES patch (PySpark gives local time)
    assert rows["B"] == {"AccountId": "B", "Balance": 70, "UpdatedAt": None, "Email": None}
    assert balances(lake, ts[1]) == {"A": 6, "B": 7}


def test_a_mirror_that_only_takes_inserts_is_appended_to_and_one_with_updates_merged(lake, spark):
    lake, store = lake
    t0, t1, t2, t3 = (T0 + timedelta(seconds=i) for i in range(4))
    opened = rec("open", 0, t0, "Accounts", "INSERT", [({"AccountId": "A"}, {"Balance": "10", "UpdatedAt": None}), ({"AccountId": "B"}, {"Balance": "0", "UpdatedAt": None})])
    paid = [
        rec("pay", 0, t1, "Accounts", "UPDATE", [({"AccountId": "A"}, {"Balance": "7"}), ({"AccountId": "B"}, {"Balance": "3"})], records=2),
        rec("pay", 1, t1, "Transfers", "INSERT", [({"TransferId": "x1"}, {"Amount": "3"})], records=2),
    ]
    land(store, "p", opened, *paid, rec("log", 0, t2, "Transfers", "INSERT", [({"TransferId": "x2"}, {"Amount": "0"})]), watermark=t2)
    lake.changelog.ingest(store.files("BankStream"))
    # A mirror no published cut names is merged into, inserts only or not: a lake writer the fence
    # stopped (``lake.fence``) may have created it and appended to it already.
    assert lake.apply_cut(t0).appended == ()
    second = lake.apply_cut(t1)
    assert second.appended == ()  # Accounts has updates, Transfers is new: both merged
    third = lake.apply_cut(t2)
    assert third.appended == ("Transfers",)  # published, inserts only: appended
    assert lake.mirror("Accounts")._commit_info(second.versions["Accounts"])["operation"] == "MERGE"
    assert lake.mirror("Transfers")._commit_info(third.versions["Transfers"])["operation"] == "WRITE"
    assert cut_of_version(lake.location, "Transfers", third.versions["Transfers"]) == t2  # an append names its cut like a MERGE
    assert balances(lake) == {"A": 7, "B": 3}

    # Off (a stream that may leave deletes out): the same kind of cut merges.
    merging = Lake(spark, lake.root, append_inserts=False)
    land(store, "p2", rec("pay2", 0, t3, "Transfers", "INSERT", [({"TransferId": "x3"}, {"Amount": "1"})]), watermark=t3)
    merging.changelog.ingest(store.files("BankStream"))
    fourth = merging.apply_cut(t3)
    assert fourth.applied and fourth.appended == ()
    assert lake.mirror("Transfers")._commit_info(fourth.versions["Transfers"])["operation"] == "MERGE"
    assert sorted((r.TransferId, r.Amount) for r in merging.mirrors_at_cut()["Transfers"].collect()) == [("x1", 3), ("x2", 0), ("x3", 1)]


def poisoned(store: LandingStore) -> datetime:
    """Three transactions: a good one, a transfer whose Transfers row holds an INT64 that is not a
    number (its Accounts half is fine), and another good one after it. Returns the cut."""
    t = [T0 + timedelta(seconds=i) for i in range(3)]
    both = dict(records=2)
    land(
        store,
        "p",
        rec("good-1", 0, t[0], "Accounts", "INSERT", [({"AccountId": "A"}, {"Balance": "10", "UpdatedAt": None})]),
        rec("poison", 0, t[1], "Accounts", "UPDATE", [({"AccountId": "A"}, {"Balance": "5"})], **both),
        rec("poison", 1, t[1], "Transfers", "INSERT", [({"TransferId": "x"}, {"Amount": "12 dollars"})], **both),
        rec("good-2", 0, t[2], "Transfers", "INSERT", [({"TransferId": "y"}, {"Amount": "3"})]),
        watermark=t[2],
    )
    return t[2]


def test_an_untyped_value_stops_the_cut_naming_transaction_table_column_and_value(lake):
    lake, store = lake
    cut = poisoned(store)
    lake.changelog.ingest(store.files("BankStream"))
    with pytest.raises(UntypedValueError, match=r"transaction poison .* wrote '12 dollars' to Transfers\.Amount, which is not a INT64.*CS_PLATFORM_UNTYPED_VALUES=quarantine") as error:
        lake.apply_cut(cut)
    assert [(v.transaction, v.table, v.column, v.raw) for v in error.value.values] == [("poison", "Transfers", "Amount", "12 dollars")]
    assert lake.last_cut() is None and lake.cuts() == []  # nothing applied, no mirror written
    assert not any(lake.mirror(t).exists() for t in ("Accounts", "Transfers"))


@east_of_utc  # and the quarantine's own timestamps (test_spark_connect runs it east of UTC)
def test_quarantine_sets_the_whole_transaction_aside_and_applies_the_rest(spark, tmp_path):
    lake, store = Lake(spark, str(tmp_path / "lake"), untyped_policy="quarantine"), LandingStore(str(tmp_path / "landing"))
    cut = poisoned(store)
    lake.changelog.ingest(store.files("BankStream"))
    result = lake.apply_cut(cut)
    assert result.applied and result.transactions == 2 and {v.transaction for v in result.quarantined} == {"poison"}
    assert result.appended == ()  # a mirror then differs from the source: only a MERGE is exact
    mirrors = lake.mirrors_at_cut(cut)
    # Neither half of the poisoned transaction is visible: A keeps 10, and no transfer x.
    assert {r.AccountId: r.Balance for r in mirrors["Accounts"].collect()} == {"A": 10}
    assert {r.TransferId: r.Amount for r in mirrors["Transfers"].collect()} == {"y": 3}
    (held,) = lake.quarantine.transactions()
    assert held["server_transaction_id"] == "poison" and held["tables"] == "Accounts,Transfers" and held["rows"] == 2
    assert "'12 dollars' to Transfers.Amount" in held["reason"]
    assert lake.quarantine.resolve(["poison"]) == 2 and lake.quarantine.transactions() == []


def ingest_one_account(lake, store, committed) -> None:
    """One transaction inserting account A, committed at ``committed``, landed and ingested."""
    land(store, "p", rec("t", 0, committed, "Accounts", "INSERT", [({"AccountId": "A"}, {"Balance": "1", "UpdatedAt": None})]), watermark=committed)
    lake.changelog.ingest(store.files("BankStream"))


@east_of_utc
def test_a_first_cut_with_nothing_under_it_records_nothing(lake):
    lake, store = lake
    later = T0 + timedelta(seconds=5)
    ingest_one_account(lake, store, committed=later)
    assert not lake.apply_cut(T0).applied and lake.cuts() == []  # the only change is after the cut
    assert lake.apply_cut(later).applied and lake.cuts() == [later]


@east_of_utc
def test_a_cut_with_nothing_committed_since_the_last_reads_no_changelog_file(lake):
    lake, store = lake
    later = T0 + timedelta(seconds=5)
    ingest_one_account(lake, store, committed=T0)
    assert lake.changelog.latest_commit() == T0  # recorded by the ingest's commit
    first = lake.apply_cut(T0)
    # Heartbeats moved the watermark on and nothing was committed: the next cut learns it from the
    # changelog's log. Its data files are gone here, so a cut that read them would fail.
    data = [f for f in Path(lake.root, "changelog").rglob("*.parquet") if "_delta_log" not in f.parts]
    assert data
    for file in data:
        file.unlink()
    idle = lake.apply_cut(later)
    assert idle.applied and (idle.transactions, idle.mods) == (0, 0) and idle.versions == first.versions
    assert lake.cuts() == [T0, later] and balances(lake, later) == {"A": 1}


def test_a_cut_leaves_out_the_changes_of_tables_a_snapshot_replaces(lake):
    """``snapshot_instead`` (a table the stream watches since the lake's start, lake_steps.stream_membership):
    the cut publishes the other tables' changes and no mirror of the left-out table, whose changes
    stay in the changelog; its transaction is no less applied for the other table."""
    lake, store = lake
    transfer = [
        rec("x", 0, T0, "Accounts", "INSERT", [({"AccountId": "A"}, {"Balance": "7", "UpdatedAt": None})], records=2),
        rec("x", 1, T0, "Transfers", "INSERT", [({"TransferId": "t"}, {"FromAccount": "B", "ToAccount": "A", "Amount": "7"})], records=2),
    ]
    land(store, "p", *transfer, watermark=T0)
    lake.changelog.ingest(store.files("BankStream"))
    result = lake.apply_cut(T0, snapshot_instead={"Transfers"})
    assert result.applied and (result.transactions, result.mods) == (1, 2)
    assert set(result.versions) == {"Accounts"} and set(lake.last_published().versions) == {"Accounts"}
    assert balances(lake) == {"A": 7} and not lake.mirror("Transfers").exists()
    assert lake.changes(None, T0).where("table_name = 'Transfers'").count() == 1


def test_a_mirror_whose_table_left_the_stream_stays_frozen_until_a_snapshot_replaces_it(lake):
    """``unwatched`` (the stream watches the table no more, lake_steps.stream_membership): the cut
    still applies the table's changes, all committed while it was watched, and records its mirror
    frozen since that cut; every later cut (an idle one too) carries the mark on, until a snapshot
    replaces the mirror (the table watched again)."""
    lake, store = lake
    land(store, "p", rec("t1", 0, T0, "Accounts", "INSERT", [({"AccountId": "A"}, {"Balance": "1", "UpdatedAt": None})]), watermark=T0)
    lake.changelog.ingest(store.files("BankStream"))
    assert lake.apply_cut(T0).frozen == {}
    left, later, idle = T0 + timedelta(seconds=1), T0 + timedelta(seconds=2), T0 + timedelta(seconds=3)
    land(store, "p", rec("t2", 1, left, "Accounts", "UPDATE", [({"AccountId": "A"}, {"Balance": "2"})]), watermark=left)
    land(store, "q", rec("t3", 0, later, "Transfers", "INSERT", [({"TransferId": "t"}, {"FromAccount": "B", "ToAccount": "A", "Amount": "1"})]), watermark=later)
    lake.changelog.ingest(store.files("BankStream"))
    result = lake.apply_cut(left, unwatched={"Accounts"})
    assert result.frozen == {"Accounts": left} and balances(lake, left) == {"A": 2}  # its last change applied
    assert lake.apply_cut(later).frozen == {"Accounts": left} and lake.apply_cut(idle).frozen == {"Accounts": left}
    assert [c.frozen for c in published_cuts(lake.location)] == [{}, {"Accounts": left}, {"Accounts": left}, {"Accounts": left}]
    lake.publish_snapshot(idle, {"Accounts": lake.mirror("Accounts").version()})  # watched again: read whole
    assert lake.last_published().frozen == {} and set(lake.last_published().versions) == {"Accounts", "Transfers"}


def test_parquet_landing_files_of_an_earlier_version_are_still_ingested(lake):
    """Landing wrote Parquet before JSON lines, in files whose names count no rows: an upgraded lake
    run ingests those beside new files, counting their rows by reading them."""
    lake, store = lake
    insert = rec("t1", 0, T0, "Accounts", "INSERT", [({"AccountId": "A"}, {"Balance": "1", "UpdatedAt": None})])
    old = Path(land(store, "p", insert, watermark=T0).path)
    legacy = old.with_name(old.name.rsplit("_", 1)[0] + ".parquet")  # <query start>_<watermark>.parquet
    pq.write_table(store.read("BankStream"), legacy)
    old.unlink()
    later = T0 + timedelta(seconds=1)
    land(store, "p", rec("t2", 1, later, "Accounts", "UPDATE", [({"AccountId": "A"}, {"Balance": "2"})]), watermark=later)
    assert store.files("BankStream") == sorted([str(legacy), *(f for f in store.files("BankStream") if f.endswith(".json.gz"))])
    ingested = lake.changelog.ingest(store.files("BankStream"))
    assert (ingested.files, ingested.rows_read, ingested.rows_added) == (2, 2, 2)
    assert lake.apply_cut(later).applied and balances(lake, later) == {"A": 2}


# A message and an enum of a proto bundle, as Cloud Spanner describes their columns (google/spanner/v1/
# type.proto: ``code`` PROTO or ENUM with ``proto_type_fqn``) and sends their values (a PROTO value is
# its serialized message, base64-encoded; an ENUM value its number, in decimal). The emulator sends
# neither (test_value_capture.test_emulator_bugs_are_what_emulator_md_says): recorded rows here.
CARD, SUIT = {"code": "PROTO", "proto_type_fqn": "cs.Card"}, {"code": "ENUM", "proto_type_fqn": "cs.Suit"}
HANDS = (
    ColumnType("Id", {"code": "INT64"}, True, 1),
    ColumnType("Card", CARD, False, 2),
    ColumnType("Suit", SUIT, False, 3),
    ColumnType("Cards", {"code": "ARRAY", "array_element_type": CARD}, False, 4),
    ColumnType("Suits", {"code": "ARRAY", "array_element_type": SUIT}, False, 5),
)
ACE, TWO = b"\n\x03ace\x10\x01", b"\n\x03two\x10\x02"  # cs.Card{name, rank} serialized


def b64(message: bytes) -> str:
    return base64.b64encode(message).decode()


def test_proto_and_enum_columns_reach_the_mirror_as_the_message_bytes_and_the_enum_number(lake):
    lake, store = lake
    ts = [T0 + timedelta(seconds=i) for i in range(2)]
    land(
        store, "p",
        rec("t0", 0, ts[0], "Hands", "INSERT", [({"Id": "1"}, {"Card": b64(ACE), "Suit": "2", "Cards": [b64(TWO), None, ""], "Suits": ["1", None, "0"]}),
                                              ({"Id": "2"}, {"Card": None, "Suit": None, "Cards": None, "Suits": []})], types=HANDS),
        rec("t1", 0, ts[1], "Hands", "UPDATE", [({"Id": "2"}, {"Card": b64(TWO), "Suit": "1"})], capture="NEW_VALUES", types=HANDS),
        watermark=ts[1],
    )
    lake.changelog.ingest(store.files("BankStream"))
    assert lake.apply_cut(ts[1]).applied
    mirror = lake.mirrors_at_cut()["Hands"]
    assert dict(mirror.dtypes) == {"Id": "bigint", "Card": "binary", "Suit": "bigint", "Cards": "array<binary>", "Suits": "array<bigint>"}
    rows = {r.Id: r.asDict() for r in mirror.collect()}
    assert rows == {
        1: {"Id": 1, "Card": ACE, "Suit": 2, "Cards": [TWO, None, b""], "Suits": [1, None, 0]},  # b"": the default message
        2: {"Id": 2, "Card": TWO, "Suit": 1, "Cards": None, "Suits": []},
    }
    check_readers_agree(lake, ts[1])  # DuckDB, deltalake and Spark SQL read the bytes and numbers alike


def test_a_column_of_a_type_the_lake_cannot_mirror_stops_the_cut_naming_it_and_keeps_its_changes(lake):
    """The emulator's spelling of a PROTO column (its bare name, not PROTO): a type the lake has no
    mirror type for fails the cut by table, column and type, before any Spark job, and applies
    nothing; the changelog keeps the transaction."""
    lake, store = lake
    odd = (HANDS[0], ColumnType("Card", {"code": "`cs.Card`"}, False, 2))
    land(store, "p", rec("t0", 0, T0, "Hands", "INSERT", [({"Id": "1"}, {"Card": None})], types=odd), watermark=T0)
    lake.changelog.ingest(store.files("BankStream"))
    with pytest.raises(UnmappedColumnTypeError, match=r'Hands\.Card of type \{"code": "`cs\.Card`"\}\. The cut was not applied and the changelog keeps every change: upgrade cs_platform'):
        lake.apply_cut(T0)
    assert lake.cuts() == [] and not lake.mirror("Hands").exists()
    assert lake.changelog.table().where("table_name = 'Hands'").count() == 1


def test_uuid_and_interval_columns_keep_the_text_spanner_sends(lake):
    """UUID and INTERVAL, which the emulator refuses: recorded rows in type.proto's encodings (a UUID
    in lower-case hex, RFC 9562; an INTERVAL as an ISO 8601 duration with months, days and a
    fraction of a second at once, which no Spark interval type holds)."""
    lake, store = lake
    types = (
        ColumnType("Id", {"code": "UUID"}, True, 1),
        ColumnType("Every", {"code": "INTERVAL"}, False, 2),
        ColumnType("Steps", {"code": "ARRAY", "array_element_type": {"code": "INTERVAL"}}, False, 3),
    )
    key = "0195b0d4-8f6e-7cc1-b3a2-5f0e7d2c9a41"
    values = {"Every": "P1Y2M3DT4H5M6.789S", "Steps": ["PT0S", None, "P-1M"]}
    land(store, "p", rec("t0", 0, T0, "Periods", "INSERT", [({"Id": key}, values)], types=types), watermark=T0)
    lake.changelog.ingest(store.files("BankStream"))
    assert lake.apply_cut(T0).applied
    mirror = lake.mirrors_at_cut()["Periods"]
    assert dict(mirror.dtypes) == {"Id": "string", "Every": "string", "Steps": "array<string>"}
    assert [r.asDict() for r in mirror.collect()] == [{"Id": key, **values}]
