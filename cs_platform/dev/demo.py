"""`make demo`: the reader core end to end on the embedded default.

Starts a private emulator (fast partition churn), creates the bank database and a change stream,
commits multi-table transactions while reading the stream partition by partition (initial query,
children, splits and merges), then prints the changes in commit order and checks them against the
writer's own commit log.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from collections import Counter
from datetime import timedelta
from pathlib import Path

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import PartitionMetadataStore, utc_now
from cs_platform.changestream.query import ChangeStreamQuery
from cs_platform.changestream.reader import PartitionBatch, PartitionReader
from cs_platform.changestream.records import DataChangeRecord
from cs_platform.changestream.runner import LocalRunner
from cs_platform.dev.emulator import SpannerEmulator
from cs_platform.dev.workload import BANK_TABLES_DDL, BankWorkload, bank_stream_ddl, create_database, create_instance

log = logging.getLogger("cs_platform.demo")
DEMO_DIR = Path(".demo")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=20, help="length of the read window")
    parser.add_argument("--show", type=int, default=12, help="how many transactions to print in full")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("google").setLevel(logging.WARNING)
    DEMO_DIR.mkdir(exist_ok=True)

    with SpannerEmulator(partition_alive_seconds=3, log_path=DEMO_DIR / "emulator.log") as emulator:
        client = SpannerTarget("demo-project", "demo-instance", "bank", emulator.host).client()
        instance = create_instance(client, "demo-instance")
        bank = create_database(instance, "bank", BANK_TABLES_DDL + [bank_stream_ddl("BankStream")])
        store = PartitionMetadataStore(create_database(instance, "metadata", []), "BankStreamMetadata")
        reader = PartitionReader(bank, ChangeStreamQuery("BankStream", heartbeat_millis=500), store)

        start = utc_now()
        end = start + timedelta(seconds=args.seconds)
        workload = BankWorkload(bank)
        writer = threading.Thread(target=workload.run_until, args=(end - timedelta(seconds=3), 40), kwargs={"accounts": 10}, name="writer")
        records: list[DataChangeRecord] = []

        def land(batch: PartitionBatch) -> None:
            records.extend(batch.records)

        log.info("reading stream BankStream from %s to %s while the writer commits transfers", start, end)
        writer.start()
        summary = LocalRunner(reader, land, soft_timeout=timedelta(seconds=2)).run(start, end, 500)
        writer.join()
        partitions = store.all()

    records.sort(key=lambda r: (r.commit_timestamp, r.server_transaction_id, r.record_sequence))
    _print_changes(records, args.show)
    seen = Counter((r.table_name, tuple(sorted(m.keys.items())), r.mod_type.value) for r in records for m in r.mods)
    committed = Counter(
        (m.table, tuple(sorted(json.loads(m.keys).items())), m.mod_type) for t in workload.committed for m in t.mods
    )
    merges = sum(1 for p in partitions if len(p.parent_tokens) >= 2)
    parents = Counter(t for p in partitions for t in p.parent_tokens if t != "initial")
    print(
        f"\n{len(workload.committed)} transactions committed, {summary.records} records / {summary.mods} mods read "
        f"in {summary.reads} partition reads over {len(partitions)} partitions "
        f"({sum(1 for n in parents.values() if n >= 2)} splits, {merges} merges)"
    )
    if seen != committed:
        raise SystemExit(f"MISMATCH: missing {committed - seen}, unexpected {seen - committed}")
    print("every committed mod was read exactly once: stream == source")


def _print_changes(records: list[DataChangeRecord], show: int) -> None:
    print("\nchanges in commit order (first transactions):")
    shown, current = 0, None
    for r in records:
        if r.server_transaction_id != current:
            shown += 1
            if shown > show:
                break
            current = r.server_transaction_id
            print(f"{r.commit_timestamp.isoformat()} txn {r.server_transaction_id} ({r.number_of_records_in_transaction} records)")
        for m in r.typed_mods():
            values = {k: str(v) for k, v in (m.new_values or m.old_values).items()}
            print(f"    {r.mod_type.value:<6} {r.table_name}{dict(m.keys)} {values}")


if __name__ == "__main__":
    main()
