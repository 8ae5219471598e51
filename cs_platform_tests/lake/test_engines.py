"""Published cuts read without Spark (``published``), opened by DuckDB, deltalake and Spark SQL
through the statements ``cs-platform-lake`` prints (``engines``), on a local bank lake."""

import subprocess
import sys

import duckdb
import pytest

from cs_platform.lake.cli import main
from cs_platform.lake.engines import (
    READER_FEATURES,
    READER_VERSION,
    TIMESTAMP_TYPES,
    CutTables,
    duckdb_delta_extension,
    statements,
    table_protocols,
)
from cs_platform.lake.history_schema import HistoryPolicy
from cs_platform.lake.published import cut_of_version, published_cut, published_cuts
from cs_platform.lake.stream_lake import Lake
from cs_platform.landing.store import LandingStore
from cs_platform_tests.lake.bank_landing import land_bank
from cs_platform_tests.lake.readers import check_readers_agree

pytestmark = pytest.mark.xdist_group("engines")  # one worker builds the module's bank lake once


@pytest.fixture(scope="module")
def bank_lake(spark, tmp_path_factory):
    """A bank lake with three cuts and history tables (transfers update accounts: the mirrors
    carry deletion vectors), built once for the module: its tests only read it."""
    work = tmp_path_factory.mktemp("bank_lake")
    landing = LandingStore(str(work / "landing"))
    cuts = land_bank(landing, accounts=10, transfers=60, files=3)
    lake = Lake(spark, str(work / "lake"), history=HistoryPolicy(None))
    files = landing.files("Bank")
    for i, cut in enumerate(cuts):
        lake.changelog.ingest(files[: i + 1])
        assert lake.apply_cut(cut).applied
    return lake, cuts


@pytest.mark.parametrize("local_time_zone", ["America/Los_Angeles"], indirect=True)
def test_every_engine_reads_each_published_cut_as_spark_does(bank_lake, local_time_zone):
    lake, cuts = bank_lake
    assert [c.cut for c in published_cuts(lake.location)] == cuts == lake.cuts()
    for cut in cuts:
        published = check_readers_agree(lake, cut)
        with duckdb.connect() as con:  # the bank invariant, in the engine a user pastes into
            con.execute(statements(CutTables.of(lake.location, published), "duckdb"))
            assert con.execute('SELECT sum("Balance"), count(*) FROM "Accounts"').fetchone() == (10_000, 10)
    # Each mirror version names the cut that wrote it, without the manifest.
    for i, cut in enumerate(cuts):
        assert cut_of_version(lake.location, "Accounts", published_cut(lake.location, cut).versions["Accounts"]) == cut
    assert published_cut(lake.location).cut == cuts[-1]


def test_every_table_keeps_to_what_the_common_engines_read(bank_lake):
    """Reader protocol, reader features and timestamp types of every table, history included."""
    lake, _ = bank_lake
    protocols = table_protocols(lake.location)
    assert {"changelog", "manifest", "mirrors/Accounts", "history/Accounts"} <= set(protocols)
    for table, protocol in protocols.items():
        assert protocol.min_reader_version <= READER_VERSION and set(protocol.reader_features) <= READER_FEATURES, (table, protocol)
        assert set(protocol.timestamp_types) <= TIMESTAMP_TYPES, (table, protocol)


def test_the_command_lists_cuts_and_prints_statements_without_spark(bank_lake, tmp_path, capsys):
    lake, cuts = bank_lake
    assert main(["cuts", lake.root]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == [c.isoformat() for c in cuts]
    version = published_cut(lake.location, cuts[0]).versions["Accounts"]
    assert main(["open", lake.root, "--engine", "trino", "--cut", cuts[0].isoformat()]) == 0
    trino = capsys.readouterr().out
    assert f'cs_platform."accounts" FOR VERSION AS OF {version};' in trino and "register_table" in trino
    assert main(["open", lake.root]) == 0  # DuckDB, the latest cut: the extension from the wheel's file
    duck = capsys.readouterr().out
    assert f"LOAD '{duckdb_delta_extension()}';" in duck and "INSTALL" not in duck and "autoinstall_known_extensions = false" in duck

    # Bad input: a clear message and exit status 2, within the process's first seconds.
    assert main(["open", str(tmp_path / "nowhere")]) == 2
    assert "<CS_PLATFORM_LAKE_ROOT>/<stream>" in capsys.readouterr().err
    assert main(["open", lake.root, "--cut", "2020-01-01T00:00:00+00:00"]) == 2
    assert "not a cut, or older than the cuts lake maintenance keeps" in capsys.readouterr().err
    assert main(["open", str(tmp_path / "nowhere"), "--history"]) == 2
    assert main(["open", lake.root, "--history", "--latest"]) == 0
    assert "FROM delta_scan" in capsys.readouterr().out

    # The installed command, in a fresh process: it never imports PySpark.
    script = (
        "import sys; from cs_platform.lake.cli import main; code = main(['open', sys.argv[1], '--engine', 'spark']); "
        "assert 'pyspark' not in sys.modules, 'the command imported PySpark'; sys.exit(code)"
    )
    done = subprocess.run([sys.executable, "-c", script, lake.root], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"VERSION AS OF {published_cut(lake.location).versions['Accounts']};" in done.stdout
