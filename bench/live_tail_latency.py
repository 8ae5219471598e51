"""What polling costs: commit -> record delivery latency, STREAMING (baseline) vs POLLING, same run.

On a private emulator (churn off, so every read covers the whole window), a writer commits one row
every --interval-ms for --seconds while two readers read every partition over the same window:
  (a) STREAMING: one query per partition whose end is the window end (Cloud Spanner's way; on the
      emulator it can lose commits on scan boundaries, see cs_platform/changestream/tail.py)
  (b) POLLING:   the emulator default, windows every 0.5 s ending 250 ms behind now
Each record is stamped when the reader's query yields it. Latency = receive time - commit timestamp
(the emulator stamps commits slightly ahead of this host's clock, which shifts both alike).
Prints median / p90 / max per reader, the ratio (b)/(a) of medians, and commits each reader missed.

    .venv/bin/python bench/live_tail_latency.py [--seconds 20 --interval-ms 50]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from datetime import datetime, timedelta

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import PartitionMetadata, PartitionMetadataStore, PartitionState, utc_now
from cs_platform.changestream.query import ChangeStreamQuery
from cs_platform.changestream.reader import PartitionReader
from cs_platform.changestream.records import DataChangeRecord
from cs_platform.changestream.tail import POLLING, STREAMING, LiveTail
from cs_platform.dev.emulator import SpannerEmulator
from cs_platform.dev.workload import create_database, create_instance

STREAM = "LatencyStream"
DDL = ["CREATE TABLE Ticks (Id INT64 NOT NULL) PRIMARY KEY (Id)", f"CREATE CHANGE STREAM {STREAM} FOR Ticks"]


class StampedReader(PartitionReader):
    """A PartitionReader that notes when each data record came off the wire."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.received: dict[datetime, float] = {}

    def _records(self, partition, start, end):
        for record in super()._records(partition, start, end):
            if isinstance(record, DataChangeRecord):
                self.received.setdefault(record.commit_timestamp, time.time())
            yield record


def read_window(reader: StampedReader, tokens: list[str], start: datetime, end: datetime) -> None:
    threads = []
    for token in tokens:
        partition = PartitionMetadata(token, (), start, end, 1000, PartitionState.RUNNING, start - timedelta(microseconds=1))
        threads.append(threading.Thread(target=reader.read, args=(partition, end - utc_now() + timedelta(seconds=1))))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def summary(name: str, reader: StampedReader, committed: list[datetime]) -> float:
    latencies = sorted(reader.received[c] - c.timestamp() for c in committed if c in reader.received)
    missed = sum(c not in reader.received for c in committed)
    p90 = latencies[int(0.9 * (len(latencies) - 1))]
    median = statistics.median(latencies)
    print(f"{name:<10} commit -> record: {median * 1000:7.0f} / {p90 * 1000:7.0f} / {latencies[-1] * 1000:7.0f} ms"
          f" (median / p90 / max, n={len(latencies)}), missed {missed}")
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--interval-ms", type=int, default=50)
    args = parser.parse_args()
    with SpannerEmulator(churn=False) as emulator:
        target = SpannerTarget("bench-project", "bench", "ticks", emulator.host)
        instance = create_instance(target.client(), "bench")
        database = create_database(instance, "ticks", DDL)
        metadata = create_database(instance, "metadata", [])
        query = ChangeStreamQuery(STREAM, heartbeat_millis=1000)
        start = utc_now()
        end = start + timedelta(seconds=args.seconds + 2)

        def reader(tail: LiveTail, table: str) -> StampedReader:
            store = PartitionMetadataStore(metadata, table)
            store.initialize(start, end, 1000)
            return StampedReader(database, query, store, tail=tail)

        streaming, polling = reader(STREAMING, "StreamingMetadata"), reader(POLLING, "PollingMetadata")
        initial = PartitionMetadata("initial", (), start, end, 1000, PartitionState.RUNNING, start - timedelta(microseconds=1))
        tokens = [c.token for c in streaming.read(initial, timedelta(seconds=1)).children]
        readers = [threading.Thread(target=read_window, args=(r, tokens, start, end)) for r in (streaming, polling)]
        for thread in readers:
            thread.start()
        committed = []
        while utc_now() < end - timedelta(seconds=1):
            with database.batch() as batch:
                batch.insert("Ticks", ["Id"], [[len(committed)]])
            committed.append(batch.committed)
            time.sleep(args.interval_ms / 1000)
        for thread in readers:
            thread.join()
        print(f"\n{len(committed)} commits over {args.seconds} s, {len(tokens)} partitions")
        base = summary("streaming", streaming, committed)
        polled = summary("polling", polling, committed)
        print(f"polling / streaming median latency: {polled / base:.1f}x (+{(polled - base) * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
