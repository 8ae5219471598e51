"""Creating a mirror (``lake/mirrors.py``) where a killed writer left files but no commit, and what
keeps that safe beside a newer writer."""

import pytest

from cs_platform.lake.delta import DeltaPath, session_conf
from cs_platform.lake.fence import APP_ID, TXN_APP_ID, TXN_VERSION
from cs_platform.lake.mirrors import ensure_columns, replace_mirror, typed_rows
from cs_platform.storage.location import Location

COLUMNS = {
    "Id": {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
    "Note": {"name": "Note", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
}


def leftovers(path) -> None:
    """What a writer SIGKILLed in a ``CREATE TABLE ... AS SELECT`` leaves: its data file, a log
    directory, its commit's temporary file, and no commit."""
    (path / "_delta_log").mkdir(parents=True)
    (path / "part-00000-killed.snappy.parquet").write_bytes(b"PAR1 cut short")
    (path / "_delta_log" / ".00000000000000000000.json.killed.tmp").write_text('{"commitInfo"')


@pytest.mark.parametrize("create", ["snapshot", "cut"])
def test_a_mirror_is_created_over_a_killed_writers_leftovers(spark, tmp_path, create):
    # A snapshot's first write of a table (replace_mirror, found in a fresh clone's suite: a killed
    # snapshot's other table was mid-write, and every later snapshot failed with
    # TABLE_OR_VIEW_ALREADY_EXISTS), and a cut's first write of a table joining the stream
    # (ensure_columns, where CREATE TABLE IF NOT EXISTS did nothing and the MERGE after it failed).
    leftovers(tmp_path / "Items")
    mirror = DeltaPath.under(Location(str(tmp_path), "the test's lake"), "Items")
    assert not mirror.exists()
    if create == "snapshot":
        rows = spark.createDataFrame([("1", "one"), ("2", "two")], "Id string, Note string")
        assert replace_mirror(spark, mirror, typed_rows(rows, COLUMNS), COLUMNS) == (0, 2)
        assert sorted(tuple(r) for r in mirror.read(spark).collect()) == [(1, "one"), (2, "two")]
    else:
        ensure_columns(spark, mirror, COLUMNS)
        assert mirror.version() == 0 and mirror.read(spark).count() == 0
    assert dict(mirror.read(spark).dtypes) == {"Id": "bigint", "Note": "string"}


class SeenMissing(DeltaPath):
    """A mirror as a writer saw it before it paused: no table there yet."""

    def exists(self) -> bool:
        return False


def test_an_older_writers_create_is_skipped_where_a_newer_one_created_the_table(spark, tmp_path):
    """Creating a mirror replaces whatever stands at its location, and that stays safe beside the
    lake's fence (``lake.fence``): a writer that found no table, then paused while its successor
    created one, changes nothing when it wakes, by either way of creating it."""
    location = Location(str(tmp_path), "the test's lake")
    mirror = DeltaPath.under(location, "Items")
    newer = spark.createDataFrame([("1", "new")], "Id string, Note string")
    with session_conf(spark, {TXN_APP_ID: APP_ID, TXN_VERSION: str(2 << 32 | 1)}):
        replace_mirror(spark, mirror, typed_rows(newer, COLUMNS), COLUMNS)
    older = spark.createDataFrame([("1", "stale"), ("9", "stale")], "Id string, Note string")
    stale = SeenMissing(mirror.location, mirror.path)
    with session_conf(spark, {TXN_APP_ID: APP_ID, TXN_VERSION: str(1 << 32 | 7)}):
        replace_mirror(spark, stale, typed_rows(older, COLUMNS), COLUMNS)
        ensure_columns(spark, stale, COLUMNS)
    assert mirror.version() == 0
    assert [tuple(r) for r in mirror.read(spark).collect()] == [(1, "new")]
