"""What landed vs what the bank workload committed: the no-loss oracle of the demo and the tests."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime

from cs_platform.dev.workload import BankWorkload
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


def committed(workload: BankWorkload, end: datetime, start: datetime | None = None) -> Counter:
    """Every mod the workload committed from the stream's start to its end timestamp (the stream
    reads no other; earlier commits reach the lake through the snapshot)."""
    return Counter(
        (m.table, m.keys, m.mod_type, t.commit_timestamp)
        for t in workload.committed
        if t.commit_timestamp <= end and (start is None or t.commit_timestamp >= start)
        for m in t.mods
    )
