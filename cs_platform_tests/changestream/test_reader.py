"""PartitionReader against the emulator: errors with clear messages, early ends, chunks and live tails
(faults and retries through the real client: test_faults.py)."""

import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from google.cloud.spanner_v1 import RequestOptions

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.errors import (
    DatabaseNotFoundError,
    InvalidPartitionTokenError,
    PartitionEndedWithoutChildrenError,
    StartTimestampOutOfRangeError,
    UnknownChangeStreamError,
)
from cs_platform.changestream.metadata import ONE_MICROSECOND, PartitionMetadataStore, PartitionState, utc_now
from cs_platform.changestream.query import ChangeStreamQuery, RpcPriority
from cs_platform.changestream.reader import MIN_WINDOW, PartitionReader, RetryPolicy, _Progress, narrowed_window
from cs_platform.changestream.tail import POLLING, STREAMING
from cs_platform.dev.workload import BANK_TABLES_DDL, BankWorkload, bank_stream_ddl, key_json
from cs_platform.errors import TerminalError
from cs_platform.landing.store import LandingStore, landed_name
from cs_platform_tests.conftest import INSTANCE, PROJECT
from cs_platform_tests.landing.test_store import record


@pytest.fixture
def bank(make_database):
    return make_database(BANK_TABLES_DDL + [bank_stream_ddl("BankStream")])


def make_reader(
    db, metadata_database, stream="BankStream", retry=RetryPolicy(initial_backoff_s=0.01), table="Meta", tail=STREAMING
):
    store = PartitionMetadataStore(metadata_database, table)
    return PartitionReader(db, ChangeStreamQuery(stream, heartbeat_millis=500), store, retry, tail), store


def read_initial(reader, store, start, end=None):
    store.initialize(start, end, 500)
    return reader.read(store.get("initial"), timedelta(seconds=5))


def test_unknown_stream_is_named(bank, metadata_database):
    reader, store = make_reader(bank, metadata_database, stream="NoSuchStream")
    with pytest.raises(UnknownChangeStreamError, match="'NoSuchStream' does not exist.*CREATE CHANGE STREAM"):
        read_initial(reader, store, utc_now())


def test_start_before_stream_creation_is_named(bank, metadata_database):
    reader, store = make_reader(bank, metadata_database)
    with pytest.raises(StartTimestampOutOfRangeError, match="outside what Spanner can serve.*retention"):
        read_initial(reader, store, utc_now() - timedelta(days=2))


def test_invalid_token_is_named(bank, metadata_database):
    reader, store = make_reader(bank, metadata_database)
    start = utc_now()
    read_initial(reader, store, start)
    bogus = store.get("initial")
    bogus = type(bogus)(**{**bogus.__dict__, "token": "bm90LWEtcmVhbC10b2tlbg=="})
    with pytest.raises(InvalidPartitionTokenError, match="rejected the token.*drop the metadata table"):
        reader.read(bogus, timedelta(seconds=2))


@pytest.mark.parametrize("instance_id, database_id, match", [("no-such-instance", "db", "instance 'no-such-instance'"), (INSTANCE, "no-such-db", "database 'no-such-db'")])
def test_unknown_instance_or_database_is_named(emulator, instance, instance_id, database_id, match):
    with pytest.raises(DatabaseNotFoundError, match=match):
        SpannerTarget(PROJECT, instance_id, database_id, emulator.host).connect()


def test_query_ending_early_without_children_is_an_error_not_finished(bank, metadata_database):
    """Debezium lost partitions by treating such an end as FINISHED."""
    reader, store = make_reader(bank, metadata_database)
    store.initialize(utc_now(), None, 500)

    def truncated(partition, s, e):
        return iter(())

    reader._records = truncated
    with pytest.raises(PartitionEndedWithoutChildrenError, match="without reporting child partitions") as e:
        reader.read(store.get("initial"), timedelta(seconds=30))
    assert isinstance(e.value, TerminalError)
    assert store.get("initial").state is PartitionState.CREATED


def test_soft_timeout_ends_on_exact_watermark_and_resumes(bank, metadata_database):
    reader, store = make_reader(bank, metadata_database)
    start = utc_now()
    batch = read_initial(reader, store, start)
    assert batch.finished and len(batch.children) >= 2
    store.record_progress("initial", batch.watermark, True, owner=None)
    child = store.schedulable()[0]
    before = utc_now()
    first = reader.read(child, timedelta(seconds=1))
    assert not first.finished or first.children
    if not first.finished:
        assert first.watermark >= before + timedelta(seconds=1) - timedelta(milliseconds=200)
        store.record_progress(child.token, first.watermark, False, owner=None)
        resumed = store.get(child.token)
        assert resumed.watermark == first.watermark
        second = reader.read(resumed, timedelta(seconds=1))
        assert second.query_start == first.watermark + timedelta(microseconds=1)


def test_polling_sends_only_windows_already_past_and_ends_on_the_deadline(bank, metadata_database, emulator):
    """The emulator drops commits on its internal scan boundaries when a query's end is still ahead
    (``tail`` module); polling must only ever ask for windows that have settled, lose nothing, and
    still end the read exactly on its soft deadline."""
    assert SpannerTarget(PROJECT, INSTANCE, "any", emulator.host).live_tail is POLLING
    assert SpannerTarget(PROJECT, INSTANCE, "any").live_tail is STREAMING
    reader, store = make_reader(bank, metadata_database, table="MetaPolling", tail=POLLING)
    sent = []
    original = reader._records

    def recording_records(partition, s, e):
        sent.append((partition.token, utc_now(), s, e))
        return original(partition, s, e)

    reader._records = recording_records
    start = utc_now()
    store.initialize(start, None, 500)
    store.record_progress("initial", reader.read(store.get("initial"), timedelta(seconds=5)).watermark, True, owner=None)
    workload = BankWorkload(bank)
    writer = threading.Thread(target=workload.run, args=(5, 150), kwargs={"progress_every": 0})
    writer.start()
    batches = [reader.read(child, timedelta(seconds=3)) for child in store.schedulable()]
    writer.join()

    for token, at, s, e in sent:
        assert e <= at - POLLING.settle, f"window ending {e} sent at {at}: not settled"
    for batch in batches:
        windows = [(s, e) for token, _, s, e in sent if token == batch.partition_token]
        assert windows[0][0] == batch.query_start
        assert all(s == e_prev + timedelta(microseconds=1) for (_, e_prev), (s, _) in zip(windows, windows[1:]))
        if not batch.finished:
            assert len(windows) >= 3 and batch.watermark == windows[-1][1] == batch.query_end
    # Every mod committed up to the lowest watermark was read, once.
    low = min(b.watermark for b in batches)
    read = Counter(
        (r.table_name, key_json(**m.keys), r.mod_type.value, r.commit_timestamp)
        for b in batches
        for r in b.records
        if r.commit_timestamp <= low
        for m in r.mods
    )
    committed = Counter(
        (m.table, m.keys, m.mod_type, t.commit_timestamp) for t in workload.committed if t.commit_timestamp <= low for m in t.mods
    )
    assert sum(committed.values()) > 100
    assert read == committed, f"missing {committed - read}, extra {read - committed}"


def test_every_request_carries_the_configured_priority(bank, metadata_database):
    """The requests reach the emulator (which serves them; it does not schedule by priority) with
    the priority set: change stream query, metadata reads and queries, commits."""
    start = utc_now()
    BankWorkload(bank).create_account()  # something to read (not a request of ours)
    sent: list[tuple[str, object]] = []
    for database in (bank, metadata_database):
        api = database.spanner_api
        for method in ("execute_streaming_sql", "streaming_read", "commit", "execute_sql"):
            def spy(*args, _call=getattr(api, method), _method=method, **kwargs):
                sent.append((_method, kwargs.get("request", args[0] if args else None)))
                return _call(*args, **kwargs)

            setattr(api, method, spy)
    store = PartitionMetadataStore(metadata_database, "Prioritized", priority=RpcPriority.LOW)
    reader = PartitionReader(bank, ChangeStreamQuery("BankStream", heartbeat_millis=500), store, priority=RpcPriority.LOW)
    batch = read_initial(reader, store, start)
    store.record_progress("initial", batch.watermark, batch.finished, owner=None)
    store.unfinished()
    store.delete_finished(timedelta(0))
    methods = Counter(method for method, _ in sent)
    assert {"execute_streaming_sql", "streaming_read", "commit"} <= set(methods), methods
    assert any("READ_BankStream" in request.sql for method, request in sent if method == "execute_streaming_sql")
    other = [(method, request) for method, request in sent if request.request_options.priority != RequestOptions.Priority.PRIORITY_LOW]
    assert not other, f"requests sent without the priority: {other}"


def test_a_read_in_chunks_hands_out_every_record_once_and_never_splits_a_commit(bank, metadata_database):
    reader, store = make_reader(bank, metadata_database)
    start = utc_now()
    store.initialize(start, None, 500)
    BankWorkload(bank).run(5, 40, progress_every=0)
    store.record_progress("initial", reader.read(store.get("initial"), timedelta(seconds=2)).watermark, True, owner=None)
    children = store.schedulable()
    whole = {c.token: reader.read(c, timedelta(seconds=1)) for c in children}
    data = max(children, key=lambda c: len(whole[c.token].records))  # the emulator puts the data in one
    chunks = list(reader.read_chunks(data, timedelta(seconds=1), chunk_mods=10))

    assert len(chunks) >= 3 and all(c.records for c in chunks[:-1])
    identity = [(r.server_transaction_id, r.record_sequence) for c in chunks for r in c.records]
    assert identity == [(r.server_transaction_id, r.record_sequence) for r in whole[data.token].records]
    assert chunks[0].query_start == data.watermark + ONE_MICROSECOND
    for before, after in zip(chunks, chunks[1:]):
        assert not before.finished and not before.children
        assert all(r.commit_timestamp <= before.watermark for r in before.records)
        assert all(r.commit_timestamp > before.watermark for r in after.records)  # no commit split between chunks
        assert after.query_start == before.watermark + ONE_MICROSECOND
    # Memory holds about one chunk: a chunk is cut as soon as 10 mods are pending and some are safe.
    largest_record = max(len(r.mods) for c in chunks for r in c.records)
    assert all(c.mod_count < 10 + largest_record for c in chunks)


def test_a_transaction_larger_than_a_chunk_is_handed_out_in_pieces_that_a_re_read_names_alike(bank, metadata_database, tmp_path):
    """Memory holds about one chunk even when one transaction alone outgrows it: its mods go out in
    pieces whose watermark waits just below the transaction, each naming how many of its mods it
    reaches; a re-read from there (a crash or a retry) returns them in the same order, so a piece
    of the re-read reaches no further than the piece of the first read with the same count, and
    the landing names sort in the order of what they reach (what the changelog's marks rely on)."""
    reader, store = make_reader(bank, metadata_database)
    start = utc_now()
    store.initialize(start, None, 500)
    workload = BankWorkload(bank, seed=7)
    workload.run(4, 3, progress_every=0)
    workload.audit_all(300)  # 604 mods: 4 account updates, 300 transfers, 300 audit events
    workload.run(0, 3, progress_every=0)
    big = workload.committed[-4]
    store.record_progress("initial", reader.read(store.get("initial"), timedelta(seconds=2)).watermark, True, owner=None)
    children = store.schedulable()
    whole = {c.token: reader.read(c, timedelta(seconds=1)) for c in children}
    data = next(c for c in children if any(r.commit_timestamp == big.commit_timestamp for r in whole[c.token].records))
    chunks = list(reader.read_chunks(data, timedelta(seconds=1), chunk_mods=100))

    identity = [(r.server_transaction_id, r.record_sequence) for c in chunks for r in c.records]
    assert identity == [(r.server_transaction_id, r.record_sequence) for r in whole[data.token].records]
    at_big = [len(r.mods) for r in whole[data.token].records if r.commit_timestamp == big.commit_timestamp]
    assert sum(at_big) == len(big.mods) == 604
    pieces = [c for c in chunks if c.mods_past_watermark]
    assert len(pieces) >= 2, [(c.mod_count, c.mods_past_watermark) for c in chunks]
    reached = 0
    for piece in pieces:
        assert piece.watermark == big.commit_timestamp - ONE_MICROSECOND and not piece.finished
        reached += sum(len(r.mods) for r in piece.records if r.commit_timestamp == big.commit_timestamp)
        assert piece.mods_past_watermark == reached
    after_pieces = chunks[chunks.index(pieces[-1]) + 1]
    assert after_pieces.watermark >= big.commit_timestamp and not after_pieces.mods_past_watermark  # the chunk that completes it
    assert reached + sum(len(r.mods) for r in after_pieces.records if r.commit_timestamp == big.commit_timestamp) == len(big.mods)
    assert all(c.mod_count < 100 + max(at_big) for c in chunks)  # a chunk, or a piece, and the record that filled it
    for before, after in zip(chunks, chunks[1:]):
        assert after.query_start == before.watermark + ONE_MICROSECOND

    landing = LandingStore(str(tmp_path))
    names = [os.path.basename(landing.write("BankStream", data.key, c).path) for c in chunks if c.records]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert [landed_name(n).piece for n in names if landed_name(n).piece] == [p.mods_past_watermark for p in pieces]

    # A re-read from the first piece's watermark, in larger chunks: one piece, reaching further.
    store.record_progress(data.token, pieces[0].watermark, False, owner=None)
    again = list(reader.read_chunks(store.get(data.token), timedelta(seconds=1), chunk_mods=400))
    first_mods = [m for c in chunks for r in c.records if r.commit_timestamp == big.commit_timestamp for m in r.mods]
    for piece in (c for c in again if c.mods_past_watermark):
        mods = [m for r in piece.records for m in r.mods]
        assert mods == first_mods[: piece.mods_past_watermark]  # the first n mods of the transaction, as the first read had them
        name = os.path.basename(landing.path_for("BankStream", data.key, piece))
        for other in (n for n in names if landed_name(n).piece and landed_name(n).piece != piece.mods_past_watermark):
            assert (name < other) == (piece.mods_past_watermark < landed_name(other).piece)  # equal counts reach the same mods
    assert [(r.server_transaction_id, r.record_sequence) for c in again for r in c.records] == [
        (r.server_transaction_id, r.record_sequence) for r in whole[data.token].records if r.commit_timestamp >= big.commit_timestamp
    ]


def test_each_huge_transaction_counts_its_pieces_from_its_own_first_mod():
    """Two huge transactions back to back, the first one's last piece holding all of it: the
    second's pieces count from its own first mod, not on from the first's (recorded-shape records,
    arriving as the reader applies them: each moves the watermark just below its timestamp)."""
    t1 = utc_now()
    t2 = t1 + timedelta(milliseconds=3)
    progress = _Progress(watermark=t1 - timedelta(seconds=1), chunk_start=t1 - timedelta(seconds=1) + ONE_MICROSECOND)
    handed_out = []
    for ts, mods in [(t1, 60), (t1, 60), (t2, 70), (t2, 50)]:
        progress.records.append(record("00000000", mods, ts))
        progress.mods += mods
        progress.watermark = max(progress.watermark, ts - ONE_MICROSECOND)
        while progress.chunk_due(100, None):
            records, reached = progress.take_records(100)
            handed_out.append((records[0].commit_timestamp, sum(len(r.mods) for r in records), reached))
    assert handed_out == [(t1, 120, 120), (t2, 120, 120)]
    assert progress.watermark == t2 - ONE_MICROSECOND and progress.chunk_start == t2


def test_a_window_too_large_for_the_server_is_halved_down_to_the_narrowest_and_only_that_one_failing_is_an_error():
    ms = timedelta(milliseconds=1)
    assert narrowed_window(1000 * ms) == 500 * ms
    # The last 150 ms of a query's window failed: tried again in 100 ms, not given up on (a
    # loaded reader of the fault tests reached its window's end late and stopped there).
    assert narrowed_window(150 * ms) == MIN_WINDOW == 100 * ms
    assert narrowed_window(MIN_WINDOW) is None and narrowed_window(50 * ms) is None
    windows, failed = [], 8000 * ms  # every window fails: halved down to 100 ms, then the error
    while (failed := narrowed_window(failed)) is not None:
        windows.append(failed)
    assert windows[-1] == MIN_WINDOW and windows[-2] == 125 * ms and len(windows) == 7


@pytest.mark.parametrize("tail", [STREAMING, POLLING], ids=["streaming", "polling"])
def test_a_live_read_lands_at_every_interval_with_or_without_data(bank, metadata_database, tail):
    reader, store = make_reader(bank, metadata_database, tail=tail)
    start = utc_now()
    store.initialize(start, None, 500)
    store.record_progress("initial", reader.read(store.get("initial"), timedelta(seconds=2)).watermark, True, owner=None)
    stop = threading.Event()
    writer = threading.Thread(target=BankWorkload(bank).run_until, args=(start + timedelta(minutes=5), 20), kwargs={"stop": stop})
    writer.start()
    try:
        children = store.schedulable()
        # Side by side, live: a partition lives 6-12 s on this emulator, and the read follows it.
        with ThreadPoolExecutor(len(children)) as pool:
            running = {
                c.token: pool.submit(lambda c=c: list(reader.read_chunks(c, timedelta(seconds=30), None, timedelta(seconds=0.5))))
                for c in children
            }
            reads = {token: future.result() for token, future in running.items()}
    finally:
        stop.set()
        writer.join()

    for child in children:
        chunks = reads[child.token]
        assert chunks[-1].finished and not any(c.finished for c in chunks[:-1])
        # Every chunk but the last was cut by the interval, once the watermark moved, data or not.
        assert len(chunks) >= 2, [(len(c.records), c.watermark) for c in chunks]
        assert chunks[0].query_start == child.reads_from and chunks[0].watermark >= chunks[0].query_start
        for before, after in zip(chunks, chunks[1:]):
            assert after.query_start == before.watermark + ONE_MICROSECOND
            assert after.finished or after.watermark >= after.query_start  # an interval's chunk: the watermark moved
            assert all(r.commit_timestamp <= before.watermark for r in before.records)
            assert all(r.commit_timestamp > before.watermark for r in after.records)  # no commit split between chunks
        # The chunks together are the partition's whole read.
        whole = reader.read(child, timedelta(seconds=30))
        assert [(r.server_transaction_id, r.record_sequence) for c in chunks for r in c.records] == [
            (r.server_transaction_id, r.record_sequence) for r in whole.records
        ]
    assert any(c.records for chunks in reads.values() for c in chunks[:-1]), "no chunk of data before a read's end"
    assert any(not c.records for chunks in reads.values() for c in chunks[:-1]), "no chunk of heartbeats alone"


@pytest.mark.parametrize("tail", [STREAMING, POLLING], ids=["streaming", "polling"])
def test_a_drained_read_hands_out_what_it_read_and_a_re_read_goes_on_from_its_watermark(bank, metadata_database, tail):
    """``stop`` set while a read goes on (a run asked to end): the read ends at its next response
    (streaming) or window (polling) with a last chunk of what is safe below the watermark, not
    finished; a read from that watermark holds the rest, each record once."""
    reader, store = make_reader(bank, metadata_database, tail=tail)
    start = utc_now()
    store.initialize(start, None, 500)
    store.record_progress("initial", reader.read(store.get("initial"), timedelta(seconds=2)).watermark, True, owner=None)
    workload, writing, drainers = BankWorkload(bank), threading.Event(), []
    writer = threading.Thread(target=workload.run_until, args=(start + timedelta(minutes=5), 20), kwargs={"stop": writing})
    writer.start()

    def drain_after_more_commits(drain: threading.Event, committed: int) -> None:
        while len(workload.committed) < committed + 10 and not writing.is_set():
            time.sleep(0.05)
        drain.set()

    try:
        for _ in range(10):  # a partition lives 6-12 s here: one that ends before the drain is no test of it
            child = store.schedulable()[0]
            drain, chunks = threading.Event(), []
            for chunk in reader.read_chunks(child, timedelta(seconds=30), None, timedelta(seconds=60), stop=drain):
                chunks.append(chunk)  # drained once the writer committed more since this chunk
                drainers.append(threading.Thread(target=drain_after_more_commits, args=(drain, len(workload.committed))))
                drainers[-1].start()
            store.record_progress(child.token, chunks[-1].watermark, chunks[-1].finished, owner=None)
            if not chunks[-1].finished:
                break
        else:
            pytest.fail("every partition ended before its read was drained")
    finally:
        writing.set()
        writer.join()
        for drainer in drainers:
            drainer.join()
    first, drained = chunks
    assert drained.watermark >= first.watermark and drained.query_start == first.watermark + ONE_MICROSECOND
    rest = reader.read(store.get(child.token), timedelta(seconds=30))  # to the partition's end (it churns)
    assert rest.finished and rest.query_start == drained.watermark + ONE_MICROSECOND
    whole = reader.read(child, timedelta(seconds=30))
    assert [(r.server_transaction_id, r.record_sequence) for r in (*first.records, *drained.records, *rest.records)] == [
        (r.server_transaction_id, r.record_sequence) for r in whole.records
    ]


def test_a_read_lands_its_first_chunk_once_caught_up_not_an_interval_after_it_began(bank, metadata_database):
    """A partition that was not being read (here a new child) holds every cut back, so its read
    hands out a first chunk as soon as its watermark is near now, then one per interval: with an
    hour's interval, that first chunk is the only one before the read's end."""
    reader, store = make_reader(bank, metadata_database)
    store.initialize(utc_now(), None, 500)
    store.record_progress("initial", reader.read(store.get("initial"), timedelta(seconds=2)).watermark, True, owner=None)
    child = store.schedulable()[0]
    chunks = list(reader.read_chunks(child, timedelta(seconds=30), None, timedelta(hours=1)))
    assert [c.finished for c in chunks] == [False, True], [(len(c.records), c.watermark) for c in chunks]
    assert chunks[0].watermark >= chunks[0].query_start == child.reads_from
    assert chunks[1].query_start == chunks[0].watermark + ONE_MICROSECOND
