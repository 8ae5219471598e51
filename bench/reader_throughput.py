"""Reader throughput against baselines measured in the same run, on a private emulator.

Writes >= 100k mods, then reads the whole range back (end timestamp in the past) per partition:
  (a) client: snapshot.execute_sql, rows decoded by the client, no further parsing
  (b) raw:    the client's low-level execute_streaming_sql, PartialResultSet messages, no decoding
  (c) ours:   PartitionReader.read, full parsing into DataChangeRecord/Mod records
  (c+typed)   (c) plus decoding every mod value to Python types (DataChangeRecord.typed_mods)
Prints mods/s (min and median of --repeat runs) and the ratios c/a and c/b.

    .venv/bin/python bench/reader_throughput.py [--transactions 200 --rows 500 --repeat 3]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from datetime import timedelta

from google.cloud.spanner_v1 import ExecuteSqlRequest, TransactionOptions, TransactionSelector, Type, TypeCode
from google.protobuf import struct_pb2

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import PartitionMetadata, PartitionMetadataStore, PartitionState
from cs_platform.changestream.query import ChangeStreamQuery
from cs_platform.changestream.reader import PartitionReader
from cs_platform.changestream.values import format_timestamp
from cs_platform.dev.emulator import SpannerEmulator
from cs_platform.dev.workload import create_database, create_instance

DDL = [
    "CREATE TABLE Events (Id INT64 NOT NULL, Kind STRING(32), Amount INT64, Note STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE CHANGE STREAM EventStream FOR Events",
]
STREAM = "EventStream"


def write(database, transactions: int, rows: int):
    """Returns the range to read: from just before the first commit (a child of the initial
    partition reads from just after the stream's start T0, whose commits are the snapshot's), to
    just after the last."""
    start = None
    last = None
    for t in range(transactions):
        with database.batch() as b:
            b.insert(
                "Events",
                ["Id", "Kind", "Amount", "Note"],
                [[t * rows + i, "deposit", i, f"note {t}-{i}"] for i in range(rows)],
            )
        start = start or b.committed
        last = b.committed
        if (t + 1) % 50 == 0:
            print(f"  wrote {(t + 1) * rows:,} mods", flush=True)
    return start - timedelta(microseconds=1), last + timedelta(milliseconds=1)


def partitions(database, query: ChangeStreamQuery, store, start, end) -> list[str]:
    reader = PartitionReader(database, query, store)
    initial = PartitionMetadata("initial", (), start, end, query.heartbeat_millis, PartitionState.CREATED, start - timedelta(microseconds=1))
    return [c.token for c in reader.read(initial, timedelta(hours=1)).children]


def read_client(database, query, tokens, start, end) -> int:
    mods = 0
    for token in tokens:
        st = query.statement(start, end, token)
        with database.snapshot() as snap:
            for row in snap.execute_sql(st.sql, params=st.params, param_types=st.param_types):
                for change in row[0]:
                    for dcr in change[0]:
                        mods += len(dcr[6])
    return mods


def read_raw(database, query, tokens, start, end) -> int:
    """PartialResultSet messages straight from the gRPC stub: the emulator's own limit."""
    api = database.spanner_api
    session = database.session()
    session.create()
    total_bytes = 0
    try:
        for token in tokens:
            st = query.statement(start, end, token)
            params = struct_pb2.Struct()
            params.update(
                {
                    "start_timestamp": format_timestamp(start),
                    "end_timestamp": format_timestamp(end),
                    "partition_token": token,
                    "heartbeat_milliseconds": str(query.heartbeat_millis),
                }
            )
            request = ExecuteSqlRequest(
                session=session.name,
                sql=st.sql,
                params=params,
                param_types={
                    "start_timestamp": Type(code=TypeCode.TIMESTAMP),
                    "end_timestamp": Type(code=TypeCode.TIMESTAMP),
                    "partition_token": Type(code=TypeCode.STRING),
                    "heartbeat_milliseconds": Type(code=TypeCode.INT64),
                },
                transaction=TransactionSelector(single_use=TransactionOptions(read_only=TransactionOptions.ReadOnly(strong=True))),
            )
            for message in api.execute_streaming_sql(request=request, metadata=[("google-cloud-resource-prefix", database.name)]):
                total_bytes += len(message._pb.values)
    finally:
        session.delete()
    return total_bytes


def read_ours(database, query, store, tokens, start, end, typed: bool) -> int:
    reader = PartitionReader(database, query, store)
    mods = 0
    for token in tokens:
        p = PartitionMetadata(token, ("initial",), start, end, query.heartbeat_millis, PartitionState.RUNNING, start - timedelta(microseconds=1))
        batch = reader.read(p, timedelta(hours=1))
        mods += batch.mod_count
        if typed:
            for record in batch.records:
                record.typed_mods()
    return mods


def timed(fn, repeat: int):
    times, result = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - began)
    return min(times), statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--rows", type=int, default=500, help="rows per transaction (keep <= ~500: commit cost)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    with SpannerEmulator(churn=False) as emulator:
        client = SpannerTarget("bench", "bench", "bench", emulator.host).client()
        instance = create_instance(client, "bench")
        database = create_database(instance, "events", DDL)
        store = PartitionMetadataStore(create_database(instance, "meta", []), "Meta")
        store.create_table_if_missing()
        print(f"writing {args.transactions * args.rows:,} mods ({args.transactions} transactions x {args.rows} rows)")
        start, end = write(database, args.transactions, args.rows)
        query = ChangeStreamQuery(STREAM, heartbeat_millis=300_000)
        tokens = partitions(database, query, store, start, end)
        expected = args.transactions * args.rows
        print(f"reading back from {len(tokens)} partitions, {args.repeat} runs each")

        results = {
            "a client": timed(lambda: read_client(database, query, tokens, start, end), args.repeat),
            "b raw": timed(lambda: read_raw(database, query, tokens, start, end), args.repeat),
            "c ours": timed(lambda: read_ours(database, query, store, tokens, start, end, False), args.repeat),
            "c+typed": timed(lambda: read_ours(database, query, store, tokens, start, end, True), args.repeat),
        }
        for name in ("a client", "c ours", "c+typed"):
            assert results[name][2] == expected, f"{name} saw {results[name][2]} mods, expected {expected}"

    print(f"\n{'reader':<10} {'min s':>8} {'median s':>9} {'mods/s (median)':>16}")
    for name, (best, median, _) in results.items():
        print(f"{name:<10} {best:8.2f} {median:9.2f} {expected / median:16,.0f}")
    a, b, c, ct = (results[k][1] for k in ("a client", "b raw", "c ours", "c+typed"))
    print(f"\nratio c/a (ours vs client iteration, throughput): {a / c:.2f}")
    print(f"ratio c/b (ours vs raw gRPC stream, throughput):  {b / c:.2f}")
    print(f"ratio (c+typed)/a: {a / ct:.2f}   (c+typed)/b: {b / ct:.2f}")


if __name__ == "__main__":
    main()
