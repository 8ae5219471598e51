"""The bank oracle on the emulator (DESIGN invariants 4 and 8): the bank holds accounts and
transfers before the stream's start T0, then transfers run while partitions split and merge, the
sensor's runs land them, and cuts are applied at the low watermark while it all moves. The first cut
is T0, the snapshot. At every cut in the manifest, T0 included, the mirrors are a consistent
snapshot of the source (``oracle.check_bank_cut``: balances sum up, the two tables agree, both
equal the source read at the cut), and DuckDB, deltalake and Spark SQL open it, at the versions the
manifest's log gives, exactly as Spark does (``readers.check_readers_agree``). The history tables,
read by DuckDB at their latest version and filtered at the cut, are the mirrors at every cut, and
their validity intervals are bounded by the writer's own commit timestamps.

The stream is read as Cloud Spanner serves a busy MUTABLE_KEY_RANGE stream (DESIGN invariant 12):
the Cloud Spanner front re-partitions it into eight partitions by key range (``dev/front/key_ranges.py``),
moves key ranges between live partitions while the transfers update those keys, announces and ends
partitions, and spreads each transfer over the partitions that own its keys; the runs find the mode
in the options view and read proto records. So every cut also proves a transaction assembled whole
from several partitions' landings, and a key that moved applied in commit order. One transaction
is a batch job's, larger than a landing chunk in each partition: it lands in pieces (the reader's
memory holds a chunk, not the transaction) and still becomes visible whole, at one cut. The other partition mode's cuts are checked the same way by the fencing and crash
tests (``defs/test_crash_and_restart.py``) and the engines' lake (``lake/test_engines.py``).
"""

import threading
from datetime import timedelta

from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN
from cs_platform.definitions import build_definitions
from cs_platform.dev.cutter import Cutter
from cs_platform.dev.oracle import bank_source_at, check_bank_cut, committed, landed
from cs_platform.dev.sensor_loop import SensorLoop
from cs_platform.dev.workload import BankWorkload, start_after
from cs_platform.lake.history_schema import HistoryPolicy
from cs_platform.lake.stream_lake import Lake
from cs_platform.landing.store import LandingStore, landed_name
from cs_platform_tests.defs.processes import SENSOR
from cs_platform_tests.lake.readers import check_history_at_cut, check_history_intervals, check_readers_agree

WINDOW_SECONDS = 45  # the emulator's partitions churn every 6 s: splits and merges in any window this long
BEFORE_START = 200  # transfers committed before the stream's start: only the snapshot brings them
# Cuts while the window runs, each then read by Spark, DuckDB and deltalake and checked against the
# source and the history: every 8 s still gives several cuts inside the window, most over a split
# or a merge (the partitions churn every 6-12 s), and each cut checked costs about as much Spark
# work as it took to apply.
CUT_EVERY_S = 8
# One transaction of a nightly batch job's shape amid the transfers (BankWorkload.audit_all): 2,010
# mods over the three tables, spread over the partitions, larger than a landing chunk in each.
BATCH_JOB_EVENTS = 1000
CHUNK_MODS = 100


def test_every_cut_is_a_consistent_snapshot_of_the_bank(bank_stream, dagster_instance, spark, tmp_path, spanner_front):
    spanner_front.partition_by_key_range(bank_stream.bank.database_id, "BankStream", partitions=8, change_every=timedelta(seconds=1))
    workload = BankWorkload(bank_stream.bank)
    workload.run(accounts=10, transfers=BEFORE_START)
    start = start_after(workload.committed[-1].commit_timestamp)
    end = start + timedelta(seconds=WINDOW_SECONDS)
    bank_stream.configure(start, end)
    # A run lands every 100 mods: the batch job's transaction lands in pieces in each partition.
    bank_stream.monkeypatch.setenv("CS_PLATFORM_LANDING_CHUNK_MODS", str(CHUNK_MODS))

    def write() -> None:
        workload.run_until(start + timedelta(seconds=WINDOW_SECONDS / 3), 40, accounts=0)
        workload.audit_all(BATCH_JOB_EVENTS)
        workload.run_until(end - timedelta(seconds=5), 40, accounts=0)

    writer = threading.Thread(target=write, daemon=True)
    lake = Lake(spark, str(tmp_path / "lake" / "BankStream"), history=HistoryPolicy(None))
    cutter = Cutter(lake, LandingStore(str(bank_stream.landing_root)), bank_stream.store, bank_stream.target, "BankStream", interval_s=CUT_EVERY_S)
    writer.start()
    cutter.start()
    with SensorLoop(build_definitions, dagster_instance, SENSOR) as loop:
        loop.run_until(bank_stream.finished, timeout_s=WINDOW_SECONDS + 180)
    writer.join()
    cutter.stop()  # re-raises a failed background cut, then cuts at the end

    # The lake can only be as complete as what landed: check landing against the writer's log first,
    # so a loss before landing is reported as such, not as an inconsistent cut.
    landing = LandingStore(str(bank_stream.landing_root))
    lost = committed(workload, end, start) - landed(landing, "BankStream").mods
    assert not lost, f"{len(lost)} committed mods never landed: {sorted(lost)[:4]}"
    batch_job = next(t for t in workload.committed if len(t.mods) == 2 * BATCH_JOB_EVENTS + 10)
    pieces = [n for n in map(landed_name, landing.files("BankStream")) if n.piece]
    assert pieces and all(n.watermark == batch_job.commit_timestamp for n in pieces), "the batch job's transaction was not landed in pieces"
    cuts = lake.cuts()
    partitions = bank_stream.store.all()
    announced = [p for p in partitions if not p.parent_tokens and not p.is_initial]  # by a live partition, mid-stream
    key_ranges = spanner_front.key_range_stats(bank_stream.bank.database_id, "BankStream")
    print(f"{len(workload.committed)} transactions, {len(cuts)} cuts, {len(partitions)} partitions ({len(announced)} announced mid-stream), {key_ranges}")
    assert len(cuts) >= 2 and len(announced) >= 2, "no partition was announced by a start record: not read as MUTABLE_KEY_RANGE?"
    assert key_ranges.moves and key_ranges.ends and key_ranges.spread_transactions, key_ranges
    assert all(p.parent_tokens in ((), (INITIAL_PARTITION_TOKEN,)) for p in partitions)
    assert cuts[0] == start, f"the first cut is {cuts[0]}, not the snapshot at the stream's start {start}"
    for cut in cuts:
        check_bank_cut(lake, bank_stream.bank, cut)
        check_readers_agree(lake, cut)
        check_history_at_cut(lake, cut)  # read without time travel, the history at the cut is the mirror
    writes: dict[tuple[str, str], list] = {}
    for transaction in workload.committed:
        for mod in transaction.mods:
            writes.setdefault((mod.table, mod.keys), []).append((transaction.commit_timestamp, mod.mod_type))
    for table in ("Accounts", "Transfers"):
        of_table = {key: sorted(w) for (t, key), w in writes.items() if t == table}
        assert check_history_intervals(lake, table, of_table) >= len(of_table)  # every key written has a version
    final_accounts, final_transfers = bank_source_at(bank_stream.bank, end)
    assert len(final_transfers) > 500 + BEFORE_START and len(final_accounts) == 10
