"""Landing files: atomic, idempotent, one row per mod with the change identity; clear errors."""

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pyarrow.parquet as pq
import pytest

from cs_platform.changestream.errors import InvalidArgumentError, InvalidIdentifierError
from cs_platform.changestream.reader import PartitionBatch
from cs_platform.changestream.records import ColumnType, DataChangeRecord, Mod, ModType, ValueCaptureType
from cs_platform.landing.rows import IDENTITY, LANDING_SCHEMA
from cs_platform.landing.store import ROW_GROUP_ROWS, LandedRange, LandingStore, landed_range

T0 = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)


def record(seq: str, mods: int, ts: datetime = T0) -> DataChangeRecord:
    return DataChangeRecord(
        partition_token="tok/with+slash=",
        commit_timestamp=ts,
        record_sequence=seq,
        server_transaction_id="txn-1",
        is_last_record_in_transaction_in_partition=seq == "00000001",
        table_name="Accounts",
        column_types=(ColumnType("AccountId", {"code": "STRING"}, True, 1), ColumnType("Balance", {"code": "INT64"}, False, 2)),
        mods=tuple(Mod({"AccountId": f"a{i}"}, {"Balance": "10"}, {"Balance": "5"}) for i in range(mods)),
        mod_type=ModType.UPDATE,
        value_capture_type=ValueCaptureType.OLD_AND_NEW_VALUES,
        number_of_records_in_transaction=2,
        number_of_partitions_in_transaction=1,
        transaction_tag="tag",
        is_system_transaction=False,
    )


def batch(*records: DataChangeRecord, watermark: datetime = T0 + timedelta(seconds=1)) -> PartitionBatch:
    return PartitionBatch("tok/with+slash=", T0 - timedelta(seconds=5), watermark, records, (), watermark, False)


def test_one_row_per_mod_with_identity_and_wire_values(tmp_path):
    store = LandingStore(str(tmp_path))
    landed = store.write("BankStream", "20260101T120000Z-abc", batch(record("00000000", 2), record("00000001", 1)))
    table = pq.read_table(landed.path)
    assert table.schema == LANDING_SCHEMA and landed.rows == 3 and landed.bytes == os.path.getsize(landed.path)
    rows = table.to_pylist()
    assert [tuple(r[c] for c in IDENTITY) for r in rows] == [("txn-1", "00000000", 0), ("txn-1", "00000000", 1), ("txn-1", "00000001", 0)]
    assert rows[1]["keys"] == '{"AccountId":"a1"}' and rows[1]["new_values"] == '{"Balance":"10"}'
    assert rows[0]["commit_timestamp"] == T0 and rows[0]["partition_token"] == "tok/with+slash="


def test_a_chunk_larger_than_a_row_group_lands_every_mod_once_in_order(tmp_path):
    """A landing write builds and writes one row group at a time (its memory holds one slice of the
    chunk): slices split records and end exactly, and the footers still give the file's range."""
    late = T0 + timedelta(milliseconds=500)
    mods = ROW_GROUP_ROWS + 7
    landed = LandingStore(str(tmp_path)).write(
        "BankStream", "key", batch(record("00000000", mods - 3), record("00000001", 3, late))
    )
    parquet = pq.ParquetFile(landed.path)
    assert [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)] == [ROW_GROUP_ROWS, 7]
    rows = parquet.read().to_pylist()
    assert landed.rows == len(rows) == mods
    expected = [("00000000", i) for i in range(mods - 3)] + [("00000001", i) for i in range(3)]
    assert [(r["record_sequence"], r["mod_index"]) for r in rows] == expected
    assert rows[-1]["commit_timestamp"] == late and rows[ROW_GROUP_ROWS - 1]["keys"] == f'{{"AccountId":"a{ROW_GROUP_ROWS - 1}"}}'
    assert landed_range([landed.path]) == LandedRange(mods, T0, late)


LANDS_WITHOUT_PANDAS = """
import sys
from cs_platform.landing.store import LandingStore
from cs_platform_tests.landing.test_store import batch, record
landed = LandingStore(sys.argv[1]).write("BankStream", "key", batch(record("00000000", 3)))
print(landed.rows, "pandas" in sys.modules)
"""


def test_landing_rows_does_not_import_pandas(tmp_path):
    """A reader run's landing builds its Arrow table without pandas (about 40 MB of a reader run's
    memory), in a fresh process, as a run lands."""
    done = subprocess.run([sys.executable, "-c", LANDS_WITHOUT_PANDAS, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["3", "False"], "landing imported pandas"


def test_same_read_lands_at_the_same_path_and_overwrites_it(tmp_path):
    store = LandingStore(str(tmp_path))
    first = store.write("BankStream", "key", batch(record("00000000", 1)))
    again = store.write("BankStream", "key", batch(record("00000000", 1)))
    assert first.path == again.path and store.files("BankStream") == [first.path]
    assert store.read("BankStream").num_rows == 1
    # Another range of the same partition is another file.
    other = store.write("BankStream", "key", batch(record("00000000", 1), watermark=T0 + timedelta(seconds=2)))
    assert other.path != first.path and len(store.files("BankStream")) == 2


def test_empty_batch_lands_nothing(tmp_path):
    store = LandingStore(str(tmp_path))
    assert store.write("BankStream", "key", batch()) is None
    assert store.files("BankStream") == [] and store.read("BankStream").num_rows == 0


def test_a_failed_write_leaves_no_file_behind(tmp_path, monkeypatch):
    store = LandingStore(str(tmp_path))

    def broken(*args, **kwargs):  # fails after the writer opened the file and wrote its header
        raise OSError("disk full")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        store.write("BankStream", "key", batch(record("00000000", 1)))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_bad_settings_name_the_setting(tmp_path):
    with pytest.raises(InvalidArgumentError, match="CS_PLATFORM_LANDING_ROOT is empty"):
        LandingStore("")
    with pytest.raises(InvalidArgumentError, match="not a supported location"):
        LandingStore("nosuchscheme://bucket/x")
    with pytest.raises(InvalidIdentifierError):
        LandingStore(str(tmp_path)).files("../escape")


def landed_two_reads(store: LandingStore) -> list[str]:
    """Two reads of one partition, the second's commits 3 and 4 s after the first's (2 + 3 rows)."""
    first = store.write("BankStream", "p", batch(record("00000000", 2)))
    later = T0 + timedelta(seconds=3)
    second = store.write("BankStream", "p", batch(record("00000001", 1, later), record("00000002", 2, later + timedelta(seconds=1)), watermark=later + timedelta(seconds=2)))
    return [first.path, second.path]


def test_landed_range_reads_rows_and_commit_range_from_the_footers(tmp_path):
    files = landed_two_reads(LandingStore(str(tmp_path)))
    assert landed_range(files) == LandedRange(5, T0, T0 + timedelta(seconds=4))
    assert landed_range(files[1:]) == LandedRange(3, T0 + timedelta(seconds=3), T0 + timedelta(seconds=4))
    assert landed_range([]) == LandedRange(0, None, None)
