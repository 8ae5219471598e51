"""Each value capture type, applied to a mirror, gives the same table as the source: partial
updates are patched (NEW_VALUES, OLD_AND_NEW_VALUES carry only written columns), deletes and
re-inserts, several changes of one key in one cut, every column type mapped to its Spark type."""

import base64
import json
import time
from datetime import datetime, timedelta, timezone

import pytest
from google.cloud import spanner

from cs_platform.changestream.metadata import PartitionMetadataStore, utc_now
from cs_platform.changestream.query import ChangeStreamQuery
from cs_platform.changestream.reader import PartitionReader
from cs_platform.dev.local_runner import LocalRunner
from cs_platform.lake.history_schema import HistoryPolicy
from cs_platform.lake.stream_lake import Lake
from cs_platform.lake.types import utc
from cs_platform.landing.store import LandingStore
from cs_platform_tests.changestream.test_value_capture import COLUMNS, DDL, ROW, to_client
from cs_platform_tests.lake.readers import check_history_at_cut, check_history_intervals, check_readers_agree


def normalized(row: dict) -> dict:
    out = {}
    for name, value in row.items():
        if isinstance(value, bytearray):
            value = bytes(value)
        elif isinstance(value, datetime):
            value = utc(value)  # PySpark's naive local time, the client's UTC
        elif name == "Doc" and value is not None:
            value = json.loads(value) if isinstance(value, str) else json.loads(value.serialize())
        out[name] = value
    return out


@pytest.mark.parametrize("capture", ["OLD_AND_NEW_VALUES", "NEW_ROW", "NEW_VALUES", "NEW_ROW_AND_OLD_VALUES"])
def test_mirror_equals_source(capture, make_database, spark, tmp_path):
    db = make_database([DDL, f"CREATE CHANGE STREAM ItemsStream FOR Items OPTIONS (value_capture_type = '{capture}')"])
    meta = make_database([])
    start = utc_now()
    steps = [
        lambda b: b.insert("Items", COLUMNS, [to_client(ROW), to_client({**ROW, "Id": 2}), to_client({**ROW, "Id": 3})]),
        lambda b: b.update("Items", ["Id", "Name", "Score"], [[ROW["Id"], "renamed", 2.5]]),  # partial update
        lambda b: b.update("Items", ["Id", "Tags", "Doc"], [[ROW["Id"], [7], None]]),
        lambda b: b.delete("Items", spanner.KeySet(keys=[[2]])),
        lambda b: b.insert("Items", ["Id", "Name"], [[2, "back"]]),  # re-insert with other columns NULL
        lambda b: b.update("Items", ["Id", "Flag", "Amount"], [[3, False, "1.5"]]),
        lambda b: b.delete("Items", spanner.KeySet(keys=[[3]])),
    ]
    committed = []
    for step in steps:
        with db.batch() as batch:
            step(batch)
        committed.append(batch.committed)
    end = utc_now() + timedelta(seconds=1)
    time.sleep(1.2)

    landing = LandingStore(str(tmp_path / "landing"))
    store = PartitionMetadataStore(meta, "ItemsMetadata")
    reader = PartitionReader(db, ChangeStreamQuery("ItemsStream", heartbeat_millis=500), store)

    LocalRunner(reader, landing, timedelta(seconds=5)).run(start, end, 500)
    lake = Lake(spark, str(tmp_path / "lake"), history=HistoryPolicy(None))
    lake.changelog.ingest(landing.files("ItemsStream"))
    lake.apply_cut(end)

    mirror = {r.Id: normalized(r.asDict()) for r in lake.mirrors_at_cut()["Items"].collect()}
    with db.snapshot(read_timestamp=end) as snapshot:
        rows = [dict(zip(COLUMNS, r)) for r in snapshot.execute_sql(f"SELECT {', '.join(COLUMNS)} FROM Items")]
    # The Python client returns BYTES base64-encoded (and expects them so on write).
    source = {r["Id"]: normalized({**r, "Raw": base64.b64decode(r["Raw"]) if r["Raw"] else None}) for r in rows}
    assert set(mirror) == set(source) == {ROW["Id"], 2}
    differing = {(k, c): (mirror[k][c], source[k][c]) for k in source for c in COLUMNS if mirror[k][c] != source[k][c]}
    assert not differing, f"{capture}: (mirror, source) differ at {differing}"
    check_readers_agree(lake, lake.last_cut())  # every column type, as DuckDB and deltalake read it
    # The history: one version per transaction that wrote a key, partial updates folded whatever the
    # capture type, bounded by the commits above (step -> (key, mod type)).
    check_history_at_cut(lake, lake.last_cut())
    first = ROW["Id"]
    wrote = [((first, 2, 3), "INSERT"), ((first,), "UPDATE"), ((first,), "UPDATE"), ((2,), "DELETE"), ((2,), "INSERT"), ((3,), "UPDATE"), ((3,), "DELETE")]
    writes: dict[str, list] = {}
    for at, (keys, mod_type) in zip(committed, wrote):
        for key in keys:
            writes.setdefault(json.dumps({"Id": key}), []).append((at, mod_type))
    assert check_history_intervals(lake, "Items", writes) == 7  # the first row: three versions; 2 and 3: two each


EARLY_DDL = """CREATE TABLE Early (
    Id INT64 NOT NULL, Ts TIMESTAMP, Day DATE, Tss ARRAY<TIMESTAMP>, Days ARRAY<DATE>
) PRIMARY KEY (Id)"""


def test_emulator_early_years_are_typed_not_fatal(make_database, spark, tmp_path):
    """The emulator writes years below 1000 unpadded ("1-01-01T00:00:00Z", EMULATOR.md); the cut
    must type them like Cloud Spanner's padded spelling instead of failing on them."""
    db = make_database([EARLY_DDL, "CREATE CHANGE STREAM EarlyStream FOR Early"])
    meta = make_database([])
    start = utc_now()
    early = [datetime(1, 1, 1, tzinfo=timezone.utc), datetime(100, 2, 3, 4, 5, 6, tzinfo=timezone.utc), datetime(999, 12, 31, tzinfo=timezone.utc)]
    with db.batch() as batch:
        batch.insert("Early", ["Id", "Ts", "Day", "Tss", "Days"], [[i, at, at.date(), [at, early[0]], [at.date()]] for i, at in enumerate(early)])
    end = utc_now() + timedelta(seconds=1)
    time.sleep(1.2)
    landing = LandingStore(str(tmp_path / "landing"))
    reader = PartitionReader(db, ChangeStreamQuery("EarlyStream", heartbeat_millis=500), PartitionMetadataStore(meta, "EarlyMetadata"))
    LocalRunner(reader, landing, timedelta(seconds=5)).run(start, end, 500)
    raw = {json.loads(r["new_values"])["Ts"] for r in landing.read("EarlyStream").to_pylist()}
    assert "1-01-01T00:00:00Z" in raw  # the emulator's spelling this test is about

    lake = Lake(spark, str(tmp_path / "lake"))
    lake.changelog.ingest(landing.files("EarlyStream"))
    assert lake.apply_cut(end).applied
    # PySpark cannot collect year-1 datetimes in every time zone: compare instants as numbers.
    mirror = lake.mirrors_at_cut()["Early"].selectExpr(
        "Id", "unix_micros(Ts)", "unix_date(Day)", "transform(Tss, x -> unix_micros(x))", "transform(Days, x -> unix_date(x))"
    )
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)

    def micros(at: datetime) -> int:
        return (at - epoch) // timedelta(microseconds=1)

    def days(at: datetime) -> int:
        return (at.date() - epoch.date()).days

    expected = {(i, micros(at), days(at), (micros(at), micros(early[0])), (days(at),)) for i, at in enumerate(early)}
    assert {(r[0], r[1], r[2], tuple(r[3]), tuple(r[4])) for r in mirror.collect()} == expected
