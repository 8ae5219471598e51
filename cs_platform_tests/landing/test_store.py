"""Landing files: atomic, idempotent, one row per mod with the change identity; clear errors."""

import dataclasses
import gzip
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from cs_platform.changestream.errors import InvalidIdentifierError
from cs_platform.changestream.reader import PartitionBatch
from cs_platform.changestream.records import ColumnType, DataChangeRecord, Mod, ModType, ValueCaptureType
from cs_platform.errors import InvalidArgumentError
from cs_platform.landing.rows import IDENTITY, LANDING_COLUMNS
from cs_platform.landing.store import LandedRange, LandingStore, landed_name, landed_range

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


def readable_by_others(root) -> list[str]:
    """Files and directories under ``root`` (itself included) with any group or world access."""
    found = []
    for directory, _, files in os.walk(root):
        for path in (directory, *(os.path.join(directory, f) for f in files)):
            if os.stat(path).st_mode & 0o077:
                found.append(f"{path} {oct(os.stat(path).st_mode & 0o777)}")
    return found


def test_landing_files_and_their_directories_are_the_service_users_alone(tmp_path):
    """They hold whole rows: no group or world access, whatever the process's umask."""
    umask = os.umask(0o022)  # a common default, which alone leaves files readable by every user
    try:
        store = LandingStore(str(tmp_path / "landing"))
        store.write("BankStream", "20260101T120000Z-abc", batch(record("00000000", 2), record("00000001", 1)))
    finally:
        os.umask(umask)
    assert readable_by_others(tmp_path / "landing") == []


def test_one_row_per_mod_with_identity_and_wire_values(tmp_path):
    store = LandingStore(str(tmp_path))
    landed = store.write("BankStream", "20260101T120000Z-abc", batch(record("00000000", 2), record("00000001", 1)))
    assert landed.rows == 3 and landed.bytes == os.path.getsize(landed.path)
    with gzip.open(landed.path, "rt") as lines:
        rows = [json.loads(line) for line in lines]
    assert [tuple(r[c] for c in IDENTITY) for r in rows] == [("txn-1", "00000000", 0), ("txn-1", "00000000", 1), ("txn-1", "00000001", 0)]
    assert rows[1]["keys"] == '{"AccountId":"a1"}' and rows[1]["new_values"] == '{"Balance":"10"}'
    assert rows[0]["commit_timestamp"] == "2026-01-01T12:00:00.000000+00:00" and rows[0]["partition_token"] == "tok/with+slash="
    assert all(list(r) and set(r) == {name for name, _ in LANDING_COLUMNS} for r in rows)
    table = store.read("BankStream")  # as typed rows
    assert table.schema.names == [name for name, _ in LANDING_COLUMNS] and table.num_rows == 3
    assert table.to_pylist()[0]["commit_timestamp"] == T0


def test_the_name_bounds_the_commit_timestamps_and_counts_the_rows(tmp_path):
    read = batch(record("00000000", 2), record("00000001", 1))
    landed = LandingStore(str(tmp_path)).write("BankStream", "key", read)
    assert landed_name(landed.path) == landed_name(os.path.basename(landed.path))
    assert landed_name(landed.path) == type(landed_name(landed.path))(read.query_start, read.watermark, 3)
    earlier = landed_name("/x/20260101T115955000000Z_20260101T120001000000Z.parquet")  # landed by an earlier version
    assert (earlier.query_start, earlier.watermark, earlier.rows) == (T0 - timedelta(seconds=5), T0 + timedelta(seconds=1), None)
    with pytest.raises(ValueError, match="not a landing file"):
        landed_name("/x/_source.json")


def test_pieces_of_a_huge_transaction_are_named_by_how_far_they_reach_and_sort_before_what_completes_it(tmp_path):
    """The changelog skips a file whose name sorts at or below its directory's mark: names must sort
    in the order of what they reach. Pieces of the mods at T (watermark held at T - 1 µs) sort by
    their count, whatever their rows and start, and before every name whose watermark is T or
    later, a chunk that starts and ends at T included."""
    store, T = LandingStore(str(tmp_path)), T0 + timedelta(seconds=1)
    held = T - timedelta(microseconds=1)

    def piece(start: datetime, reached: int, mods: int) -> PartitionBatch:
        return dataclasses.replace(batch(record("00000000", mods, T), watermark=held), query_start=start, mods_past_watermark=reached)

    reads = [
        piece(T0, 300, 300),  # the first piece, with rows from before T
        piece(T, 600, 12),  # a second, far smaller
        piece(T, 1_000_000, 9),  # counts of any width
        dataclasses.replace(batch(record("00000001", 2, T), watermark=T), query_start=T),  # completes T
        dataclasses.replace(batch(record("00000001", 2, T), watermark=T + timedelta(seconds=1)), query_start=T),
    ]
    names = [os.path.basename(store.path_for("BankStream", "key", read)) for read in reads]
    assert names == sorted(names), names
    assert [landed_name(n).piece for n in names] == [300, 600, 1_000_000, None, None]
    assert [landed_name(n).watermark for n in names[:3]] == [T] * 3  # the name bounds the rows' commit timestamps: T, not the held watermark
    assert landed_name(names[0]).rows == 300 and landed_name(names[0]).query_start == T0


READER_RUN_LANDS = """
import sys
from cs_platform.definitions import build_definitions
from cs_platform.landing.source import SourceIdentity
from cs_platform.landing.store import LandingStore
from cs_platform_tests.landing.test_store import batch, record
build_definitions()
store = LandingStore(sys.argv[1], SourceIdentity("project", "instance", "database", "BankStream", "txn"))
store.check_writable()
landed = store.write("BankStream", "key", batch(record("00000000", 3)))
print(landed.rows, *sorted(m for m in ("pyarrow", "pandas", "pyspark", "delta") if m in sys.modules))
"""


def test_a_reader_run_lands_without_pyarrow_pandas_or_spark(tmp_path):
    """What a reader run loads, in a fresh process: the code location, a source-bound landing
    store, its check and a landing write load none of pyarrow, pandas, PySpark or Delta (pyarrow
    alone is some 40 MB of a reader run's memory)."""
    roots = {"CS_PLATFORM_LANDING_ROOT": str(tmp_path), "CS_PLATFORM_LAKE_ROOT": str(tmp_path / "lake")}  # as a deployment names them
    done = subprocess.run([sys.executable, "-c", READER_RUN_LANDS, str(tmp_path)], capture_output=True, text=True, timeout=300, env={**os.environ, **roots})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["3"], f"a reader run's landing loaded {done.stdout.split()[1:]}"


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

    monkeypatch.setattr(gzip.GzipFile, "write", broken)
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


def test_landed_range_reads_rows_and_commit_bounds_from_the_names(tmp_path):
    files = landed_two_reads(LandingStore(str(tmp_path)))
    start = T0 - timedelta(seconds=5)  # both reads' query start (see ``batch``)
    assert landed_range(files) == LandedRange(5, start, T0 + timedelta(seconds=5))
    assert landed_range(files[1:]) == LandedRange(3, start, T0 + timedelta(seconds=5))
    assert landed_range([]) == LandedRange(0, None, None)
    earlier = "/x/20260101T115955000000Z_20260101T120001000000Z.parquet"
    assert landed_range([*files, earlier]) == LandedRange(5, start, T0 + timedelta(seconds=5), (earlier,))
