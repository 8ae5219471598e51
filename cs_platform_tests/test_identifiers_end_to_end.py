"""A schema of reserved words, mixed case and a primary key of every key column type flows end to
end on the emulator: sensor-launched reads, landing, the lake step (changelog, mirrors) and every
asset check, which must pass; the mirror then equals the source read at the cut, value by value."""

import base64
import threading
import time
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

from dagster import AssetKey, materialize
from google.cloud import spanner

from cs_platform.changestream.metadata import utc_now
from cs_platform.definitions import build_definitions
from cs_platform.lake.types import utc
from cs_platform.pipeline import stream_cut

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
    "CREATE CHANGE STREAM Orders FOR `Order`",
]
KEYS = ["Group", "KeyBytes", "KeyTs", "KeyDate", "KeyNumeric", "KeyInt", "KeyBool", "KeyFloat"]
COLUMNS = KEYS + ["Select", "Limit", "Desc", "MixedCaseColumn"]
AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)  # whole seconds: the emulator cuts fractions


def key(i: int) -> list:
    return [f"g{i % 3}", base64.b64encode(bytes([i, 255 - i])), AT + timedelta(seconds=i), date(2020, 1, 1 + i), Decimal(f"{i}.5"), i, i % 2 == 0, i / 4]


def write(database) -> None:
    for i in range(12):
        with database.batch() as batch:
            batch.insert("Order", COLUMNS, [key(i) + [f"select {i}", i * 10, AT, i % 2 == 1]])
        time.sleep(0.1)
    for i in range(0, 12, 3):
        with database.batch() as batch:
            batch.update("Order", KEYS + ["Limit", "Select"], [key(i) + [-i, None]])
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
        out[name] = value
    return out


def test_reserved_words_mixed_case_and_every_key_type_end_to_end(stream_setup, dagster_instance, spark):
    orders = stream_setup(DDL, "Orders")
    start = utc_now()
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
    assert checks == dict.fromkeys(["complete_transactions_below_low_watermark", "typed_values", "watermark_lag", "mirrors_match_source"], True)

    cut = stream_cut(orders.store)
    lake = defs.resources["lake"].lake(spark, "Orders")
    mirror = sorted((comparable(r.asDict()) for r in lake.mirrors_at_cut()["Order"].collect()), key=lambda r: r["KeyInt"])
    quoted = ", ".join(f"`{c}`" for c in COLUMNS)
    with orders.bank.snapshot(read_timestamp=cut) as snapshot:
        source = sorted((comparable(dict(zip(COLUMNS, r))) for r in snapshot.execute_sql(f"SELECT {quoted} FROM `Order`")), key=lambda r: r["KeyInt"])
    assert len(source) == 10
    assert mirror == source
