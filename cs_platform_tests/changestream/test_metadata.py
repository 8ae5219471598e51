"""The partition metadata table on the emulator: lifecycle, children, watermarks, detection."""

import re
import threading
from datetime import timedelta

import pytest
from google.cloud import spanner
from google.cloud.spanner_v1 import _helpers as spanner_helpers
from google.cloud.spanner_v1 import session as spanner_session

from cs_platform.changestream.errors import (
    FencedOffError,
    InvalidIdentifierError,
    PartitionNotFoundError,
    SettingsDriftError,
)
from cs_platform.changestream.metadata import (
    ABORTED_RETRY_DELAY_SECONDS,
    INITIAL_PARTITION_TOKEN,
    ONE_MICROSECOND,
    PartitionMetadataStore,
    PartitionState,
    utc_now,
)
from cs_platform.changestream.records import ChildPartition, ChildPartitionsRecord
from cs_platform.errors import InvalidArgumentError

S = PartitionState


@pytest.fixture
def store(metadata_database):
    return PartitionMetadataStore(metadata_database, "PartitionMetadata")


def children(parent: str, start, *tokens_and_parents) -> ChildPartitionsRecord:
    return ChildPartitionsRecord(
        parent, start, "00000001", tuple(ChildPartition(t, tuple(ps)) for t, ps in tokens_and_parents)
    )


def test_initialize_once_and_restart_is_a_noop(store):
    start = utc_now()
    assert store.initialize(start, None, 1000) is True
    (initial,) = store.all()
    assert initial.token == INITIAL_PARTITION_TOKEN and initial.state is S.CREATED
    assert initial.watermark == start - ONE_MICROSECOND and initial.created_at is not None
    # A restart with the existing table neither fails nor re-initializes (Beam #32509), whether it
    # configures the same start or none ("now" only applies to a new table).
    assert store.initialize(start, None, 1000) is False
    assert store.initialize(None, None, 1000) is False
    assert store.all() == [initial]


def test_a_start_or_end_that_drifted_from_the_table_is_an_error_naming_both(store):
    start = utc_now()
    store.initialize(start, None, 1000)
    later = start + timedelta(seconds=5)
    with pytest.raises(SettingsDriftError, match=rf"start {re.escape(later.isoformat())} but metadata table \w+ has {re.escape(start.isoformat())}") as drift:
        store.initialize(later, None, 1000)
    # The core names its own arguments; the settings layer names the variables (test_first_tick).
    assert drift.value.fixed_by == ("start", "start_over") and "CS_PLATFORM" not in str(drift.value)
    with pytest.raises(SettingsDriftError, match=r"end .* has none.*start the stream over") as drift:
        store.initialize(start, later, 1000)
    assert drift.value.fixed_by == ("end", "start_over")
    assert [p.start_timestamp for p in store.all()] == [start]


def test_initialize_rejects_bad_arguments(store):
    with pytest.raises(InvalidArgumentError, match="heartbeat_millis"):
        store.initialize(utc_now(), None, 50)
    with pytest.raises(InvalidArgumentError, match="before start"):
        store.initialize(utc_now(), utc_now() - timedelta(hours=1), 1000)


def test_table_name_is_validated(metadata_database):
    with pytest.raises(InvalidIdentifierError, match="metadata table name"):
        PartitionMetadataStore(metadata_database, "Meta; DROP TABLE Accounts")


def test_merge_child_reported_by_several_parents_is_inserted_once(store):
    start = utc_now()
    store.initialize(start, None, 1000)
    t1 = start + timedelta(seconds=1)
    store.add_children(children("initial", start, ("a", ["initial"]), ("b", ["initial"])), None, 1000)
    merge = ("m", ["a", "b"])
    inserted = []
    threads = [
        threading.Thread(target=lambda p=p: inserted.append(store.add_children(children(p, t1, merge), None, 1000)))
        for p in ("a", "b", "a", "b")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(inserted) == [0, 0, 0, 1]
    m = store.get("m")
    assert m.parent_tokens == ("a", "b") and m.start_timestamp == t1 and m.watermark == t1 - ONE_MICROSECOND


def test_states_never_go_backwards_and_are_stamped(store):
    store.initialize(utc_now(), None, 1000)
    assert store.transition(["initial"], S.RUNNING) == 1
    assert store.transition(["initial"], S.SCHEDULED) == 0  # backwards: refused
    assert store.get("initial").state is S.RUNNING
    store.record_progress("initial", utc_now(), finished=True, owner=None)
    assert store.transition(["initial"], S.RUNNING) == 0
    p = store.get("initial")
    assert p.state is S.FINISHED and p.running_at <= p.finished_at and p.scheduled_at is None


def test_watermark_never_moves_backwards_under_racing_writers(store):
    start = utc_now()
    store.initialize(start, None, 1000)
    marks = [start + timedelta(milliseconds=i) for i in range(1, 41)]
    order = marks[::2] + marks[1::2][::-1]  # interleaved forwards and backwards
    threads = [threading.Thread(target=store.record_progress, args=("initial", w, False, None)) for w in order]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.get("initial").watermark == max(marks)
    store.record_progress("initial", start, False, owner=None)
    assert store.get("initial").watermark == max(marks)


def test_only_the_reader_that_took_a_partition_last_moves_it(store):
    """Fencing (DESIGN invariant 11): a reader presumed dead and replaced moves neither the
    watermark nor the state, however far it read; the owner still does."""
    start = utc_now()
    store.initialize(start, None, 1000)
    taken = store.take("initial", "run-1")
    assert taken.owner == "run-1" and taken.state is S.RUNNING and taken.running_at is not None
    store.record_progress("initial", start + timedelta(seconds=1), False, owner="run-1")
    relaunch = store.take("initial", "run-2")  # the sensor presumed run-1 dead
    assert relaunch.watermark == start + timedelta(seconds=1) and relaunch.running_at == taken.running_at
    with pytest.raises(FencedOffError, match="taken by reader run-2 after this one \\(run-1\\)"):
        store.record_progress("initial", start + timedelta(seconds=9), True, owner="run-1")
    with pytest.raises(FencedOffError):
        store.record_progress("initial", start + timedelta(seconds=9), False, owner=None)
    after = store.get("initial")
    assert after.watermark == start + timedelta(seconds=1) and after.state is S.RUNNING and after.owner == "run-2"
    store.record_progress("initial", start + timedelta(seconds=2), True, owner="run-2")
    assert store.get("initial").state is S.FINISHED
    assert store.take("initial", "run-3").owner == "run-2"  # a FINISHED partition is not taken: nothing moves


def test_a_reader_presumed_dead_adds_no_child_partition_not_even_one_cleanup_deleted(store):
    """Fencing reaches the last write a reader makes (DESIGN invariant 11): a reader presumed dead
    and replaced announces no child, and one whose partition was finished by its replacement and
    deleted by cleanup, meeting a child cleanup deleted too, does not insert it again (at its old
    start it would take the low watermark back). A MUTABLE_KEY_RANGE partition has no parent, so
    cleanup's parent guard does not keep its row: the owner check does the fencing."""
    start = utc_now()
    t1, t2 = start + timedelta(seconds=1), start + timedelta(seconds=2)
    store.initialize(start, None, 1000)
    store.take("initial", "run-1")
    store.add_children(children("initial", start, ("a", ["initial"])), None, 1000, owner="run-1")
    store.take("initial", "run-2")  # run-1 presumed dead
    with pytest.raises(FencedOffError, match="taken by reader run-2 after this one \\(run-1\\)"):
        store.add_children(children("initial", start, ("late", ["initial"])), None, 1000, owner="run-1")
    assert {p.token for p in store.all()} == {"initial", "a"}

    store.add_children(children("initial", start, ("p", [])), None, 1000, owner="run-2")  # a partition start record: no parent
    store.take("p", "run-3")
    store.take("p", "run-4")  # run-3 presumed dead
    store.add_children(children("p", t1, ("c", [])), None, 1000, owner="run-4")
    store.record_progress("p", t1, True, owner="run-4")
    store.take("c", "run-5")
    store.record_progress("c", t2, True, owner="run-5")
    store.delete_finished(timedelta(0))
    assert not {"p", "c"} & {p.token for p in store.all()}
    with pytest.raises(FencedOffError, match="no longer in metadata table"):
        store.add_children(children("p", t1, ("c", [])), None, 1000, owner="run-3")
    with pytest.raises(FencedOffError, match="no longer in metadata table"):
        store.record_progress("p", t2, False, owner="run-3")
    assert not {"p", "c"} & {p.token for p in store.all()}


def test_a_table_of_an_earlier_version_gains_the_owner_column(store):
    start = utc_now()
    old_ddl = [re.sub(r",\s*Owner STRING\(MAX\)", "", store.ddl()[0]), *store.ddl()[1:]]
    store.database.update_ddl(old_ddl).result(timeout=300)
    store.initialize(start, None, 1000)
    assert store.get("initial").owner is None
    store.record_progress("initial", start, False, owner=None)  # an untaken row: no owner to match
    assert store.take("initial", "run-1").owner == "run-1"


def test_progress_for_unknown_partition_is_named(store):
    store.initialize(utc_now(), None, 1000)
    with pytest.raises(PartitionNotFoundError, match="not in metadata table PartitionMetadata"):
        store.record_progress("nope", utc_now(), False, owner=None)


def test_schedulable_waits_for_every_parent_and_low_watermark(store):
    start = utc_now()
    store.initialize(start, None, 1000)
    assert [p.token for p in store.schedulable()] == ["initial"]
    store.add_children(children("initial", start, ("a", ["initial"]), ("b", ["initial"])), None, 1000)
    assert [p.token for p in store.schedulable()] == ["initial"]  # parent not finished yet
    store.record_progress("initial", start, finished=True, owner=None)
    assert {p.token for p in store.schedulable()} == {"a", "b"}
    store.transition(["a", "b"], S.SCHEDULED)
    t1 = start + timedelta(seconds=2)
    store.add_children(children("a", t1, ("m", ["a", "b"])), None, 1000)
    store.record_progress("a", t1 - ONE_MICROSECOND, finished=True, owner=None)
    store.record_progress("b", start + timedelta(seconds=1), finished=False, owner=None)
    assert store.schedulable() == []  # merge child waits for b
    assert store.low_watermark() == start + timedelta(seconds=1)  # b is the slowest unfinished
    store.record_progress("b", t1 - ONE_MICROSECOND, finished=True, owner=None)
    assert [p.token for p in store.schedulable()] == ["m"]
    assert store.low_watermark() == t1 - ONE_MICROSECOND
    store.record_progress("m", t1 + timedelta(seconds=1), finished=True, owner=None)
    assert store.low_watermark() is None


def test_cleanup_keeps_parents_of_unfinished_children(store):
    start = utc_now()
    store.initialize(start, None, 1000)
    store.add_children(children("initial", start, ("a", ["initial"])), None, 1000)
    store.record_progress("initial", start, finished=True, owner=None)
    assert store.delete_finished(timedelta(0)) == []  # "a" still needs its parent
    store.record_progress("a", start, finished=True, owner=None)
    assert store.delete_finished(timedelta(hours=1)) == []  # too recent
    store.add_children(children("a", start, ("b", ["a"]), ("c", ["a"])), None, 1000)
    store.record_progress("b", start, finished=True, owner=None)
    b_key = store.get("b").key
    assert store.delete_finished(timedelta(0)) == [b_key]  # "a" is a parent of the unfinished "c"
    store.record_progress("c", start, finished=True, owner=None)
    keys = {store.get(t).key for t in "ac"}
    assert set(store.delete_finished(timedelta(0), batch_rows=1)) == keys
    assert [p.token for p in store.all()] == ["initial"]  # the stream's anchor stays
    assert store.delete_finished(timedelta(0)) == []  # a repeat finds nothing left to do


def test_a_parent_removed_by_cleanup_counts_as_finished_and_the_merge_child_still_waits_for_the_other(store):
    start = utc_now()
    store.initialize(start, None, 1000)
    store.add_children(children("initial", start, ("a", ["initial"]), ("b", ["initial"])), None, 1000)
    store.record_progress("initial", start, finished=True, owner=None)
    store.transition(["a", "b"], S.RUNNING)
    t1 = start + timedelta(seconds=2)
    store.add_children(children("a", t1, ("m", ["a", "b"])), None, 1000)
    store.record_progress("a", t1 - ONE_MICROSECOND, finished=True, owner=None)
    # Cleanup keeps "a" (a parent of the unfinished "m"); remove it anyway, as a cleanup that did not
    # protect parents would have: the rule must not depend on it.
    assert store.delete_finished(timedelta(0)) == []  # "initial" is a parent of "b", "a" of "m"
    with store.database.batch() as batch:
        batch.delete(store.table, spanner.KeySet(keys=[["a"]]))
    assert {p.token for p in store.all()} == {"initial", "b", "m"}
    assert store.schedulable() == []  # "m" still waits for "b"
    assert store.low_watermark() == start  # "b" holds it: a first partition reads from just after T0
    store.record_progress("b", t1 - ONE_MICROSECOND, finished=True, owner=None)
    assert [p.token for p in store.schedulable()] == ["m"]


def test_a_merge_child_inserted_before_its_other_parent_exists_waits_for_it(store):
    """Cloud Spanner merges partitions of any age: "b" reaches a merge with "a2" and inserts the
    child "m" while "a2", a child of a split of "a" that a's reader has not reached, has no row yet.
    "m" must not be read before "a2" is inserted and read to its end."""
    start = utc_now()
    store.initialize(start, None, 1000)
    store.add_children(children("initial", start, ("a", ["initial"]), ("b", ["initial"])), None, 1000)
    store.record_progress("initial", start, finished=True, owner=None)
    store.transition(["a", "b"], S.RUNNING)
    t1, t2 = start + timedelta(seconds=1), start + timedelta(seconds=2)
    store.add_children(children("b", t2, ("m", ["a2", "b"])), None, 1000)
    store.record_progress("b", t2 - ONE_MICROSECOND, finished=True, owner=None)
    assert store.schedulable() == []  # "a2" has no row yet, and "a" is still before m's start
    store.record_progress("a", t1 - timedelta(milliseconds=1), finished=False, owner=None)
    assert store.schedulable() == []
    store.add_children(children("a", t1, ("a1", ["a"]), ("a2", ["a"])), None, 1000)
    store.record_progress("a", t1 - ONE_MICROSECOND, finished=True, owner=None)
    assert {p.token for p in store.schedulable()} == {"a1", "a2"}  # "m" now waits for "a2" itself
    store.record_progress("a2", t2 - ONE_MICROSECOND, finished=True, owner=None)
    assert {p.token for p in store.schedulable()} == {"a1", "m"}


def test_racing_readers_retry_an_aborted_metadata_transaction_within_milliseconds(store, monkeypatch):
    """Sixteen readers take their partitions and persist watermarks at once: the emulator aborts
    all but one transaction at a time, with no RetryInfo. Each retry waits the store's few
    milliseconds, not the client's own 2**attempts + random() seconds (what a reader waited for its
    partition, 2.5 s), and every watermark still ends where its reader left it."""
    waits = []
    delay_until_retry = spanner_session._delay_until_retry

    def recorded(exc, deadline, attempts, default_retry_delay=None):
        waits.append(spanner_helpers._get_retry_delay(exc.errors[0], attempts, default_retry_delay=default_retry_delay))
        return delay_until_retry(exc, deadline, attempts, default_retry_delay=default_retry_delay)

    monkeypatch.setattr(spanner_session, "_delay_until_retry", recorded)
    start = utc_now()
    store.initialize(start, None, 1000)
    tokens = [f"c{i}" for i in range(16)]
    store.add_children(children(INITIAL_PARTITION_TOKEN, start + timedelta(seconds=1), *[(t, [INITIAL_PARTITION_TOKEN]) for t in tokens]), None, 1000)

    def read(token: str) -> None:
        taken = store.take(token, owner=token)
        for second in range(1, 6):
            store.record_progress(token, taken.watermark + timedelta(seconds=second), False, owner=token)

    threads = [threading.Thread(target=read, args=(t,)) for t in tokens]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert waits, "no transaction aborted: the readers did not race"
    assert max(waits) <= ABORTED_RETRY_DELAY_SECONDS[1], sorted(waits)[-5:]
    reads_from = store.get(tokens[0]).reads_from - ONE_MICROSECOND
    assert all(store.get(t).watermark == reads_from + timedelta(seconds=5) for t in tokens)
