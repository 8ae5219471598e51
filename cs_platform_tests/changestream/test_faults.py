"""Every fault the Cloud Spanner front injects, through the real client library, in streaming mode:
what the reader does with each gRPC status (docs/reader.md, "Errors and retries"), and that a read
which recovers lost and repeated nothing.

The expensive part is shared: one bank workload writes for a few seconds while every row's reader
streams the same range live, side by side, each through a front of its own (``dev/front/server.py``)
with its fault injected mid-stream. A fault fires on a response a query has sent, and a query sends
more than one only while its partition is live: on the suite's emulator, whose partitions end every
6-12 s, a reader slowed by a loaded machine queries partitions that have already ended, each served
whole in one response, and no mid-stream fault ever fires. So the module has an emulator of its own
whose partitions do not churn (churn is not what it tests). Should a read still end first, a row whose faults have not all
fired (or none of whose queries was streamed) when its range ends reads another range, from then on, live,
with a new metadata table, until they have (at most ``ROUNDS`` ranges). Afterwards a clean read of
each range, straight from the emulator and settled, says what each read had to hold in the ranges
it read; each row is then its own test.
"""

from __future__ import annotations

import itertools
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Iterator

import pytest
from grpc import StatusCode

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.errors import DatabaseNotFoundError, ResultTooLargeError
from cs_platform.changestream.metadata import PartitionMetadataStore, PartitionState, utc_now
from cs_platform.changestream.query import ChangeStreamQuery
from cs_platform.changestream.reader import PartitionReader, RetryPolicy
from cs_platform.changestream.tail import STREAMING
from cs_platform.dev.deadline import load_per_core
from cs_platform.dev.emulator import SpannerEmulator
from cs_platform.dev.front.server import OUT_OF_MEMORY, Fault, SpannerFront
from cs_platform.dev.local_runner import LocalRunner
from cs_platform.dev.workload import BANK_TABLES_DDL, BankWorkload, bank_stream_ddl, create_database, create_instance
from cs_platform.errors import TerminalError, TransientError
from cs_platform_tests.conftest import INSTANCE, PROJECT

pytestmark = pytest.mark.xdist_group("faults")  # one worker streams the module's workload once

QUICK = RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.05)
WRITE_SECONDS = 4  # the workload writes for this long, from the reads' start,
MIN_TRANSACTIONS = 45  # and at least this many transactions (20 accounts opened, 25 transfers), however long they take
READ_SECONDS = 8  # the reads stream this long on a quiet machine (longer under load: every read must be live)
MID_STREAM = 2  # a fault fires once a streamed query has sent this many responses (one per settled window)
ROUNDS = 6  # ranges a row may read before its faults must all have fired
READ_LIMIT_SECONDS = 180  # one range's read of one row, scaled by the load; a row whose read takes longer fails alone


@dataclass(frozen=True)
class Row:
    """One line of the table in docs/reader.md: the faults injected, and what must follow."""

    faults: tuple[Fault, ...]
    recovered_by: str | None = None  # client, reader, narrowing, transaction, nobody; None: an error
    error: type[Exception] | None = None
    message: str = ""
    retry: RetryPolicy = QUICK


ROWS = {
    # Recovered. The client library resumes a stream from its last resume token after UNAVAILABLE,
    # and after INTERNAL for a reset stream; the reader retries from its safe watermark.
    "unavailable": Row((Fault(StatusCode.UNAVAILABLE, after_responses=MID_STREAM),), "client"),
    "internal-rst-stream": Row((Fault(StatusCode.INTERNAL, after_responses=MID_STREAM),), "client"),
    "deadline-exceeded": Row((Fault(StatusCode.DEADLINE_EXCEEDED, after_responses=MID_STREAM),), "reader"),
    "resource-exhausted-quota": Row((Fault(StatusCode.RESOURCE_EXHAUSTED, after_responses=MID_STREAM),), "reader"),
    "session-not-found": Row((Fault(StatusCode.NOT_FOUND, after_responses=MID_STREAM),), "reader"),
    "out-of-memory": Row((Fault(StatusCode.RESOURCE_EXHAUSTED, after_responses=MID_STREAM, message=OUT_OF_MEMORY),), "narrowing"),
    "stall": Row((Fault(after_responses=MID_STREAM, delay_s=1.5),), "nobody"),
    "slow-link": Row((Fault(delay_s=0.02, each=True),), "nobody"),
    "aborted-metadata-commit": Row((Fault(StatusCode.ABORTED, on="commit"),), "transaction"),
    # More failures than max_attempts, each after the read moved on: the count starts again.
    "retries-go-on-while-progressing": Row(
        tuple(Fault(StatusCode.DEADLINE_EXCEEDED, after_responses=MID_STREAM) for _ in range(4)),
        "reader",
        retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.01, max_backoff_s=0.05),
    ),
    # Not recovered: the named error the user sees.
    "database-not-found": Row(
        (Fault(StatusCode.NOT_FOUND, after_responses=MID_STREAM, message="Database not found: projects/p/instances/i/databases/d"),),
        error=DatabaseNotFoundError,
        message="database or instance not found",
    ),
    "internal": Row(
        (Fault(StatusCode.INTERNAL, after_responses=MID_STREAM, message="An internal error occurred."),),
        error=TerminalError,
        message="Spanner error reading partition .* An internal error occurred",
    ),
    "permission-denied": Row(
        (Fault(StatusCode.PERMISSION_DENIED, message="Caller is missing IAM permission spanner.databases.select"),),
        error=TerminalError,
        message="Spanner error reading partition .* spanner.databases.select",
    ),
    "too-large-in-a-narrow-window": Row(
        tuple(Fault(StatusCode.RESOURCE_EXHAUSTED, message=OUT_OF_MEMORY) for _ in range(40)),
        error=ResultTooLargeError,
        message="ran out of memory",
    ),
    # The client library restarts after UNAVAILABLE at once and without end: bounded, then the
    # reader's own retries, then the error (reader._BoundedRestarts; without it, this row's read
    # ran through all its faults and succeeded, as reads spun against a server that never answered).
    "unavailable-without-end": Row(
        tuple(Fault(StatusCode.UNAVAILABLE) for _ in range(60)),
        error=TransientError,
        message="restarted 20 times after UNAVAILABLE",
        retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.01, max_backoff_s=0.05),
    ),
    "retries-stop-without-progress": Row(
        tuple(Fault(StatusCode.DEADLINE_EXCEEDED) for _ in range(5)),
        error=TransientError,
        message="Deadline Exceeded",
        retry=RetryPolicy(max_attempts=3, initial_backoff_s=0.01, max_backoff_s=0.05),
    ),
}


class CountingReader(PartitionReader):
    """The real reader, counting the times it narrowed its window (what the log line says)."""

    narrowed = 0

    def _narrower(self, *args):
        span = super()._narrower(*args)
        self.narrowed += 1
        return span


@dataclass
class Outcome:
    ids: list = field(default_factory=list)  # (commit timestamp, change identity) of each mod read
    ranges: list = field(default_factory=list)  # the (start, end) of each range the row read
    retries: int = 0
    narrowed: int = 0
    error: Exception | None = None
    injected: list = field(default_factory=list)
    pending: list = field(default_factory=list)
    live_queries: int = 0


def bank_reader(host: str, bank_id: str, metadata_id: str, table: str, retry: RetryPolicy) -> CountingReader:
    """A streaming reader of the bank stream through ``host``, with its partition metadata in
    ``table`` (created here: the emulator takes one schema change at a time, so call it in turn)."""
    client = SpannerTarget(PROJECT, INSTANCE, bank_id, host).client()
    bank = SpannerTarget(PROJECT, INSTANCE, bank_id, host).connect(client)
    metadata = SpannerTarget(PROJECT, INSTANCE, metadata_id, host).connect(client)
    store = PartitionMetadataStore(metadata, table)
    store.create_table_if_missing()
    return CountingReader(bank, ChangeStreamQuery("BankStream", heartbeat_millis=500), store, retry, STREAMING)


def read_stream(reader: CountingReader, start: datetime, end: datetime, outcome: Outcome | None = None) -> Outcome:
    """Read the stream over [start, end], every partition, to its end, adding to ``outcome``."""
    store = reader.metadata
    outcome = outcome or Outcome()
    outcome.ranges.append((start, end))

    def land(batch) -> None:
        outcome.ids.extend((r.commit_timestamp, i) for r in batch.records for i in r.change_ids())
        outcome.retries += batch.retries

    try:
        LocalRunner(reader, land, timedelta(seconds=120)).run(start, end, 500, stop_after_s=read_limit())
        assert {p.state for p in store.all()} == {PartitionState.FINISHED}
    except (TerminalError, TransientError) as e:
        outcome.error = e
    outcome.narrowed += reader.narrowed
    return outcome


@pytest.fixture(scope="module")
def calm_emulator(tmp_path_factory) -> Iterator[SpannerEmulator]:
    """An emulator of the module's own, whose partitions live until a query's end (module docstring)."""
    with SpannerEmulator(churn=False, log_path=tmp_path_factory.mktemp("calm") / "emulator.log") as emulator:
        yield emulator


@pytest.fixture(scope="module")
def live(calm_emulator) -> tuple[dict[str, Outcome], list]:
    """Every row's read of one live workload, side by side, range after range until each row's
    faults have all fired, and the clean read's (commit timestamp, change identity) pairs."""
    emulator = calm_emulator
    outcomes: dict[str, Outcome] = {}
    environment = pytest.MonkeyPatch.context()
    fronts: dict[str, SpannerFront] = {}
    try:
        # The client prefers SPANNER_EMULATOR_HOST to the address it is given: keep it from going round the fronts.
        environment.__enter__().delenv("SPANNER_EMULATOR_HOST", raising=False)
        instance = create_instance(SpannerTarget(PROJECT, INSTANCE, "unused", emulator.host).client(), INSTANCE)
        names = (f"db-{n}" for n in itertools.count())
        bank = create_database(instance, next(names), BANK_TABLES_DDL + [bank_stream_ddl("BankStream")])
        workload = BankWorkload(bank)
        metadata = {name: create_database(instance, next(names), []).database_id for name in ROWS}
        fronts.update({name: SpannerFront(emulator.host, poll_s=0.25).start() for name in ROWS})
        for name, front in fronts.items():
            front.inject(*ROWS[name].faults)
        reading = list(ROWS)
        for round_ in range(ROUNDS):
            # Clients first (each takes about a second to make): the reads must all be live. A
            # metadata database each (the emulator runs one read-write transaction of a database at
            # a time, and readers sharing one wait on each other's commits for seconds), a new table
            # each range.
            readers = {
                name: bank_reader(fronts[name].host, bank.database_id, metadata[name], f"Metadata{round_}", ROWS[name].retry) for name in reading
            }
            first = round_ == 0
            start = utc_now()
            end = start + timedelta(seconds=READ_SECONDS + 2 * load_per_core())

            def read(name: str) -> None:
                try:
                    outcomes[name] = read_stream(readers[name], start, end, outcomes.get(name))
                except Exception as e:  # anything else fails the row's test, named
                    outcomes[name] = Outcome(error=e)

            threads = {name: threading.Thread(target=read, args=(name,), daemon=True) for name in reading}
            for thread in threads.values():
                thread.start()
            if first:
                workload.run_until(start + timedelta(seconds=WRITE_SECONDS), per_second=30)
                while len(workload.committed) < MIN_TRANSACTIONS:
                    workload.transfer()
            for name, thread in threads.items():
                limit = read_limit() + 30
                thread.join(timeout=limit)  # the runner stops itself after read_limit()
                if thread.is_alive():
                    outcomes[name] = Outcome(error=TimeoutError(f"{name}: the read did not end in {limit:.0f} s"))
            reading = [n for n in reading if outcomes[n].error is None and (fronts[n].pending or not fronts[n].live_queries)]
            if not reading:
                break
        for name, front in fronts.items():
            outcome = outcomes[name]
            outcome.injected, outcome.pending, outcome.live_queries = front.injected, front.pending, front.live_queries
    finally:
        environment.__exit__(None, None, None)
        for front in fronts.values():
            front.stop()
    ranges = sorted({r for o in outcomes.values() for r in o.ranges})
    clean = []
    with pytest.MonkeyPatch.context() as calm:
        calm.delenv("SPANNER_EMULATOR_HOST", raising=False)  # the module's emulator, straight
        for number, (start, end) in enumerate(ranges):
            read = read_stream(bank_reader(emulator.host, bank.database_id, metadata["unavailable"], f"Clean{number}", QUICK), start, end)
            assert read.error is None, read.error
            clean += read.ids
    assert len(clean) == len({i for _, i in clean}) == committed_in(workload, ranges)
    assert committed_in(workload, ranges[:1]) >= 40  # the accounts opened at the first range's start, at least
    return outcomes, sorted(clean)


def read_limit() -> float:
    return READ_LIMIT_SECONDS * max(1.0, load_per_core())


def committed_in(workload: BankWorkload, ranges: list) -> int:
    """How many mods the workload committed inside ``ranges``."""
    return sum(len(t.mods) for t in workload.committed if any(s <= t.commit_timestamp <= e for s, e in ranges))


def read_within(pairs: list, ranges: list) -> list:
    """The change identities of ``pairs`` committed inside ``ranges``, sorted."""
    return sorted(i for t, i in pairs if any(s <= t <= e for s, e in ranges))


@pytest.mark.parametrize("name", [n for n, row in ROWS.items() if row.error is None])
def test_a_read_recovers_from_the_fault_and_loses_and_repeats_nothing(live, name):
    outcomes, clean = live
    row, outcome = ROWS[name], outcomes[name]
    assert outcome.error is None, f"{name}: {outcome.error!r}"
    assert outcome.live_queries > 0, "no query was streamed: the read began after its end"
    assert outcome.injected == list(row.faults) and not outcome.pending, "a fault never fired: no call got that far"
    assert read_within(outcome.ids, outcome.ranges) == read_within(clean, outcome.ranges), "lost or repeated changes"
    assert (outcome.retries > 0) == (row.recovered_by == "reader"), outcome.retries
    if name == "retries-go-on-while-progressing":
        assert outcome.retries == len(row.faults) > row.retry.max_attempts
    assert (outcome.narrowed > 0) == (row.recovered_by == "narrowing")


@pytest.mark.parametrize("name", [n for n, row in ROWS.items() if row.error is not None])
def test_a_fault_no_retry_can_fix_stops_the_read_with_a_named_error(live, name):
    outcomes, _ = live
    row, outcome = ROWS[name], outcomes[name]
    assert isinstance(outcome.error, row.error), repr(outcome.error)
    assert row.error is TransientError or not isinstance(outcome.error, TransientError)
    assert re.search(row.message, str(outcome.error)), str(outcome.error)
    if name == "retries-stop-without-progress":
        assert len(outcome.injected) == row.retry.max_attempts and len(outcome.pending) == 2
    if name == "unavailable-without-end":  # the first call and 20 restarts, twice
        assert len(outcome.injected) == 2 * 21, len(outcome.injected)
    if name == "too-large-in-a-narrow-window":
        assert 2 <= len(outcome.injected) < len(row.faults)


def test_backoff_is_jittered_and_capped():
    policy = RetryPolicy(initial_backoff_s=1.0, max_backoff_s=4.0)
    for attempt in (1, 2, 3, 6):
        seen = [policy.backoff(attempt) for _ in range(200)]
        ceiling = min(4.0, 2 ** (attempt - 1))
        assert all(ceiling / 2 <= p <= ceiling for p in seen)
        assert len(set(seen)) > 100, "no jitter"
