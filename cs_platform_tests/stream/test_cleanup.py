"""The order of a cleanup pass, on a real metadata table and landing directory, with the
orchestrator's storage held in memory (``defs/test_cleanup.py`` runs the pass on a real Dagster
instance, SIGKILLed after each step)."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN, PartitionMetadataStore, utc_now
from cs_platform.changestream.records import ChildPartition, ChildPartitionsRecord
from cs_platform.landing.store import LandingStore
from cs_platform.stream.cleanup import Retention, clean_up

NOW = timedelta(0)


@dataclass
class RunsInMemory:
    """``cleanup.RunRecords`` over plain lists, recording each call in order."""

    keys: list[str]
    ended: dict[str, int]  # job -> runs that ended before the retention
    calls: list[str] = field(default_factory=list)

    def partition_keys(self) -> list[str]:
        self.calls.append("list keys")
        return list(self.keys)

    def delete_partition_key(self, key: str) -> None:
        self.calls.append(f"delete key {key}")
        self.keys.remove(key)

    def delete_ended_runs(self, job: str, ended_before: datetime) -> tuple[int, int]:
        self.calls.append(f"delete runs of {job}")
        removed, self.ended[job] = self.ended[job], 0
        return removed, 0


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, line: str) -> None:
        self.lines.append(line)


def test_a_pass_removes_a_finished_partitions_row_then_its_key_then_old_runs(metadata_database, tmp_path):
    store = PartitionMetadataStore(metadata_database, "Cleaned")
    start = utc_now() - timedelta(minutes=5)
    store.initialize(start, None, 1000)
    store.add_children(ChildPartitionsRecord(INITIAL_PARTITION_TOKEN, start, "1", (ChildPartition("child", (INITIAL_PARTITION_TOKEN,)),)), None, 1000)
    for token in (INITIAL_PARTITION_TOKEN, "child"):
        store.take(token, "reader")
        store.record_progress(token, utc_now(), True, "reader")
    child = store.get("child")
    runs = RunsInMemory(keys=[child.key, "gone-long-ago"], ended={"read": 3, "lake": 1})
    log = Log()

    result = clean_up(
        "Stream", store, runs, ("read", "lake"), LandingStore(str(tmp_path / "landing")), str(tmp_path / "lake"),
        Retention(metadata=NOW, runs=NOW, landing=NOW), log,
    )

    # The row went first, so its key, looked up after, is an orphan in the same pass. The initial
    # partition's row stays for the stream's life (it holds the stream's start).
    assert [p.token for p in store.all()] == [INITIAL_PARTITION_TOKEN]
    assert runs.calls == [
        "list keys", f"delete key {child.key}", "delete key gone-long-ago", "delete runs of read", "delete runs of lake",
    ]
    assert (result.partitions_removed, result.partition_keys_removed, result.runs_removed, result.runs_left) == (1, 2, 4, 0)
    assert result.landing.files == 0  # the lake ingested nothing: no landing file may go
    assert log.lines[0] == "removed 1 FINISHED partitions from Cleaned"


def test_a_key_whose_partition_is_still_in_the_table_stays(metadata_database, tmp_path):
    store = PartitionMetadataStore(metadata_database, "Kept")
    store.initialize(utc_now() - timedelta(minutes=5), None, 1000)
    key = store.get(INITIAL_PARTITION_TOKEN).key
    runs = RunsInMemory(keys=[key], ended={"read": 0})

    result = clean_up(
        "Stream", store, runs, ("read",), LandingStore(str(tmp_path / "landing")), str(tmp_path / "lake"),
        Retention(metadata=NOW, runs=NOW, landing=NOW), Log(),
    )

    assert (result.partitions_removed, result.partition_keys_removed) == (0, 0)
    assert runs.keys == [key] and len(store.all()) == 1
