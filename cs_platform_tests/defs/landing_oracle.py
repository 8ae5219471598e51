"""Compare what landed with what the bank workload committed, and read the runs' history back."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from dagster import AssetKey, DagsterInstance

from cs_platform.dev.workload import BankWorkload
from cs_platform.landing.store import LandingStore

ASSET = AssetKey(["bank_stream", "landed_changes"])


@dataclass(frozen=True)
class Landed:
    mods: Counter  # (table, keys json, mod type, commit timestamp) per distinct change identity
    duplicates: int  # rows whose identity (txn, record sequence, mod index) landed before
    records_per_txn: dict[str, set[str]]
    expected_records: dict[str, int]


def landed(root: Path) -> Landed:
    unique: dict[tuple, tuple] = {}
    rows = LandingStore(str(root)).read("BankStream").to_pylist()
    records_per_txn: dict[str, set[str]] = defaultdict(set)
    expected: dict[str, int] = {}
    for r in rows:
        identity = (r["server_transaction_id"], r["record_sequence"], r["mod_index"])
        keys = json.dumps(json.loads(r["keys"]), sort_keys=True)
        unique[identity] = (r["table_name"], keys, r["mod_type"], r["commit_timestamp"])
        records_per_txn[r["server_transaction_id"]].add(r["record_sequence"])
        expected[r["server_transaction_id"]] = r["number_of_records_in_transaction"]
    return Landed(Counter(unique.values()), len(rows) - len(unique), dict(records_per_txn), expected)


def committed(workload: BankWorkload, end: datetime) -> Counter:
    """Every mod the workload committed up to the stream's end timestamp (later ones are not read)."""
    return Counter(
        (m.table, m.keys, m.mod_type, t.commit_timestamp) for t in workload.committed if t.commit_timestamp <= end for m in t.mods
    )


def assert_no_loss(root: Path, workload: BankWorkload, end: datetime) -> Landed:
    result = landed(root)
    expected = committed(workload, end)
    assert result.mods == expected, f"missing {expected - result.mods}, unexpected {result.mods - expected}"
    assert all(len(seqs) == result.expected_records[t] for t, seqs in result.records_per_txn.items())
    return result


@dataclass(frozen=True)
class Read:
    """One materialization of a token partition, as its metadata reports it."""

    partition_key: str
    run_id: str
    query_start: datetime
    watermark: datetime
    replay: bool
    records: int
    landing_path: str | None


def reads(instance: DagsterInstance) -> list[Read]:
    found = []
    for event in instance.fetch_materializations(ASSET, limit=10_000).records:
        m = event.asset_materialization
        meta = m.metadata
        found.append(
            Read(
                partition_key=m.partition,
                run_id=event.run_id,
                query_start=datetime.fromtimestamp(meta["query_start"].value, timezone.utc),
                watermark=datetime.fromtimestamp(meta["watermark"].value, timezone.utc),
                replay=meta["replay"].value,
                records=meta["records"].value,
                landing_path=meta["landing_path"].value if "landing_path" in meta else None,
            )
        )
    return sorted(found, key=lambda r: (r.partition_key, r.query_start))
