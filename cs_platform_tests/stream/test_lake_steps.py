"""``keep_cutting``'s schedule on a simulated clock: when a lake run cuts, not what a cut does
(the lake's tests run real cuts through it); and, on the emulator, how a cut tells the tables the
stream watches and their DDL (``stream_membership``)."""

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from cs_platform.changestream.source_reads import SourceSnapshot
from cs_platform.stream import lake_steps
from cs_platform.stream.state import StreamPosition

T0 = datetime(2026, 11, 26, tzinfo=timezone.utc)


class SimulatedClock:
    """``time.monotonic`` and a stop event whose ``wait`` lets simulated time pass."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def is_set(self) -> bool:
        return False

    def wait(self, seconds: float) -> bool:
        self.now += seconds
        return False


def cut_times(monkeypatch, moves_at: list[float], seconds: float, interval: float) -> list[float]:
    """When cuts start, for a watermark that moves at each of ``moves_at`` (simulated seconds)."""
    clock = SimulatedClock()
    monkeypatch.setattr(lake_steps, "time", clock)

    def stream_position(store):
        return StreamPosition(T0 + timedelta(seconds=sum(1 for m in moves_at if m <= clock.now)), finished=False)

    monkeypatch.setattr(lake_steps, "stream_position", stream_position)
    taken = []

    def advance_lake(lake, landing, store, target, stream, position, connect):
        taken.append(clock.now)
        clock.now += 0.5  # a cut takes time
        return SimpleNamespace(cut=position.cut)

    monkeypatch.setattr(lake_steps, "advance_lake", advance_lake)
    list(lake_steps.keep_cutting(None, None, None, None, "s", seconds, interval, clock))
    return taken


def test_a_cut_follows_a_watermark_move_within_a_poll_but_at_most_every_interval(monkeypatch):
    # The first cut at once; the move at 1 waits for the interval (5); the move at 12 is cut at
    # the next poll, not at the next interval mark (15); the run ends on a last cut.
    assert cut_times(monkeypatch, [1.0, 12.0], seconds=30, interval=5) == [0.0, 5.0, 12.0, 25.0]


def test_an_idle_watermark_is_not_cut_again_until_it_moves(monkeypatch):
    assert cut_times(monkeypatch, [], seconds=20, interval=5) == [0.0, 15.0]


def test_a_cut_longer_than_the_interval_is_followed_at_once_if_the_watermark_moved(monkeypatch):
    # Cuts take 0.5 s here: the move at 0.2 is cut when the first cut ends, then the run polls.
    assert cut_times(monkeypatch, [0.2], seconds=3, interval=0.1) == [0.0, 0.5, 3.0]


def test_stream_membership_names_tables_that_joined_left_were_renamed_or_reshaped_and_a_frozen_table_watched_again(make_database):
    """On the emulator, under FOR ALL: a dropped table is unwatched, a renamed one unwatched under
    its old name and joined under its new, a created one joined, a table whose column was dropped or
    retyped reshaped (not one whose digest was never recorded, nor one whose column only changed
    length); a table of the same name created again after its mirror was frozen (not among the live
    mirrors) joins again, to be read whole. Each read is at a commit's timestamp after the DDL: the
    emulator may give a schema change a timestamp past this machine's clock."""
    tables = [f"CREATE TABLE {t} (K INT64 NOT NULL, V STRING(MAX), W INT64) PRIMARY KEY (K)" for t in "ABCEFGHIJ"]
    db = make_database([*tables, "CREATE CHANGE STREAM S FOR ALL"])
    then = committed_after_ddl(db)
    before = lake_steps.stream_membership(db, "S", then, live={}).shapes
    db.update_ddl(
        [
            "DROP TABLE B",
            "ALTER TABLE C RENAME TO C2",
            "CREATE TABLE D (K INT64 NOT NULL) PRIMARY KEY (K)",
            "ALTER TABLE E DROP COLUMN W",
            "ALTER TABLE F ALTER COLUMN V BYTES(MAX)",
            "ALTER TABLE G ALTER COLUMN V STRING(100)",  # a length: the mirror's type holds none
            "ALTER TABLE H ADD COLUMN X STRING(MAX)",
            "ALTER TABLE I ADD COLUMN X INT64 DEFAULT (7)",  # added too: whether rows hold values is the lake's count
            "ALTER TABLE J ADD COLUMN X INT64",
            "ALTER TABLE J DROP COLUMN W",  # and one dropped: not only added
        ]
    ).result(120)
    now = committed_after_ddl(db)
    live = {**before, "A": None}
    found = lake_steps.stream_membership(db, "S", now, live=live)
    assert (found.joined, found.unwatched, found.reshaped) == (("C2", "D"), ("B", "C"), ("E", "F", "H", "I", "J"))
    assert found.read_whole == ("C2", "D", "E", "F", "H", "I", "J") and found.shapes["A"] == before["A"] and found.added == {}
    # Read beside the schema at the previous cut: the tables whose only change is columns added.
    assert lake_steps.stream_membership(db, "S", now, live=live, previous=then).added == {"H": {"X": "STRING"}, "I": {"X": "INT64"}}
    db.update_ddl(["CREATE TABLE B (K INT64 NOT NULL) PRIMARY KEY (K)"]).result(120)
    live = {t: found.shapes[t] for t in ("A", "C2", "D", "E", "F", "G", "H", "I", "J")}
    assert lake_steps.stream_membership(db, "S", committed_after_ddl(db), live=live).joined == ("B",)
    after = lake_steps.stream_membership(db, "S", now, live=live)
    assert (after.joined, after.unwatched, after.reshaped) == ((), (), ())


def committed_after_ddl(db) -> datetime:
    """The timestamp of a commit made now: the schema read at it has every DDL that completed before."""
    with db.batch() as batch:
        batch.insert_or_update("A", ["K"], [[0]])
    return batch.committed


@pytest.mark.parametrize("postgres", [False, True], ids=["googlesql", "postgresql"])
def test_columns_added_since_the_previous_cut_and_the_rows_holding_a_value_in_them_in_both_dialects(make_database, postgres):
    """A reserved word as the table's and the added column's name, quoted in each dialect: the
    column is named with its type as the schema spells it, and the source counts the rows that hold
    a value in it (the one written, not the two left NULL)."""
    if postgres:
        ddl = ['CREATE TABLE "Order" (k bigint NOT NULL PRIMARY KEY, v character varying)', "CREATE CHANGE STREAM s FOR ALL"]
        add, kind = 'ALTER TABLE "Order" ADD COLUMN "Select" bigint', "bigint"
    else:
        ddl = ["CREATE TABLE `Order` (k INT64 NOT NULL, v STRING(MAX)) PRIMARY KEY (k)", "CREATE CHANGE STREAM s FOR ALL"]
        add, kind = "ALTER TABLE `Order` ADD COLUMN `Select` INT64", "INT64"
    db = make_database(ddl, postgres=postgres)
    with db.batch() as batch:
        batch.insert("Order", ["k", "v"], [[1, "a"], [2, "b"]])
    then = batch.committed
    live = lake_steps.stream_membership(db, "s", then, live={}).shapes
    db.update_ddl([add]).result(120)
    with db.batch() as batch:
        batch.insert("Order", ["k", "Select"], [[3, 7]])
    found = lake_steps.stream_membership(db, "s", batch.committed, live=live, previous=then)
    assert found.reshaped == ("Order",) and found.added == {"Order": {"Select": kind}}
    assert SourceSnapshot(db, batch.committed).rows_with_values("Order", ["Select"]) == 1
