"""Every Spanner call is safe from any number of threads sharing one ``Database`` (DESIGN invariant 9).

The emulator has no multiplexed sessions: when the client multiplexes read-only snapshots or
partitioned reads over one session, a later transaction on that session drops an earlier one, and
a multi-use snapshot fails with ``404 Transaction not found`` (EMULATOR.md). This test runs what the
product runs concurrently (``make demo``'s cut thread and progress loop, the sensor and the lake's
checks) against one shared metadata ``Database`` and one shared source ``Database``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from cs_platform.changestream.catalog import watched_tables
from cs_platform.changestream.metadata import PartitionMetadataStore
from cs_platform.changestream.table_snapshot import plan_snapshot
from cs_platform.dev.workload import BankWorkload, start_after
from cs_platform.stream.state import stream_cut

THREADS = 8
ROUNDS = 12


def test_many_threads_share_one_database_for_snapshots_cuts_and_plans(bank_stream):
    workload = BankWorkload(bank_stream.bank)
    workload.run(accounts=4, transfers=5, progress_every=0)
    start = start_after(workload.committed[-1].commit_timestamp)
    metadata, source = bank_stream.metadata, bank_stream.bank
    stores = [PartitionMetadataStore(metadata, "BankStreamMetadata") for _ in range(3)]  # several stores, one Database
    stores[0].initialize(start, start + timedelta(hours=1), 500)

    def multi_use_snapshot(i: int) -> int:
        with source.snapshot(multi_use=True) as snapshot:
            accounts = list(snapshot.execute_sql("SELECT COUNT(*) FROM Accounts"))[0][0]
            balance = list(snapshot.execute_sql("SELECT SUM(Balance) FROM Accounts"))[0][0]
        assert balance == 1000 * accounts
        return accounts

    def cut(i: int) -> object:
        store = stores[i % len(stores)]
        assert store.unfinished().partitions  # reads the State index, then the rows by key, in one snapshot
        return stream_cut(store)

    def plan(i: int) -> int:
        tables = watched_tables(source, "BankStream", start)
        transaction, planned = plan_snapshot(source, tables, start)
        transaction.close()
        return len(planned.partitions)

    calls = [(kind, i) for i in range(ROUNDS) for kind in (multi_use_snapshot, cut, plan)]
    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(lambda call: (call[0].__name__, call[0](call[1])), calls))

    assert {kind for kind, _ in results} == {"multi_use_snapshot", "cut", "plan"}
    assert all(value == 4 for kind, value in results if kind == "multi_use_snapshot")
    assert all(value == start - timedelta(microseconds=1) for kind, value in results if kind == "cut")
    assert all(value >= 3 for kind, value in results if kind == "plan")
