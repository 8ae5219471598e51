"""A schema of reserved words, mixed case, a primary key of every key column type and an interleaved
child table with the other column types flows end to end on the emulator: half of its rows exist
before the stream's start T0; sensor-launched reads through splits and merges, landing, the lake step
(the snapshot at T0, changelog, mirrors) and every asset check, which must pass. At both cuts, T0
and the end, every mirror equals the source read at the cut, value by value (DESIGN invariant 8)."""

import base64
import json
import threading
import time
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

from dagster import AssetKey, materialize
from google.cloud import spanner
from google.cloud.spanner_v1 import JsonObject

from cs_platform.definitions import build_definitions
from cs_platform.defs.lake_assets import CHECKS
from cs_platform.dev.workload import start_after
from cs_platform.lake.types import utc
from cs_platform.stream.state import stream_cut

DDL = [
    """CREATE TABLE `Order` (
        `Group` STRING(MAX) NOT NULL,
        KeyBytes BYTES(MAX) NOT NULL,
        KeyTs TIMESTAMP NOT NULL,
        KeyDate DATE NOT NULL,
        KeyNumeric NUMERIC NOT NULL,
        KeyInt INT64 NOT NULL,
        KeyBool BOOL NOT NULL,
        KeyFloat FLOAT64 NOT NULL,
        `Select` STRING(MAX),
        `Limit` INT64,
        `Desc` TIMESTAMP,
        MixedCaseColumn BOOL,
    ) PRIMARY KEY (`Group`, KeyBytes, KeyTs, KeyDate, KeyNumeric, KeyInt, KeyBool, KeyFloat)""",
    """CREATE TABLE Line (
        `Group` STRING(MAX) NOT NULL, KeyBytes BYTES(MAX) NOT NULL, KeyTs TIMESTAMP NOT NULL, KeyDate DATE NOT NULL,
        KeyNumeric NUMERIC NOT NULL, KeyInt INT64 NOT NULL, KeyBool BOOL NOT NULL, KeyFloat FLOAT64 NOT NULL,
        LineNo INT64 NOT NULL,
        Doc JSON, Ratio FLOAT32, Counts ARRAY<INT64>, Words ARRAY<STRING(MAX)>, Amount NUMERIC,
    ) PRIMARY KEY (`Group`, KeyBytes, KeyTs, KeyDate, KeyNumeric, KeyInt, KeyBool, KeyFloat, LineNo),
      INTERLEAVE IN PARENT `Order` ON DELETE CASCADE""",
    "CREATE CHANGE STREAM Orders FOR `Order`, Line",
]
KEYS = ["Group", "KeyBytes", "KeyTs", "KeyDate", "KeyNumeric", "KeyInt", "KeyBool", "KeyFloat"]
COLUMNS = KEYS + ["Select", "Limit", "Desc", "MixedCaseColumn"]
LINE_COLUMNS = KEYS + ["LineNo", "Doc", "Ratio", "Counts", "Words", "Amount"]
BEFORE_START = 6  # orders 0-5 (and their lines) exist before T0: only the snapshot brings them
AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)  # whole seconds: the emulator cuts fractions


def key(i: int) -> list:
    return [f"g{i % 3}", base64.b64encode(bytes([i, 255 - i])), AT + timedelta(seconds=i), date(2020, 1, 1 + i), Decimal(f"{i}.5"), i, i % 2 == 0, i / 4]


def insert(database, orders: range) -> datetime:
    """Orders ``orders`` and their lines, a transaction each; returns the last commit timestamp."""
    for i in orders:
        with database.batch() as batch:
            batch.insert("Order", COLUMNS, [key(i) + [f"select {i}", i * 10, AT, i % 2 == 1]])
            batch.insert("Line", LINE_COLUMNS, [key(i) + [n, JsonObject({"n": n, "ü": [i, None]}), 0.5 * n, [i, n], [f"w{i}", "é"], Decimal(f"-{i}.25")] for n in (1, 2)])
        time.sleep(0.1)
    return batch.committed


def write(database) -> None:
    """Inside the window: new orders, updates and deletes (cascading to lines) of old and new ones."""
    insert(database, range(BEFORE_START, 12))
    for i in range(0, 12, 3):
        with database.batch() as batch:
            batch.update("Order", KEYS + ["Limit", "Select"], [key(i) + [-i, None]])
            batch.update("Line", KEYS + ["LineNo", "Ratio", "Words"], [key(i) + [1, 2.5, ["changed"]]])
    with database.batch() as batch:
        batch.delete("Order", spanner.KeySet(keys=[key(1), key(2)]))


def comparable(row: dict) -> dict:
    out = {}
    for name, value in row.items():
        if isinstance(value, bytearray):  # Spark's BINARY; the client returns BYTES base64-encoded
            value = base64.b64encode(bytes(value))
        elif isinstance(value, datetime):
            value = utc(value)
        elif isinstance(value, Decimal):
            value = value.normalize()
        elif name == "Doc" and value is not None:
            value = json.loads(value) if isinstance(value, str) else dict(value)
        out[name] = value
    return out


def test_reserved_words_mixed_case_every_type_and_an_interleaved_table_end_to_end(stream_setup, dagster_instance, spark):
    orders = stream_setup(DDL, "Orders")
    start = start_after(insert(orders.bank, range(BEFORE_START)))
    end = start + timedelta(seconds=12)
    orders.configure(start, end)
    writer = threading.Thread(target=write, args=(orders.bank,), daemon=True)
    writer.start()
    orders.read_until_finished(dagster_instance, timeout_s=180)
    writer.join()

    defs = build_definitions()
    (lake_step,) = [a for a in defs.assets if AssetKey(["orders", "mirrors"]) in a.keys]
    result = materialize([lake_step], resources=defs.resources, instance=dagster_instance)
    assert result.success
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == dict.fromkeys(CHECKS, True)

    lake = defs.resources["lake"].lake(spark, "Orders")
    assert lake.cuts() == [start, stream_cut(orders.store)]
    expected = {start: (BEFORE_START, 2 * BEFORE_START), lake.cuts()[1]: (10, 20)}
    for cut, counts in expected.items():
        mirrors = lake.mirrors_at_cut(cut)
        for (table, columns), count in zip((("Order", COLUMNS), ("Line", LINE_COLUMNS)), counts):
            mirror = sorted((comparable(r.asDict()) for r in mirrors[table].collect()), key=order_of)
            quoted = ", ".join(f"`{c}`" for c in columns)
            with orders.bank.snapshot(read_timestamp=cut) as snapshot:
                rows = snapshot.execute_sql(f"SELECT {quoted} FROM `{table}`")
                source = sorted((comparable(dict(zip(columns, r))) for r in rows), key=order_of)
            assert len(source) == count, (table, cut)
            assert mirror == source, (table, cut)


def order_of(row: dict) -> tuple:
    return row["KeyInt"], row.get("LineNo", 0)
