"""A table added to the stream after its start is mirrored whole by the first cut that watches it,
with no step of anyone's (``lake_steps.stream_membership``: its changes are left out of that cut and
its rows read at the cut replace its mirror); no published cut holds part of it. A table that leaves
the stream (dropped under FOR ALL) keeps its mirror as the stream last saw it, recorded frozen in
every cut from then on; a renamed table is both (the old name frozen, the new one read whole). A
table whose columns DDL dropped and retyped is read whole at the first cut after, with the table's
columns and types. A table of a named schema with a vector column, namesake of a default-schema
table, is mirrored apart from it through every DDL, and so is a table of proto messages and enums
(streamed as Cloud Spanner streams them, by the front), both written under each of the four value
capture types in turn. A mirror that drifted is named by the mirrors_match_source check, and materializing its mirror_rebuild
partition (the partitions the lake sensor keeps, one per watched table) from the UI makes it equal
the source at the latest cut again, and the check passes."""

import base64
import re
import threading

import pytest
from dagster import AssetKey, build_sensor_context, materialize
from google.cloud.spanner_v1 import KeySet

from cs_platform.changestream.metadata import utc_now
from cs_platform.definitions import build_definitions
from cs_platform.dev.deadline import wait_until
from cs_platform.dev.workload import BANK_TABLES, BANK_TABLES_DDL
from cs_platform.lake.cli import main as lake_cli
from cs_platform.lake.history import history_at
from cs_platform.lake.identifiers import quoted, sql_string
from cs_platform.lake.stream_lake import Lake
from cs_platform.landing.store import LandingStore
from cs_platform.stream.lake_steps import UnknownTableError, rebuild_mirrors
from cs_platform_tests.changestream.test_value_capture import cards_bundle
from cs_platform_tests.lake.readers import check_history_at_cut

BRANCHES = ["BranchId", "City", "Staff"]
# Watched from the stream's start, then one dropped and one renamed mid-stream (FOR ALL lets a
# watched table be dropped; a table a stream names cannot be).
LEAVING = ["Offices", "Regions"]
RESHAPED = "Sites"  # watched from the start, then a column dropped and one retyped (STRING to BYTES)
# Watched from the start through every DDL: a namesake of Branches in a named schema, with an embedding.
NAMED = "sch.Branches"
NAMED_COLUMNS = [*BRANCHES, "Embedding"]
# Watched from the start through every DDL: a proto bundle's message and enum, alone and in arrays.
HANDS = "Hands"
HANDS_COLUMNS = ["Id", "Card", "Suit", "Cards", "Suits"]
# The stream's value capture type, changed between the writes (ALTER CHANGE STREAM ... SET OPTIONS).
CAPTURES = ["OLD_AND_NEW_VALUES", "NEW_ROW", "NEW_VALUES", "NEW_ROW_AND_OLD_VALUES"]


def card(name: str, rank: int) -> bytes:
    """A cs.Card message (``name`` field 1, ``rank`` field 2), serialized."""
    return bytes([0x0A, len(name)]) + name.encode() + bytes([0x10, rank])


def hands_row(i: int, suit: int) -> list:
    """A Hands row as the Python client writes it: messages base64-encoded, enums by number."""
    return [i, base64.b64encode(card(f"c{i}", i)), suit, [base64.b64encode(card("x", i + 1))], [suit, 2]]


def rows_at(database, cut, table: str, columns: list[str]) -> set:
    with database.snapshot(read_timestamp=cut) as snapshot:
        rows = snapshot.execute_sql(f"SELECT {', '.join(columns)} FROM {table}")
        return {tuple(tuple(v) if isinstance(v, list) else v for v in r) for r in rows}  # an array (an embedding) as a tuple


def reshaped_history_is_the_source_at_every_cut(lake: Lake, bank) -> None:
    """Sites' history, read at its latest version as an engine without time travel reads it and
    filtered at every published cut, is the source table read at that cut: before the DDL (the
    snapshot at the stream's start: Staff, City a STRING) and after it (Staff dropped: kept in the
    history, NULL from the cut on; City retyped to BYTES: earlier values cast, STRING to its UTF-8
    bytes, as Spanner converted them). A reshape read the table whole at the first cut after the
    DDL; no version before it was lost (docs/schema_changes.md)."""
    history = lake.history_table(RESHAPED).read(lake.spark)
    assert {"Staff", "City"} <= set(history.columns) and dict(history.dtypes)["City"] == "binary"
    cuts = lake.cuts()
    before, after = cuts[0], cuts[1:]  # the snapshot at the start, then the cuts after the DDL
    at = {(k, bytes(c).decode(), s) for k, c, s in history_at(history, before).select("BranchId", "City", "Staff").collect()}
    assert at == rows_at(bank, before, RESHAPED, BRANCHES) and len(at) == 30
    for cut in after:
        at = {(k, bytes(c), s) for k, c, s in history_at(history, cut).select("BranchId", "City", "Staff").collect()}
        assert at == {(k, base64.b64decode(c), None) for k, c in rows_at(bank, cut, RESHAPED, ["BranchId", "City"])}, cut


def mirrored(rows) -> set:
    """Mirror rows as ``rows_at`` gives them: arrays as tuples, BINARY as bytes."""
    def plain(v):
        return tuple(plain(x) for x in v) if isinstance(v, list) else bytes(v) if isinstance(v, bytearray) else v
    return {tuple(plain(v) for v in r) for r in rows}


def check(result) -> dict:
    evaluation = next(c for c in result.get_asset_check_evaluations() if c.check_name == "mirrors_match_source")
    return {"passed": evaluation.passed, **{k: v.value for k, v in evaluation.metadata.items()}}


def test_tables_joining_leaving_renamed_and_reshaped_mid_stream_and_a_drifted_mirror_rebuilt_from_the_ui(
    stream_setup, spanner_front, dagster_instance, spark, tmp_path, monkeypatch, capsys
):
    tables = [f"CREATE TABLE {t} (BranchId INT64 NOT NULL, City STRING(MAX), Staff INT64) PRIMARY KEY (BranchId)" for t in ("Branches", *LEAVING, RESHAPED)]
    named = [
        "CREATE SCHEMA sch",
        f"CREATE TABLE {NAMED} (BranchId INT64 NOT NULL, City STRING(MAX), Staff INT64, Embedding ARRAY<FLOAT32>(vector_length=>2)) PRIMARY KEY (BranchId)",
    ]
    hands = [
        "CREATE PROTO BUNDLE (cs.Card, cs.Suit)",
        f"CREATE TABLE {HANDS} (Id INT64 NOT NULL, Card cs.Card, Suit cs.Suit, Cards ARRAY<cs.Card>, Suits ARRAY<cs.Suit>) PRIMARY KEY (Id)",
    ]
    bank_stream = stream_setup(
        BANK_TABLES_DDL + tables + named + hands
        + [f"CREATE CHANGE STREAM BankStream FOR {', '.join([*BANK_TABLES, *LEAVING, RESHAPED, NAMED, HANDS])} OPTIONS (value_capture_type = '{CAPTURES[0]}')"],
        "BankStream", proto_descriptors=cards_bundle(),
    )
    spanner_front.fill_proto_columns(bank_stream.bank.database_id)  # as Cloud Spanner streams them (dev/front/proto_columns.py)
    monkeypatch.setenv("CS_PLATFORM_LAKE_ROOT", str(tmp_path / "lake"))
    # A rebuild reseeds Branches' history; Hands' keeps proto values; Sites' keeps its past through DDL.
    monkeypatch.setenv("CS_PLATFORM_HISTORY_TABLES", f"Branches,{HANDS},{RESHAPED}")
    bank = bank_stream.bank
    with bank.batch() as batch:
        for table in ("Branches", *LEAVING, RESHAPED):
            batch.insert(table, BRANCHES, [[i, f"city-{i}", i] for i in range(30)])
        batch.insert(NAMED, NAMED_COLUMNS, [[i, f"named-{i}", i, [i / 2, -i / 4]] for i in range(10)])
        batch.insert(HANDS, HANDS_COLUMNS, [hands_row(i, 1) for i in range(8)])
    # The stream starts at this machine's clock, after these rows: the emulator, loaded, handed this
    # commit a timestamp later than the clock read right after it returned (seen twice: the
    # snapshot at the start read every table empty).
    wait_until(lambda: utc_now() > batch.committed, 60, "the clock passing the rows' commit timestamp", poll_s=0.05)

    def capture(value_capture_type: str) -> str:
        return f"ALTER CHANGE STREAM BankStream SET OPTIONS (value_capture_type = '{value_capture_type}')"

    def write_partly(step: int) -> None:
        """Partial updates of the tables watched throughout, under the capture type of the moment."""
        with bank.batch() as batch:
            batch.update(NAMED, ["BranchId", "Embedding"], [[step, [1.5, float(step)]]])
            batch.update(HANDS, ["Id", "Suit"], [[step, 2]])
            batch.update(HANDS, ["Id", "Card"], [[step + 4, base64.b64encode(card("new", step))]])

    def change_the_schema_once_the_stream_started() -> None:
        while not (bank_stream.store.table_exists() and bank_stream.store.all()):
            started.wait(0.2)
        with bank.batch() as batch:  # the leaving tables' last changes the stream sees
            for table in (*LEAVING, RESHAPED):
                batch.update(table, ["BranchId", "Staff"], [[i, 200 + i] for i in range(3)])
        write_partly(0)
        bank.update_ddl([capture(CAPTURES[1])]).result(120)
        write_partly(1)
        # SET FOR ALL, not a table list: after SET FOR <list> the emulator's INFORMATION_SCHEMA lists
        # only the tables that list added (Cloud Spanner lists them all).
        bank.update_ddl(["ALTER CHANGE STREAM BankStream SET FOR ALL", capture(CAPTURES[2])]).result(120)
        write_partly(2)
        bank.update_ddl(["DROP TABLE Offices", "ALTER TABLE Regions RENAME TO Areas", capture(CAPTURES[3])]).result(120)
        write_partly(3)
        bank.update_ddl(
            [
                f"ALTER TABLE {RESHAPED} DROP COLUMN Staff",
                f"ALTER TABLE {RESHAPED} ALTER COLUMN City BYTES(MAX)",
                f"ALTER TABLE {HANDS} ADD COLUMN Note STRING(MAX)",  # every row NULL: not read whole
                f"ALTER TABLE {NAMED} ADD COLUMN Tier INT64 DEFAULT (1)",  # every row 1, no change record: read whole
            ]
        ).result(120)
        with bank.batch() as batch:
            batch.update(HANDS, ["Id", "Note"], [[2, "noted"]])
            batch.update(RESHAPED, ["BranchId", "City"], [[i, base64.b64encode(f"bytes-{i}".encode())] for i in range(2)])  # the client takes BYTES base64-encoded
            batch.update("Branches", ["BranchId", "Staff"], [[i, 100 + i] for i in range(5)])
            batch.update("Areas", ["BranchId", "Staff"], [[i, 300 + i] for i in range(4)])
            batch.insert(NAMED, NAMED_COLUMNS, [[10, "named-10", 10, [0.25, 8.0]]])
            batch.delete(NAMED, KeySet(keys=[[1]]))
            batch.insert(HANDS, HANDS_COLUMNS, [hands_row(8, 2)])
            batch.delete(HANDS, KeySet(keys=[[7]]))

    started, failed = threading.Event(), []

    def change_the_schema() -> None:
        try:
            change_the_schema_once_the_stream_started()
        except Exception as e:  # raised again below: a thread's error would otherwise only warn
            failed.append(e)

    adder = threading.Thread(target=change_the_schema, daemon=True)
    adder.start()
    bank_stream.read_short_window(dagster_instance, seconds=20)
    adder.join(timeout=120)
    assert not adder.is_alive()
    if failed:
        raise failed[0]

    defs = build_definitions()
    sensor = defs.get_sensor_def("bank_stream_lake_sensor")
    with build_sensor_context(instance=dagster_instance, resources=defs.resources) as context:
        requested = sensor.evaluate_tick(context)
    for request in requested.dynamic_partitions_requests:
        dagster_instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    assert sorted(dagster_instance.get_dynamic_partitions("bank_stream_tables")) == sorted([*BANK_TABLES, "Areas", "Branches", RESHAPED, NAMED, HANDS])
    landed = LandingStore(str(bank_stream.landing_root)).read("BankStream").to_pylist()
    assert {r["value_capture_type"] for r in landed if r["table_name"] == HANDS} == set(CAPTURES)

    cut_step = [a for a in defs.assets if AssetKey(["bank_stream", "mirrors"]) in a.keys]
    rebuild = [a for a in defs.assets if AssetKey(["bank_stream", "mirror_rebuild"]) in a.keys]
    first_run = materialize(cut_step, resources=defs.resources, instance=dagster_instance)
    first = check(first_run)
    assert first["passed"] and first["to_rebuild"] == "none", first  # all 30 rows, not the 5 changed
    [mirrors] = [m for m in first_run.asset_materializations_for_node("bank_stream_cut") if m.asset_key == AssetKey(["bank_stream", "mirrors"])]
    assert mirrors.metadata["tables_joined"].value == {"Areas": 30, "Branches": 30}  # Regions renamed: read whole
    lake = Lake(spark, str(tmp_path / "lake" / "BankStream"))
    cut = lake.last_cut()
    frozen = {table: cut.isoformat() for table in LEAVING}
    assert mirrors.metadata["tables_frozen"].value == frozen
    # Read whole: Sites' changes had the old columns; every row of sch.Branches took Tier's default.
    assert mirrors.metadata["tables_reshaped"].value == {RESHAPED: 30, NAMED: 10}
    assert mirrors.metadata["tables_widened"].value == [HANDS]  # a column added, one row given a value since
    at_cut = lake.mirrors_at_cut(cut)
    assert [(f.name, f.dataType.simpleString()) for f in at_cut[RESHAPED].schema.fields] == [("BranchId", "bigint"), ("City", "binary")]
    # The Python client hands BYTES back base64-encoded; the emulator converted each string to its UTF-8 bytes.
    source = {(k, base64.b64decode(c)) for k, c in rows_at(bank, cut, RESHAPED, ["BranchId", "City"])}
    assert {(k, bytes(c)) for k, c in at_cut[RESHAPED].collect()} == source and (5, b"city-5") in source
    for table in ("Branches", "Areas"):
        assert {tuple(r) for r in at_cut[table].select(*BRANCHES).collect()} == rows_at(bank, cut, table, BRANCHES)
    # The named schema's namesake followed its own changes through every DDL, its embeddings too.
    named_rows = rows_at(bank, cut, NAMED, NAMED_COLUMNS)
    assert {(k, c, s, tuple(e)) for k, c, s, e in at_cut[NAMED].select(*NAMED_COLUMNS).collect()} == named_rows
    assert {tuple(r) for r in at_cut[NAMED].select("BranchId", "Tier").collect()} == rows_at(bank, cut, NAMED, ["BranchId", "Tier"])
    assert (10, "named-10", 10, (0.25, 8.0)) in named_rows and (0, "named-0", 0, (1.5, 0.0)) in named_rows and len(named_rows) == 10
    # The proto columns, from the snapshot at the stream's start and every partial update since, under
    # each capture type: the mirror holds the messages' bytes and the enums' numbers.
    source_hands = rows_at(bank, cut, HANDS, HANDS_COLUMNS)  # the client reads a message as its bytes, an enum as its number
    assert mirrored(at_cut[HANDS].select(*HANDS_COLUMNS).collect()) == source_hands
    assert (4, card("new", 0), 1, (card("x", 5),), (1, 2)) in source_hands and (3, card("c3", 3), 2, (card("x", 4),), (1, 2)) in source_hands
    notes = rows_at(bank, cut, HANDS, ["Id", "Note"])
    assert {tuple(r) for r in at_cut[HANDS].select("Id", "Note").collect()} == notes and (2, "noted") in notes and (3, None) in notes
    last_seen = {(i, f"city-{i}", 200 + i if i < 3 else i) for i in range(30)}
    for table in LEAVING:  # as the stream last saw them, their last changes included
        assert {tuple(r) for r in at_cut[table].select(*BRANCHES).collect()} == last_seen, table
    # The cut was published first without the joined tables, then with their snapshots: never with
    # part of one; the leaving tables are frozen in both records.
    recorded = [r for _, r in lake.manifest.all_recorded() if r.get("cut") == cut.isoformat()]
    assert [sorted({"Areas", "Branches"} & set(r["versions"])) for r in recorded] == [[], ["Areas", "Branches"]], recorded
    assert recorded[0]["versions"][RESHAPED] < recorded[1]["versions"][RESHAPED]  # its old mirror, then the one read whole
    assert recorded[0]["shapes"][RESHAPED] != recorded[1]["shapes"][RESHAPED]
    assert [r["frozen"] for r in recorded] == [frozen, frozen]
    check_history_at_cut(lake, cut)  # its history starts from the snapshot too
    # Hands' history kept its past through its added column: at the stream's start it is that cut's
    # mirror, with Note NULL in every version.
    start = lake.cuts()[0]
    then = lake.mirrors_at_cut(start)[HANDS]
    past = history_at(lake.history_table(HANDS).read(spark), start)
    assert past.count() == 8 and mirrored(past.select(*then.columns).collect()) == mirrored(then.collect())
    assert past.where("Note IS NOT NULL").count() == 0
    reshaped_history_is_the_source_at_every_cut(lake, bank)

    # Drift: rows deleted from the Accounts mirror by hand, in the version its cut records.
    accounts = lake.mirror("Accounts")
    gone = [r[0] for r in accounts.read(spark).select("AccountId").orderBy("AccountId").limit(2).collect()]
    spark.sql(f"DELETE FROM delta.{quoted(accounts.uri)} WHERE {quoted('AccountId')} IN ({', '.join(map(sql_string, gone))})")
    lake.publish_snapshot(lake.last_cut(), {"Accounts": accounts.version()})
    drifted = check(materialize(cut_step, resources=defs.resources, instance=dagster_instance))
    assert not drifted["passed"] and drifted["mismatched"] == "Accounts", drifted
    assert "bank_stream/mirror_rebuild for partitions Accounts" in drifted["to_rebuild"]

    for table in ("Accounts", "Branches"):
        result = materialize(rebuild, partition_key=table, resources=defs.resources, instance=dagster_instance)
        assert result.success
        rebuilt = result.asset_materializations_for_node(rebuild[0].op.name)[0].metadata
        assert rebuilt["rows"].value == (30 if table == "Branches" else 20)

    with pytest.raises(UnknownTableError, match="a frozen mirror keeps its last ones"):  # no partition of it: asked through the API
        rebuild_mirrors(lake, bank_stream.target, "BankStream", ["Offices"])

    repaired = check(materialize(cut_step, resources=defs.resources, instance=dagster_instance))
    assert repaired["passed"] and repaired["to_rebuild"] == "none", repaired
    cut = lake.last_cut()
    mirrors = lake.mirrors_at_cut(cut)
    assert {tuple(r) for r in mirrors["Branches"].select(*BRANCHES).collect()} == rows_at(bank, cut, "Branches", BRANCHES)
    assert {tuple(r) for r in mirrors["Accounts"].select("AccountId", "Balance").collect()} == rows_at(bank, cut, "Accounts", ["AccountId", "Balance"])
    check_history_at_cut(lake, cut)  # the rebuilt tables' history is their mirror again
    reshaped_history_is_the_source_at_every_cut(lake, bank)
    # The rebuilds' records keep them frozen (later cuts do too: lake/test_stream_lake.py), and so does the CLI.
    assert {t: c.isoformat() for t, c in lake.last_published().frozen.items()} == frozen
    capsys.readouterr()
    assert lake_cli(["cuts", str(tmp_path / "lake" / "BankStream")]) == 0
    assert re.search(rf"Offices@v\d+ \(frozen since {re.escape(frozen['Offices'])}\)", capsys.readouterr().out.splitlines()[-1])
