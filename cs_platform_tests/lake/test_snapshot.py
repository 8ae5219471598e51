"""The snapshot at the stream's start (DESIGN invariant 8): a value reads the same whichever way it
reached the mirror, and a snapshot killed half-way is taken again, whole, with no cut before it."""

import base64
import os
import signal
import subprocess
import sys
import time
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from dagster import AssetKey

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.errors import SnapshotTooOldError
from cs_platform.changestream.metadata import PartitionMetadataStore, utc_now
from cs_platform.changestream.query import ChangeStreamQuery, Dialect
from cs_platform.changestream.reader import PartitionReader
from cs_platform.defs.lake_assets import mirrors_match_source
from cs_platform.dev.deadline import Deadline
from cs_platform.dev.local_runner import LocalRunner
from cs_platform.dev.workload import BankWorkload, start_after
from cs_platform.lake.stream_lake import Lake
from cs_platform.lake.verify import mirrors_against_source
from cs_platform.landing.store import LandingStore
from cs_platform.stream.lake_steps import start_from_snapshot, take_snapshot
from cs_platform_tests.changestream.test_value_capture import COLUMNS, DDL, ROW, to_client
from cs_platform_tests.conftest import INSTANCE, PROJECT
from cs_platform_tests.lake.readers import check_readers_agree


def land_stream(db, query: ChangeStreamQuery, store: PartitionMetadataStore, start, landing: LandingStore):
    """Land the stream from ``start`` to an end just past what was committed; returns the end."""
    end = utc_now() + timedelta(seconds=1)
    time.sleep(1.2)  # the end must be in the past: the read then ends at once (EMULATOR.md)

    LocalRunner(PartitionReader(db, query, store), landing, timedelta(seconds=5)).run(start, end, 500)
    return end


def test_a_value_reads_the_same_from_the_snapshot_and_from_the_stream(make_database, spark, tmp_path, emulator):
    """Row 1 exists before T0 (the snapshot brings it), row ROW["Id"] is inserted after T0 with the
    same values (the stream brings it): every column of the two mirror rows is identical."""
    db = make_database([DDL, "CREATE CHANGE STREAM ItemsStream FOR Items"])
    meta = make_database([])
    row = {**ROW, "Doc": {"bb": [1, "twö", None], "a": {"c": 1.5}, "ccc": "€"}}
    with db.batch() as batch:
        batch.insert("Items", COLUMNS, [to_client({**row, "Id": 1})])
    start = start_after(batch.committed)
    with db.batch() as batch:
        batch.insert("Items", COLUMNS, [to_client(row)])
    landing = LandingStore(str(tmp_path / "landing"))
    end = land_stream(db, ChangeStreamQuery("ItemsStream", heartbeat_millis=500), PartitionMetadataStore(meta, "ItemsMetadata"), start, landing)

    lake = Lake(spark, str(tmp_path / "lake"))
    loaded = take_snapshot(lake, SpannerTarget(PROJECT, INSTANCE, db.database_id, emulator.host), "ItemsStream", start)
    assert loaded.rows == {"Items": 1} and lake.cuts() == [start]
    lake.changelog.ingest(landing.files("ItemsStream"))
    assert lake.apply_cut(end).mods == 1  # the insert after T0 only

    rows = {r.Id: r.asDict() for r in lake.mirrors_at_cut()["Items"].collect()}
    from_snapshot, from_stream = rows.pop(1), rows.pop(ROW["Id"])
    assert not rows
    differing = {c: (from_snapshot[c], from_stream[c]) for c in COLUMNS if c != "Id" and from_snapshot[c] != from_stream[c]}
    assert not differing, f"(snapshot, stream) values differ: {differing}"

    # The check of the mirrors against the source compares whole rows, every type of column among
    # them: equal here; a value reverted in the mirror at the published cut (what a lake writer
    # presumed dead once did) keeps its key and the row count, and is named all the same.
    found = mirrors_against_source(lake, db, "ItemsStream")
    assert found.mismatched == [] and found.tables["Items"]["differing_rows"] == 0, found.tables
    mirror = lake.mirror("Items")
    spark.sql(f"UPDATE delta.`{mirror.uri}` SET Amount = Amount + 1 WHERE Id = 1")
    lake.publish_snapshot(end, {"Items": mirror.version()})  # recorded at the cut, as a rebuild records a mirror
    reverted = mirrors_against_source(lake, db, "ItemsStream")
    assert reverted.mismatched == ["Items"], reverted.tables
    assert reverted.tables["Items"]["differing_rows"] == 2 and reverted.tables["Items"]["mirror_rows"] == reverted.tables["Items"]["source_rows"] == 2
    # A sample smaller than the mirror: its rows are counted, not taken from the sample's size.
    sampled = mirrors_against_source(lake, db, "ItemsStream", samples=1).tables["Items"]
    assert (sampled["sampled_rows"], sampled["mirror_rows"]) == (1, 2), sampled


def test_a_commit_at_the_start_is_in_the_snapshot_only(make_database, spark, tmp_path, emulator):
    """DESIGN invariant 8 at its seam: the stream starts at exactly the commit timestamp T0 of a
    transaction. That transaction is in the snapshot (cut T0) and not in the changelog, which holds
    exactly the mods of (T0, end]; a replay of the first partitions keeps the same rule."""
    db = make_database([DDL, "CREATE CHANGE STREAM ItemsStream FOR Items"])
    meta = make_database([])
    with db.batch() as at_start:
        at_start.insert("Items", COLUMNS, [to_client({**ROW, "Id": 1}), to_client({**ROW, "Id": 2})])
    start = at_start.committed
    with db.batch() as after:
        after.insert("Items", COLUMNS, [to_client({**ROW, "Id": 3})])
    landing = LandingStore(str(tmp_path / "landing"))
    store = PartitionMetadataStore(meta, "ItemsMetadata")
    end = land_stream(db, ChangeStreamQuery("ItemsStream", heartbeat_millis=500), store, start, landing)

    landed = landing.read("ItemsStream").to_pylist()
    assert {r["commit_timestamp"] for r in landed} == {after.committed}, "a commit at T0 was read by the stream"
    lake = Lake(spark, str(tmp_path / "lake"))
    assert take_snapshot(lake, SpannerTarget(PROJECT, INSTANCE, db.database_id, emulator.host), "ItemsStream", start).rows == {"Items": 2}
    lake.changelog.ingest(landing.files("ItemsStream"))
    assert lake.changelog.table().count() == 1  # the insert of Id 3
    assert lake.apply_cut(end).mods == 1
    assert sorted(r.Id for r in lake.mirrors_at_cut()["Items"].collect()) == [1, 2, 3]

    reader = PartitionReader(db, ChangeStreamQuery("ItemsStream", heartbeat_millis=500), store)
    first = [p for p in store.all() if not p.parent_tokens and not p.is_initial]
    replayed = [r for p in first for chunk in reader.replay(p) for r in chunk.records]
    assert start not in {r.commit_timestamp for r in replayed}, "a replay of a first partition read the commit at T0"


def test_a_table_in_a_named_schema_is_mirrored_apart_from_its_namesake_from_the_snapshot_on(make_database, spark, tmp_path, emulator):
    """Named schemas (CREATE SCHEMA): change records name such a table ``schema.Table``, and so does
    its mirror, from the snapshot at T0 on; the default schema's table of the same bare name keeps
    its own mirror. Every engine's statement and the source checks quote the two-part name. Its
    vector column (ARRAY<FLOAT32>(vector_length=>2)) is an array of floats either way."""
    db = make_database([
        "CREATE SCHEMA sch",
        "CREATE TABLE T (Id INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (Id)",
        "CREATE TABLE sch.T (Id INT64 NOT NULL, V STRING(MAX), W INT64, E ARRAY<FLOAT32>(vector_length=>2)) PRIMARY KEY (Id)",  # E: an embedding
        "CREATE CHANGE STREAM Both FOR T, sch.T",
    ])
    meta = make_database([])
    with db.batch() as before:
        before.insert("T", ["Id", "V"], [[1, "default"]])
        before.insert("sch.T", ["Id", "V", "W", "E"], [[1, "named", 7, [0.5, -2.25]]])
    start = start_after(before.committed)
    with db.batch() as after:
        after.insert("sch.T", ["Id", "V", "W", "E"], [[2, "later", 8, [1.0, 0.125]]])
        after.update("T", ["Id", "V"], [[1, "changed"]])
    landing = LandingStore(str(tmp_path / "landing"))
    end = land_stream(db, ChangeStreamQuery("Both", heartbeat_millis=500), PartitionMetadataStore(meta, "BothMetadata"), start, landing)

    lake = Lake(spark, str(tmp_path / "lake"))
    assert take_snapshot(lake, SpannerTarget(PROJECT, INSTANCE, db.database_id, emulator.host), "Both", start).rows == {"T": 1, "sch.T": 1}
    lake.changelog.ingest(landing.files("Both"))
    assert lake.apply_cut(end).mods == 2
    mirrors = lake.mirrors_at_cut()
    assert sorted(tuple(r) for r in mirrors["T"].collect()) == [(1, "changed")]
    assert sorted(tuple(r) for r in mirrors["sch.T"].collect()) == [(1, "named", 7, [0.5, -2.25]), (2, "later", 8, [1.0, 0.125])]
    assert sorted(tuple(r) for r in lake.mirrors_at_cut(start)["sch.T"].collect()) == [(1, "named", 7, [0.5, -2.25])]
    assert dict(mirrors["sch.T"].dtypes)["E"] == "array<float>"
    check_readers_agree(lake, end)  # DuckDB, deltalake and Spark SQL through the printed statements
    check = mirrors_match_source(lake, db, "Both", AssetKey(["both", "mirror_rebuild"]))
    assert check.passed and check.metadata["tables"].data["sch.T"]["source_rows"] == 2, check.metadata["tables"].data


PG_DDL = [
    """CREATE TABLE items (id bigint NOT NULL, name varchar, amount numeric, doc jsonb, score float8, ratio float4,
        flag bool, raw bytea, day date, seen timestamptz, tags bigint[], PRIMARY KEY (id))""",
    "CREATE CHANGE STREAM items_stream FOR items",
]
PG_COLUMNS = ["id", "name", "amount", "doc", "score", "ratio", "flag", "raw", "day", "seen", "tags"]
PG_ROW = [
    "naïve ☃", Decimal("-1234567890.123456789"), '{"bb": [1, "twö", null], "a": {"c": 1.5}, "ccc": "€"}', -0.0, 0.5, True,
    base64.b64encode(b"\x00\xffbytes"), date(1999, 12, 31), datetime(2024, 5, 6, 7, 8, 9, tzinfo=timezone.utc), [1, -2, 3],
]


def test_a_postgres_value_reads_the_same_from_the_snapshot_and_from_the_stream(make_database, spark, tmp_path, emulator):
    """The same on a PostgreSQL-dialect database (spanner.read_json_<stream>, PG types)."""
    db = make_database(PG_DDL, postgres=True)
    meta = make_database([])
    with db.batch() as batch:
        batch.insert("items", PG_COLUMNS, [[1, *PG_ROW]])
    start = start_after(batch.committed)
    with db.batch() as batch:
        batch.insert("items", PG_COLUMNS, [[2, *PG_ROW]])
    landing = LandingStore(str(tmp_path / "landing"))
    query = ChangeStreamQuery("items_stream", Dialect.POSTGRESQL, heartbeat_millis=500)
    end = land_stream(db, query, PartitionMetadataStore(meta, "ItemsMetadata"), start, landing)

    lake = Lake(spark, str(tmp_path / "lake"))
    take_snapshot(lake, SpannerTarget(PROJECT, INSTANCE, db.database_id, emulator.host), "items_stream", start)
    lake.changelog.ingest(landing.files("items_stream"))
    assert lake.apply_cut(end).mods == 1

    rows = {r.id: r.asDict() for r in lake.mirrors_at_cut()["items"].collect()}
    assert set(rows) == {1, 2}
    differing = {c: (rows[1][c], rows[2][c]) for c in PG_COLUMNS if c != "id" and rows[1][c] != rows[2][c]}
    assert not differing, f"(snapshot, stream) values differ: {differing}"


def test_a_killed_snapshot_is_taken_again_whole_and_no_cut_comes_before_it(bank_stream, spark, tmp_path, emulator):
    workload = BankWorkload(bank_stream.bank)
    workload.run(accounts=5, transfers=40, progress_every=0)
    start = start_after(workload.committed[-1].commit_timestamp)
    bank_stream.store.initialize(start, None, 500)
    root = str(tmp_path / "lake")
    marker = tmp_path / "marker"
    command = [
        sys.executable, "-m", "cs_platform_tests.lake.killed_snapshot", emulator.host, PROJECT, INSTANCE,
        bank_stream.bank.database_id, bank_stream.metadata.database_id, "BankStream", root, str(marker),
    ]
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = Deadline(180)
    while not marker.exists():
        assert process.poll() is None, "killed_snapshot ended before its first mirror"
        assert not deadline.expired(), f"killed_snapshot stalled before its first mirror ({deadline.describe()})"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the Python driver, its Spark JVM and Python workers
    assert process.wait(timeout=30) == -signal.SIGKILL
    lake = Lake(spark, root)
    assert lake.last_published() is None, "a cut was published before the snapshot committed"

    result = start_from_snapshot(lake, bank_stream.target, "BankStream", bank_stream.store)

    assert lake.cuts() == [start]
    with bank_stream.bank.snapshot(read_timestamp=start, multi_use=True) as source:
        for table, key in (("Accounts", "AccountId"), ("Transfers", "TransferId"), ("AuditEvents", "EventId")):
            mirror = lake.mirrors_at_cut(start)[table]
            expected = list(source.execute_sql(f"SELECT COUNT(*) FROM {table}"))[0][0]
            assert result.rows[table] == mirror.count() == mirror.select(key).distinct().count() == expected, table
    balances = [r.Balance for r in lake.mirrors_at_cut(start)["Accounts"].collect()]
    assert sum(balances) == 1000 * len(balances) == 5000


def test_a_start_older_than_the_version_retention_is_refused_with_nothing_written(bank_stream, spark, tmp_path):
    start = utc_now() - timedelta(hours=2)
    bank_stream.store.initialize(start, None, 500)
    lake = Lake(spark, str(tmp_path / "lake"))
    with pytest.raises(SnapshotTooOldError, match=r"keeps versions for only 3600 s \(version_retention_period\).*ALTER DATABASE"):
        start_from_snapshot(lake, bank_stream.target, "BankStream", bank_stream.store)
    assert not (tmp_path / "lake").exists()


def test_a_table_dropped_after_the_start_is_still_read_as_it_was_at_the_start(make_database, metadata_database, spark, tmp_path, emulator):
    """FOR ALL lets a watched table be dropped. The snapshot reads the schema and the rows as of T0,
    so the dropped table's mirror holds its rows at T0; at a later cut the source check passes it
    over (it is no longer watched) and checks the rest."""
    db = make_database(["CREATE TABLE Kept (Id INT64 NOT NULL) PRIMARY KEY (Id)", "CREATE TABLE Gone (Id INT64 NOT NULL, Note STRING(MAX)) PRIMARY KEY (Id)", "CREATE CHANGE STREAM Everything FOR ALL"])
    with db.batch() as batch:
        batch.insert("Kept", ["Id"], [[1], [2]])
        batch.insert("Gone", ["Id", "Note"], [[7, "seven"]])
    start = start_after(batch.committed)
    store = PartitionMetadataStore(metadata_database, f"Everything{db.database_id.replace('-', '')}")
    store.initialize(start, None, 500)
    db.update_ddl(["DROP TABLE Gone"]).result(120)
    with db.batch() as batch:
        batch.insert("Kept", ["Id"], [[3]])
    landing = LandingStore(str(tmp_path / "landing"))
    reading = PartitionMetadataStore(metadata_database, f"Read{db.database_id.replace('-', '')}")
    end = land_stream(db, ChangeStreamQuery("Everything", heartbeat_millis=500), reading, start, landing)
    lake = Lake(spark, str(tmp_path / "lake"))

    result = start_from_snapshot(lake, SpannerTarget(PROJECT, INSTANCE, db.database_id, emulator.host), "Everything", store)
    lake.changelog.ingest(landing.files("Everything"))
    assert lake.apply_cut(end).mods == 1

    assert result.rows == {"Gone": 1, "Kept": 2}
    assert [tuple(r) for r in lake.mirrors_at_cut(start)["Gone"].collect()] == [(7, "seven")]
    check = mirrors_match_source(lake, db, "Everything", AssetKey(["everything", "mirror_rebuild"]))
    tables = check.metadata["tables"].data
    assert check.passed and "not watched" in tables["Gone"]["note"] and tables["Kept"]["mirror_rows"] == 3, tables
