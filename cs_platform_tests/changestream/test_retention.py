"""The retention watchdog on the emulator: the stream's retention_period read from
INFORMATION_SCHEMA, unfinished partitions classified by the age of their watermarks, and the real
partition sensor no longer launching an expired partition.

The emulator (like Cloud Spanner) refuses a retention_period under 24 hours, so the watermarks are
aged instead: metadata rows are written with watermarks hours in the past."""

from datetime import timedelta

import pytest

from cs_platform.changestream.catalog import change_stream_retention
from cs_platform.changestream.metadata import (
    COLUMNS,
    INITIAL_PARTITION_TOKEN,
    PartitionMetadataStore,
    PartitionState,
    partition_key,
    utc_now,
)
from cs_platform.changestream.retention import RetentionLevel, watch_retention
from cs_platform.dev.workload import BANK_TABLES_DDL, bank_stream_ddl

AGES_H = {"fresh": 10, "past-half": 20, "near-expiry": 30, "expired": 40}  # against a 36 h retention


def age_partitions(store: PartitionMetadataStore, ages_h: dict[str, float], end=None) -> None:
    """Initialize the table (initial partition FINISHED, started 48 h ago) and add a RUNNING
    partition per token whose watermark is that many hours old."""
    now = utc_now()
    store.initialize(now - timedelta(hours=48), end, 1000)
    store.record_progress(INITIAL_PARTITION_TOKEN, now - timedelta(hours=47), finished=True, owner=None)
    rows = []
    for token, hours in ages_h.items():
        start = now - timedelta(hours=47)
        rows.append([token, partition_key(token, start), [INITIAL_PARTITION_TOKEN], start, None, 1000,
                     PartitionState.RUNNING.value, now - timedelta(hours=hours), start, start, start, None, None])
    with store.database.batch() as batch:
        batch.insert(store.table, COLUMNS, rows)


@pytest.fixture
def stream_database(make_database):
    return make_database(BANK_TABLES_DDL + [
        "CREATE CHANGE STREAM Kept36h FOR Accounts OPTIONS (retention_period = '36h')",
        bank_stream_ddl("BankStream"),
    ])


def test_retention_is_read_from_information_schema(stream_database):
    assert change_stream_retention(stream_database, "Kept36h") == timedelta(hours=36)
    assert change_stream_retention(stream_database, "BankStream") == timedelta(days=1)  # the default


def test_watermarks_past_half_then_past_80_percent_then_past_the_retention(stream_database, metadata_database):
    store = PartitionMetadataStore(metadata_database, "Watched")
    age_partitions(store, AGES_H)
    watch = watch_retention(store.unfinished(), lambda: change_stream_retention(stream_database, "Kept36h"), utc_now())
    assert watch.retention == timedelta(hours=36)
    assert [p.token for p in watch.past_half] == ["past-half"]
    assert [p.token for p in watch.near_expiry] == ["near-expiry"]
    assert [p.token for p in watch.expired] == ["expired"]
    assert watch.level is RetentionLevel.ERROR
    text = watch.describe("Kept36h", "the command")
    assert "36.0h (retention_period)" in text and "start the stream over (the command)" in text
    assert store.get("expired").key in text

    store.record_progress("expired", utc_now(), finished=True, owner=None)
    store.record_progress("near-expiry", utc_now(), finished=True, owner=None)
    warned = watch_retention(store.unfinished(), lambda: change_stream_retention(stream_database, "Kept36h"), utc_now())
    assert warned.level is RetentionLevel.WARN and not warned.expired and not warned.near_expiry

    store.record_progress("past-half", utc_now(), finished=True, owner=None)
    calm = watch_retention(store.unfinished(), lambda: pytest.fail("the retention is read only when a watermark is 12h old"), utc_now())
    assert calm.level is RetentionLevel.OK and calm.retention is None


def test_the_sensor_stops_launching_an_expired_partition(stream_setup, dagster_instance):
    from cs_platform.definitions import build_definitions
    from cs_platform.dev.sensor_loop import evaluate_sensor

    setup = stream_setup(BANK_TABLES_DDL + ["CREATE CHANGE STREAM Kept36h FOR ALL OPTIONS (retention_period = '36h')"], "Kept36h")
    end = utc_now() + timedelta(hours=1)
    age_partitions(setup.store, AGES_H, end)
    setup.configure(setup.store.get(INITIAL_PARTITION_TOKEN).start_timestamp, end)
    definitions = build_definitions()
    sensor = definitions.resolve_sensor_def(setup.sensor)
    result = evaluate_sensor(definitions, dagster_instance, sensor, None)
    launched = {r.partition_key for r in result.run_requests}
    assert launched == {setup.store.get(t).key for t in AGES_H if t != "expired"}
    result = evaluate_sensor(definitions, dagster_instance, sensor, result.cursor)
    assert "1 expired (not launched" in result.skip_message
