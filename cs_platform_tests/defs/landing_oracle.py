"""Assert that what landed matches what the bank workload committed, and read the runs' history back."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from dagster import AssetKey, DagsterInstance

from cs_platform.dev.oracle import Landed, committed, landed
from cs_platform.dev.workload import BankWorkload
from cs_platform.landing.store import LandingStore

ASSET = AssetKey(["bank_stream", "landed_changes"])


def assert_no_loss(root: Path, workload: BankWorkload, end: datetime) -> Landed:
    result = landed(LandingStore(str(root)), "BankStream")
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
    landed_chunks: int
    yielded: bool


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
                landed_chunks=meta["landed_chunks"].value,
                yielded=meta["yielded_slot"].value,
            )
        )
    return sorted(found, key=lambda r: (r.partition_key, r.query_start))


def observed_landing_paths(instance: DagsterInstance) -> set[str]:
    """Every file a run reported landing, whichever chunk of its read it was (a run's
    materialization names only its last)."""
    return {event.asset_observation.metadata["landing_path"].value for event in instance.fetch_observations(ASSET, limit=10_000).records}


@dataclass(frozen=True)
class LandingReport:
    """One observation of landed files: the UI's view of a live run's progress."""

    at: float  # when it was recorded (epoch seconds)
    files: int  # the files it covers: those landed since the run's previous report
    so_far: int  # the files the run had landed by then


def landing_observations(instance: DagsterInstance) -> dict[str, list[LandingReport]]:
    """Per run, its observations of landed files, in order."""
    found = defaultdict(list)
    for event in sorted(instance.fetch_observations(ASSET, limit=10_000).records, key=lambda e: e.timestamp):
        meta = event.asset_observation.metadata
        found[event.run_id].append(LandingReport(event.timestamp, meta["landed_files"].value, meta["landed_chunks_so_far"].value))
    return dict(found)
