"""A PostgreSQL-dialect database, end to end, the way Cloud Spanner serves a busy one: a bank's
MUTABLE_KEY_RANGE stream re-partitioned by the front into partitions whose key ranges move, split
and end while transfers commit (``dev/front/key_ranges.py``), each transfer spread over the partitions
that own its rows, read streaming (``spanner.read_proto_bytes_``), landed, and cut. Every cut is the
source read at its timestamp, and no transfer is ever half visible."""

from __future__ import annotations

import random
import threading
import time
from datetime import datetime, timedelta

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.metadata import PartitionMetadataStore, utc_now
from cs_platform.changestream.query import ChangeStreamQuery, Dialect, PartitionMode
from cs_platform.changestream.reader import PartitionReader
from cs_platform.changestream.tail import STREAMING
from cs_platform.dev.deadline import load_per_core
from cs_platform.dev.local_runner import LocalRunner
from cs_platform.dev.workload import start_after
from cs_platform.lake.stream_lake import Lake
from cs_platform.landing.store import LandingStore
from cs_platform.stream.lake_steps import take_snapshot
from cs_platform_tests.conftest import INSTANCE, PROJECT

STREAM = "bank_stream"
DDL = [
    "CREATE TABLE accounts (id bigint NOT NULL, balance bigint NOT NULL, PRIMARY KEY (id))",
    "CREATE TABLE transfers (id bigint NOT NULL, from_account bigint NOT NULL, to_account bigint NOT NULL, amount bigint NOT NULL, PRIMARY KEY (id))",
    f"CREATE CHANGE STREAM {STREAM} FOR accounts, transfers",
]
ACCOUNTS, BALANCE = 12, 1000


def _transfers(database, until: datetime) -> list[datetime]:
    """Move money between accounts until ``until``, one transfer a transaction (two balances and a
    transfer row), about 30 a second; returns the commit timestamps. One writer, so it knows every
    balance."""
    rng, balances, committed = random.Random(7), {a: BALANCE for a in range(ACCOUNTS)}, []
    while utc_now() < until:
        source, target = rng.sample(range(ACCOUNTS), 2)
        amount = rng.randint(1, 50)
        balances[source] -= amount
        balances[target] += amount
        with database.batch() as batch:
            batch.update("accounts", ["id", "balance"], [[source, balances[source]], [target, balances[target]]])
            batch.insert("transfers", ["id", "from_account", "to_account", "amount"], [[len(committed), source, target, amount]])
        committed.append(batch.committed)
        time.sleep(0.03)  # a few hundred transfers: enough to spread and move, little Spark work
    return committed


def _source_at(database, cut: datetime) -> tuple[dict, dict]:
    with database.snapshot(read_timestamp=cut, multi_use=True) as snapshot:
        accounts = {r[0]: r[1] for r in snapshot.execute_sql("SELECT id, balance FROM accounts")}
        transfers = {r[0]: tuple(r[1:]) for r in snapshot.execute_sql("SELECT id, from_account, to_account, amount FROM transfers")}
    return accounts, transfers


def test_a_postgres_bank_on_moving_key_ranges_is_cut_exactly(make_database, metadata_database, spanner_front, spark, tmp_path, monkeypatch):
    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)  # the client would prefer it to the front's address
    bank = make_database(DDL, postgres=True)
    with bank.batch() as batch:
        batch.insert("accounts", ["id", "balance"], [[a, BALANCE] for a in range(ACCOUNTS)])
    start = start_after(batch.committed)  # the accounts reach the lake by the snapshot at the start
    spanner_front.partition_by_key_range(bank.database_id, STREAM, partitions=6, change_every=timedelta(milliseconds=500))
    target = SpannerTarget(PROJECT, INSTANCE, bank.database_id, spanner_front.host)
    source = target.connect()
    store = PartitionMetadataStore(metadata_database, "BankMetadata")
    reader = PartitionReader(source, ChangeStreamQuery(STREAM, Dialect.POSTGRESQL, 500, PartitionMode.MUTABLE_KEY_RANGE), store, tail=STREAMING)
    landing = LandingStore(str(tmp_path / "landing"))

    end = start + timedelta(seconds=10 + 2 * load_per_core())
    committed: list[datetime] = []
    writer = threading.Thread(target=lambda: committed.extend(_transfers(bank, start + timedelta(seconds=6))))
    writer.start()
    LocalRunner(reader, landing, timedelta(seconds=120)).run(start, end, 500, stop_after_s=180)
    writer.join()

    key_ranges = spanner_front.key_range_stats(bank.database_id, STREAM)
    print(f"{len(committed)} transfers, {key_ranges}")
    assert len(committed) >= 20 and key_ranges.moves and key_ranges.splits and key_ranges.ends, key_ranges
    assert key_ranges.spread_transactions > len(committed) // 2, key_ranges
    lake = Lake(spark, str(tmp_path / "lake"))
    take_snapshot(lake, target, STREAM, start)
    lake.changelog.ingest(landing.files(STREAM))
    # Cuts inside the writes, at a commit and just before one (the transaction then is not in it), and at the end.
    cuts = [committed[len(committed) // 3], committed[2 * len(committed) // 3] - timedelta(microseconds=1), end]
    for cut in cuts:
        assert lake.apply_cut(cut).applied
        mirrors = lake.mirrors_at_cut(cut)
        accounts = {r.id: r.balance for r in mirrors["accounts"].collect()}
        transfers = {r.id: (r.from_account, r.to_account, r.amount) for r in mirrors["transfers"].collect()}
        assert sum(accounts.values()) == ACCOUNTS * BALANCE, f"cut {cut}: a transfer half visible"
        assert (accounts, transfers) == _source_at(bank, cut), f"cut {cut}: the mirrors are not the source at the cut"
    assert len(transfers) == len(committed)
