"""What landed vs what the bank workload committed: the no-loss oracle of the demo and the tests."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime

from google.cloud.spanner_v1.database import Database

from cs_platform.dev.workload import INITIAL_BALANCE, BankWorkload
from cs_platform.lake.stream_lake import Lake
from cs_platform.lake.types import utc
from cs_platform.landing.rows import IDENTITY
from cs_platform.landing.store import LandingStore


@dataclass(frozen=True)
class Landed:
    mods: Counter  # (table, keys json, mod type, commit timestamp) per distinct change identity
    duplicates: int  # rows whose identity (txn, record sequence, mod index) landed before
    files: int
    records_per_txn: dict[str, set[str]]
    expected_records: dict[str, int]


def landed(store: LandingStore, stream: str) -> Landed:
    unique: dict[tuple, tuple] = {}
    rows = store.read(stream).to_pylist()
    records_per_txn: dict[str, set[str]] = defaultdict(set)
    expected: dict[str, int] = {}
    for r in rows:
        identity = tuple(r[c] for c in IDENTITY)
        keys = json.dumps(json.loads(r["keys"]), sort_keys=True)
        unique[identity] = (r["table_name"], keys, r["mod_type"], r["commit_timestamp"])
        records_per_txn[r["server_transaction_id"]].add(r["record_sequence"])
        expected[r["server_transaction_id"]] = r["number_of_records_in_transaction"]
    return Landed(Counter(unique.values()), len(rows) - len(unique), len(store.files(stream)), dict(records_per_txn), expected)


def changelog_mods(lake: Lake, upto: datetime) -> tuple[Counter, int]:
    """The changelog's mods committed up to ``upto``, as :func:`landed` counts them, and how many
    rows repeat an identity (the changelog must hold each change once)."""
    table = lake.changelog.table()
    repeated = table.groupBy(*IDENTITY).count().where("count > 1").count()
    rows = table.select("table_name", "keys", "mod_type", "commit_timestamp").collect()
    mods = Counter(
        (r.table_name, json.dumps(json.loads(r.keys), sort_keys=True), r.mod_type, utc(r.commit_timestamp))
        for r in rows
        if utc(r.commit_timestamp) <= upto
    )
    return mods, repeated


def committed(workload: BankWorkload, end: datetime, start: datetime | None = None) -> Counter:
    """Every mod the workload committed after the stream's start, up to its end timestamp: (start,
    end] (the stream reads no other; commits up to the start reach the lake through the snapshot)."""
    return Counter(
        (m.table, m.keys, m.mod_type, t.commit_timestamp)
        for t in workload.committed
        if t.commit_timestamp <= end and (start is None or t.commit_timestamp > start)
        for m in t.mods
    )


def bank_source_at(database: Database, cut: datetime) -> tuple[dict, dict]:
    """Accounts (id -> balance) and Transfers (id -> from, to, amount) read from Spanner at ``cut``."""
    with database.snapshot(read_timestamp=cut) as snapshot:
        accounts = {r[0]: r[1] for r in snapshot.execute_sql("SELECT `AccountId`, `Balance` FROM `Accounts`")}
    with database.snapshot(read_timestamp=cut) as snapshot:
        transfers = {r[0]: tuple(r[1:]) for r in snapshot.execute_sql("SELECT `TransferId`, `FromAccount`, `ToAccount`, `Amount` FROM `Transfers`")}
    return accounts, transfers


def spread(cuts: list[datetime]) -> list[datetime]:
    """The first, the middle and the last of ``cuts``: what a test whose concern is not every cut
    (a drain, a fenced run, a deployment) checks with the bank oracle. Each cut costs a read of
    the source at its timestamp and two of the lake: tens of cuts took minutes on a loaded machine,
    and every cut of a stream is the bank oracle test's own concern (lake/test_bank_oracle.py)."""
    return sorted({cuts[0], cuts[len(cuts) // 2], cuts[-1]}) if cuts else []


def check_bank_cut(lake: Lake, database: Database, cut: datetime) -> None:
    """The bank oracle at one published cut (AssertionError naming the cut otherwise):

    - the Accounts mirror sums to 1000 x accounts (no transfer is half visible);
    - each balance equals 1000 + incoming - outgoing by the Transfers mirror at the same cut (the two
      tables agree: a transaction is visible across tables entirely or not at all);
    - both mirrors equal the source read at the cut timestamp (TIMESTAMP columns are left out: the
      emulator truncates them, see shared/EMULATOR.md).
    """
    mirrors = lake.mirrors_at_cut(cut)
    accounts = {r.AccountId: r.Balance for r in mirrors["Accounts"].collect()} if "Accounts" in mirrors else {}
    transfers = {r.TransferId: (r.FromAccount, r.ToAccount, r.Amount) for r in mirrors["Transfers"].collect()} if "Transfers" in mirrors else {}
    assert sum(accounts.values()) == INITIAL_BALANCE * len(accounts), f"cut {cut}: money created or lost"
    flow: dict[str, int] = defaultdict(int)
    for source, target, amount in transfers.values():
        flow[source] -= amount
        flow[target] += amount
    assert all(balance == INITIAL_BALANCE + flow[a] for a, balance in accounts.items()), f"cut {cut}: tables disagree"
    assert (accounts, transfers) == bank_source_at(database, cut), f"cut {cut}: mirror != source"
