"""MUTABLE_KEY_RANGE change streams: their proto records mapped field by field, and whole streams
read through the Cloud Spanner front, which presents the emulator's partitions in that mode
(``dev/front/mutable_key_range.py``): announced by start records, ended by end records, key ranges
moving out of a partition and into its successors by event records, the end timestamp bounded.
Compared with what the writers committed: nothing lost, nothing repeated, in both dialects."""

from __future__ import annotations

import base64
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from google.api_core import exceptions as gexc
from google.cloud.spanner_v1.types import ChangeStreamRecord
from google.protobuf import struct_pb2, timestamp_pb2
from grpc import StatusCode

from cs_platform.changestream.catalog import partition_mode
from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.errors import MalformedRecordError
from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN, PartitionMetadataStore, PartitionState, utc_now
from cs_platform.changestream.proto_mapper import ProtoRowMapper
from cs_platform.changestream.query import ChangeStreamQuery, Dialect, PartitionMode
from cs_platform.changestream.reader import MAX_QUERY_AHEAD, PartitionReader
from cs_platform.changestream.records import (
    DataChangeRecord,
    HeartbeatRecord,
    ModType,
    PartitionEndRecord,
    PartitionEventRecord,
    PartitionStartRecord,
    ValueCaptureType,
)
from cs_platform.changestream.tail import STREAMING
from cs_platform.dev.deadline import load_per_core
from cs_platform.dev.front.mutable_key_range import END_REQUIRED, END_TOO_FAR
from cs_platform.dev.front.server import Fault
from cs_platform.dev.local_runner import LocalRunner
from cs_platform.dev.workload import BANK_TABLES_DDL, BankWorkload, bank_stream_ddl, key_json
from cs_platform_tests.changestream.test_postgres import PG_DDL
from cs_platform_tests.conftest import INSTANCE, PROJECT

T = datetime(2026, 11, 26, 12, 0, 0, 123456, tzinfo=timezone.utc)
CSR = ChangeStreamRecord.pb()
DCR = ChangeStreamRecord.DataChangeRecord


def _ts(moment: datetime) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(moment)
    return ts


def _row(message) -> list:
    """A row as the client hands it over with lazy_decode: the message's bytes, base64, in a Value."""
    return [struct_pb2.Value(string_value=base64.b64encode(message.SerializeToString()).decode())]


def test_each_proto_record_maps_field_by_field():
    mapper = ProtoRowMapper("P1")
    data = CSR(
        data_change_record=DCR.pb()(
            commit_timestamp=_ts(T),
            record_sequence="00000002",
            server_transaction_id="tx-1",
            is_last_record_in_transaction_in_partition=True,
            table="Accounts",
            column_metadata=[
                {"name": "Id", "type_": {"code": 2}, "is_primary_key": True, "ordinal_position": 1},
                {"name": "Tags", "type_": {"code": 8, "array_element_type": {"code": 6}}, "ordinal_position": 2},
                {"name": "Balance", "type_": {"code": 3}, "ordinal_position": 3},
            ],
            mods=[
                {
                    "keys": [{"column_metadata_index": 0, "value": struct_pb2.Value(string_value="42")}],
                    "new_values": [
                        {"column_metadata_index": 1, "value": struct_pb2.Value(list_value=struct_pb2.ListValue(values=[struct_pb2.Value(string_value="a")]))},
                        {"column_metadata_index": 2, "value": struct_pb2.Value(number_value=1.5)},
                    ],
                    "old_values": [{"column_metadata_index": 2, "value": struct_pb2.Value(null_value=0)}],
                }
            ],
            mod_type=DCR.ModType.UPDATE.value,
            value_capture_type=DCR.ValueCaptureType.OLD_AND_NEW_VALUES.value,
            number_of_records_in_transaction=3,
            number_of_partitions_in_transaction=2,
            transaction_tag="app",
        )
    )
    [record] = mapper.map_row(_row(data))
    assert isinstance(record, DataChangeRecord)
    assert (record.partition_token, record.commit_timestamp, record.record_sequence, record.server_transaction_id) == ("P1", T, "00000002", "tx-1")
    assert record.table_name == "Accounts" and record.is_last_record_in_transaction_in_partition
    assert [(c.name, dict(c.type), c.is_primary_key, c.ordinal_position) for c in record.column_types] == [
        ("Id", {"code": "INT64"}, True, 1),
        ("Tags", {"code": "ARRAY", "array_element_type": {"code": "STRING"}}, False, 2),
        ("Balance", {"code": "FLOAT64"}, False, 3),
    ]
    [mod] = record.mods
    assert (dict(mod.keys), dict(mod.new_values), dict(mod.old_values)) == ({"Id": "42"}, {"Tags": ["a"], "Balance": 1.5}, {"Balance": None})
    assert record.typed_mods()[0].keys == {"Id": 42}  # the same wire encoding as the other partition mode's
    assert (record.mod_type, record.value_capture_type) == (ModType.UPDATE, ValueCaptureType.OLD_AND_NEW_VALUES)
    assert (record.number_of_records_in_transaction, record.number_of_partitions_in_transaction, record.transaction_tag) == (3, 2, "app")

    assert mapper.map_row(_row(CSR(heartbeat_record={"timestamp": _ts(T)}))) == [HeartbeatRecord("P1", T)]
    start = CSR(partition_start_record={"start_timestamp": _ts(T), "record_sequence": "1", "partition_tokens": ["A", "B"]})
    assert mapper.map_row(_row(start)) == [PartitionStartRecord("P1", T, "1", ("A", "B"))]
    end = CSR(partition_end_record={"end_timestamp": _ts(T), "record_sequence": "2", "partition_token": "P1"})
    assert mapper.map_row(_row(end)) == [PartitionEndRecord("P1", T, "2")]
    event = CSR(
        partition_event_record={
            "commit_timestamp": _ts(T),
            "record_sequence": "3",
            "partition_token": "P1",
            "move_in_events": [{"source_partition_token": "P2"}, {"source_partition_token": "P3"}],
            "move_out_events": [{"destination_partition_token": "P4"}],
        }
    )
    assert mapper.map_row(_row(event)) == [PartitionEventRecord("P1", T, "3", ("P2", "P3"), ("P4",))]


def test_a_row_that_is_no_change_stream_record_or_names_no_column_is_malformed():
    mapper = ProtoRowMapper("P1")
    with pytest.raises(MalformedRecordError, match="not a serialized google.spanner.v1.ChangeStreamRecord"):
        mapper.map_row([struct_pb2.Value(string_value="not base64!")])
    with pytest.raises(MalformedRecordError, match="holding 'no record'"):
        mapper.map_row(_row(CSR()))
    orphan = CSR(data_change_record=DCR.pb()(table="T", mods=[{"keys": [{"column_metadata_index": 3}]}], mod_type=10, value_capture_type=10))
    with pytest.raises(MalformedRecordError, match="table 'T'"):
        mapper.map_row(_row(orphan))


class RecordKinds(PartitionReader):
    """The real reader, counting the kinds of record it applied."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.kinds: Counter = Counter()
        self.lock = threading.Lock()

    def _apply(self, partition, record, progress) -> None:
        with self.lock:
            self.kinds[type(record).__name__] += 1
        super()._apply(partition, record, progress)


def _read_whole(
    front, database, stream: str, dialect: Dialect, make_database, write, expected: PartitionMode = PartitionMode.MUTABLE_KEY_RANGE
) -> tuple[RecordKinds, list, list, list]:
    """Read ``stream`` (presented by the front in partition mode ``expected``) streaming through
    the front over a window while ``write`` commits (returns what it committed, as (table, keys,
    mod type) tuples), every partition to its end. Returns the reader, the landed mods, the
    committed ones and the landed records."""
    target = SpannerTarget(PROJECT, INSTANCE, database.database_id, front.host)
    client = target.client()
    source = target.connect(client)
    mode = partition_mode(source, stream)
    assert mode is expected, f"the options view says {mode}, not {expected}"
    metadata = SpannerTarget(PROJECT, INSTANCE, make_database([]).database_id, front.host).connect(client)
    store = PartitionMetadataStore(metadata, "Metadata")
    store.create_table_if_missing()
    reader = RecordKinds(source, ChangeStreamQuery(stream, dialect, 500, mode), store, tail=STREAMING)
    landed: list = []
    records: list = []

    def land(batch) -> None:
        records.extend(batch.records)
        landed.extend((r.table_name, key_json(**m.keys), r.mod_type.value, i) for r in batch.records for i, m in zip(r.change_ids(), r.mods))

    start = utc_now()
    end = start + timedelta(seconds=10 + 2 * load_per_core())
    committed: list = []
    writer = threading.Thread(target=lambda: committed.extend(write(start + timedelta(seconds=6))))
    writer.start()
    LocalRunner(reader, land, timedelta(seconds=120)).run(start, end, 500, stop_after_s=180)
    writer.join()
    rows = store.all()
    assert {r.state for r in rows} == {PartitionState.FINISHED}
    if mode is PartitionMode.MUTABLE_KEY_RANGE:  # announced partitions wait for no parent: only the initial query's are children of it
        assert all(r.parent_tokens in ((), (INITIAL_PARTITION_TOKEN,)) for r in rows)
    return reader, landed, committed, records


def _bank_and_orders(make_database) -> list[tuple]:
    """A GoogleSQL bank and a PostgreSQL order book, each with a stream and a writer (which returns
    what it committed as (table, keys, mod type) tuples): (database, stream, dialect, writer)."""
    bank = make_database(BANK_TABLES_DDL + [bank_stream_ddl("BankStream")])
    orders = make_database(PG_DDL, postgres=True)
    workload = BankWorkload(bank)

    def bank_writes(until: datetime) -> list:
        workload.run_until(until, per_second=30)
        return [(m.table, m.keys, m.mod_type) for t in workload.committed for m in t.mods]

    def order_writes(until: datetime) -> list:
        done, order = [], 0
        while utc_now() < until:
            order += 1
            with orders.batch() as batch:
                batch.insert("orders", ["order_id", "customer", "total", "details"], [[order, "c", "1.50", "{}"]])
                batch.insert("order_lines", ["order_id", "line_no", "qty"], [[order, 1, 2]])
            done += [("orders", key_json(order_id=str(order)), "INSERT"), ("order_lines", key_json(line_no="1", order_id=str(order)), "INSERT")]
            time.sleep(0.05)
        return done

    return [(bank, "BankStream", Dialect.GOOGLE_STANDARD_SQL, bank_writes), (orders, "order_stream", Dialect.POSTGRESQL, order_writes)]


def _read_side_by_side(front, make_database, streams: list[tuple], present, mode: PartitionMode = PartitionMode.MUTABLE_KEY_RANGE) -> dict:
    """Read each of ``streams`` whole (``_read_whole``) after ``present(front, database, stream)``,
    side by side: each waits on the emulator's partitions more than it works."""
    reads: dict = {}

    def read(database, stream: str, dialect: Dialect, write) -> None:
        present(front, database.database_id, stream)
        reads[stream] = _read_whole(front, database, stream, dialect, make_database, write, mode)

    threads = [threading.Thread(target=read, args=s) for s in streams]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    for _, stream, *_ in streams:
        assert stream in reads, f"the read of {stream} failed (its error is above)"
        _, landed, committed, _ = reads[stream]
        assert len(committed) > 20  # a few seconds of writes, however loaded the machine
        assert len({i for *_, i in landed}) == len(landed), f"{stream}: a change landed twice"
        assert Counter(tuple(m) for *m, _ in landed) == Counter(committed), f"{stream}: lost or invented changes"
    return reads


def test_a_mutable_key_range_stream_is_read_whole_through_splits_and_merges(make_database, spanner_front, monkeypatch):
    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)  # the client would prefer it to the front's address
    before = spanner_front.live_queries
    streams = _bank_and_orders(make_database)
    reads = _read_side_by_side(spanner_front, make_database, streams, lambda front, database, stream: front.present_mutable(database, stream))
    for stream, (reader, _, committed, _) in reads.items():
        kinds = reader.kinds
        print(f"{stream}: {len(committed)} mods, records {dict(kinds)}")
        assert kinds["PartitionStartRecord"] and kinds["PartitionEndRecord"] and kinds["PartitionEventRecord"], dict(kinds)
        assert not kinds["ChildPartitionsRecord"]
    assert spanner_front.live_queries > before, "no query was streamed"


@pytest.mark.parametrize("mode", [PartitionMode.MUTABLE_KEY_RANGE, PartitionMode.IMMUTABLE_KEY_RANGE])
def test_a_stream_re_partitioned_by_key_range_is_read_whole_with_spread_transactions(make_database, spanner_front, monkeypatch, mode):
    """Cloud Spanner's shape of a busy stream, through the front (``dev/front/key_ranges.py``): eight
    partitions that change as the stream goes (MUTABLE_KEY_RANGE: key ranges moving between live
    partitions, partitions announced and ended; IMMUTABLE_KEY_RANGE: partitions splitting and
    merging), and each transaction's changes spread over the partitions that own its keys. Every
    committed change lands once, and each transaction's records say how to assemble it whole. Two
    queries break mid-stream, and the client library resumes them from the front's resume tokens."""
    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)
    streams = _bank_and_orders(make_database)
    fired = len(spanner_front.injected)
    # After a query's first response, so that they fire however short the queries are: a loaded
    # machine (a clone with three pytest workers) read this stream's partitions, which change every
    # 500 ms, without one query reaching a sixth response, and once without a second query reaching
    # a third; a query answered in one response ends with the reset instead of OK.
    resets = (Fault(StatusCode.UNAVAILABLE, after_responses=1), Fault(StatusCode.INTERNAL, after_responses=1))
    spanner_front.inject(*resets)

    def present(front, database: str, stream: str) -> None:
        front.partition_by_key_range(database, stream, partitions=8, change_every=timedelta(milliseconds=500), mode=mode)

    reads = _read_side_by_side(spanner_front, make_database, streams, present, mode)
    for (database, stream, *_), (reader, _, committed, records) in zip(streams, (reads[s[1]] for s in streams)):
        stats = spanner_front.key_range_stats(database.database_id, stream)
        print(f"{stream}: {len(committed)} mods, records {dict(reader.kinds)}, {stats}")
        # The front builds as far as any query asks, which may pass the read's end.
        if mode is PartitionMode.MUTABLE_KEY_RANGE:
            assert stats.moves and stats.splits and stats.ends and not stats.merges, stats
            assert 1 < reader.kinds["PartitionStartRecord"] <= stats.splits + 1  # the initial query's, and a split's
            assert 0 < reader.kinds["PartitionEndRecord"] <= stats.ends
        else:
            assert stats.splits and stats.merges and not stats.moves and not stats.ends, stats
            assert not reader.kinds["PartitionStartRecord"] and not reader.kinds["PartitionEventRecord"], dict(reader.kinds)
            # One in the initial query's answer, one in each split parent, one in each merged parent.
            assert 1 < reader.kinds["ChildPartitionsRecord"] <= 1 + stats.splits + 2 * stats.merges, (dict(reader.kinds), stats)
        transactions: dict = {}
        for record in records:
            transactions.setdefault(record.server_transaction_id, []).append(record)
        spread = 0
        for records_of_one in transactions.values():
            first = records_of_one[0]
            partitions = {r.partition_token for r in records_of_one}
            assert len({r.record_sequence for r in records_of_one}) == len(records_of_one) == first.number_of_records_in_transaction
            assert len(partitions) == first.number_of_partitions_in_transaction
            for token in partitions:  # each partition's last record of the transaction says so, and only it
                mine = sorted((r for r in records_of_one if r.partition_token == token), key=lambda r: r.record_sequence)
                assert [r.is_last_record_in_transaction_in_partition for r in mine] == [False] * (len(mine) - 1) + [True]
            spread += len(partitions) > 1
        assert 0 < spread <= stats.spread_transactions, (spread, stats)
    assert spanner_front.injected[fired:] == list(resets), "a reset did not fire"
    owners: dict = {}  # a key's changes came from each partition that owned it when they committed
    for record in reads["BankStream"][3]:  # every transfer updates two of the bank's ten accounts
        for mod in record.mods:
            owners.setdefault((record.table_name, key_json(**mod.keys)), set()).add(record.partition_token)
    assert max(len(tokens) for tokens in owners.values()) > 1, "no account moved between partitions while it was updated"


def test_a_mutable_key_range_query_must_end_within_30_minutes(make_database, spanner_front, monkeypatch):
    """The front refuses what Cloud Spanner refuses; the reader never asks it (it ends every
    query at most MAX_QUERY_AHEAD ahead)."""
    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)
    bank = make_database(BANK_TABLES_DDL + [bank_stream_ddl("BankStream")])
    spanner_front.present_mutable(bank.database_id, "BankStream")
    source = SpannerTarget(PROJECT, INSTANCE, bank.database_id, spanner_front.host).connect()
    query = ChangeStreamQuery("BankStream", partition_mode=PartitionMode.MUTABLE_KEY_RANGE)
    now = utc_now()
    for end, message in ((None, END_REQUIRED), (now + timedelta(minutes=31), END_TOO_FAR)):
        statement = query.statement(now, end, None)
        with pytest.raises(gexc.InvalidArgument, match=message), source.snapshot() as snapshot:
            list(snapshot.execute_sql(statement.sql, params=statement.params, param_types=statement.param_types))
    assert MAX_QUERY_AHEAD < timedelta(minutes=30)
