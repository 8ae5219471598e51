"""End to end on the emulator, no Dagster: initialize -> detect -> read -> children until an end
timestamp, through real splits and merges, while a concurrent writer commits up to 50 transactions
a second (at least 200 in all) over three tables. Compared with the source's own commit log:
nothing lost, nothing invented."""

import threading
from collections import Counter, defaultdict
from datetime import timedelta

from cs_platform.changestream.metadata import PartitionMetadataStore, PartitionState, lineage, utc_now
from cs_platform.changestream.query import ChangeStreamQuery
from cs_platform.changestream.reader import PartitionReader
from cs_platform.changestream.tail import POLLING
from cs_platform.dev.local_runner import LocalRunner
from cs_platform.dev.workload import BANK_TABLES_DDL, BankWorkload, bank_stream_ddl, key_json

WINDOW_SECONDS = 50
WRITES_PER_SECOND = 50  # faster writers starve the emulator's churn (docs/tests.md)


class ChangeLog:
    """A sink that keeps every landed mod by identity, counting duplicates."""

    def __init__(self):
        self.lock = threading.Lock()
        self.mods = {}
        self.records_per_txn = defaultdict(set)
        self.expected_records = {}
        self.batches = 0

    def land(self, batch):
        with self.lock:
            self.batches += 1
            for r in batch.records:
                self.records_per_txn[r.server_transaction_id].add(r.record_sequence)
                self.expected_records[r.server_transaction_id] = r.number_of_records_in_transaction
                for (txn, seq, i), mod in zip(r.change_ids(), r.mods):
                    self.mods[(txn, seq, i)] = (r.commit_timestamp, r.table_name, key_json(**mod.keys), r.mod_type.value)


def test_no_loss_through_splits_and_merges_with_concurrent_writer(make_database, metadata_database):
    bank = make_database(BANK_TABLES_DDL + [bank_stream_ddl("BankStream")])
    store = PartitionMetadataStore(metadata_database, "BankStreamMetadata")
    reader = PartitionReader(bank, ChangeStreamQuery("BankStream", heartbeat_millis=500), store, tail=POLLING)
    changelog = ChangeLog()
    start = utc_now()

    end = start + timedelta(seconds=WINDOW_SECONDS)
    workload = BankWorkload(bank)
    writer = threading.Thread(target=workload.run_until, args=(end - timedelta(seconds=3), WRITES_PER_SECOND), name="writer")
    writer.start()
    runner = LocalRunner(reader, changelog.land, soft_timeout=timedelta(seconds=2))
    runner.run(start, end, 500, stop_after_s=300)
    writer.join()
    assert workload.committed[-1].commit_timestamp < end, "writer outlived the read window"

    # Writes in every generation of partitions: the writer asks for 50 a second over its 47 s, and
    # committed 1,210 at a load of 12 on two cores, 253 in a fresh clone at a load of 20 or more.
    transactions = len(workload.committed)
    assert transactions >= 200
    expected = Counter((m.table, m.keys, m.mod_type, t.commit_timestamp) for t in workload.committed for m in t.mods)
    seen = Counter((table, keys, mod_type, ts) for ts, table, keys, mod_type in changelog.mods.values())
    assert seen == expected, f"missing {expected - seen}, extra {seen - expected}"
    assert {table for table, *_ in expected} == {"Accounts", "Transfers", "AuditEvents"}

    # number_of_records_in_transaction matches what we saw per transaction.
    assert len(changelog.records_per_txn) == transactions
    assert all(len(seqs) == changelog.expected_records[t] for t, seqs in changelog.records_per_txn.items())

    rows = store.all()
    crossed = lineage(rows)
    print(f"{transactions} transactions, {crossed}")
    # The emulator churns on its own clock, and at load a generation lives longer than the 6-12 s asked
    # (in CI on 2026-11-29, 30 s between two generations): the window may hold only one merge.
    assert crossed.splits >= 1 and crossed.merges >= 1, f"{crossed}: churn flag not effective?"
    assert {r.state for r in rows} == {PartitionState.FINISHED}
    by_token = {r.token: r for r in rows}
    for r in rows:
        # Every child (merge children included) started reading only after all its parents finished.
        for parent in r.parent_tokens:
            assert by_token[parent].finished_at <= r.running_at, f"{r.token[:12]} ran before parent finished"
        assert r.created_at <= r.running_at <= r.finished_at
