"""Open every mirror of one published cut from an engine other than our own PySpark code.

A consistent cut is a set of mirror versions (``published``); any engine with Delta time travel
opens it by pinning each mirror at its version. This module writes those statements, ready to
run, for Spark SQL (``VERSION AS OF``), DuckDB (``delta_scan(..., version => N)``, its ``delta``
extension loaded from the ``duckdb-extension-delta`` wheel's file, so nothing is downloaded) and
Trino (``FOR VERSION AS OF``, after ``register_table``), and opens the cut as Arrow tables
through ``deltalake`` (delta-rs). Nothing here imports Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timezone
from pathlib import Path

import pyarrow as pa
from pyarrow import fs as pafs

from cs_platform.lake.delta_log import DeltaLog
from cs_platform.lake.history_schema import VALID_FROM, VALID_TO
from cs_platform.lake.identifiers import double_quoted, quoted, standard_string
from cs_platform.lake.published import PublishedCut, history_log, manifest_log, mirror_log
from cs_platform.storage.location import Location

ENGINES = ("spark", "duckdb", "trino")
# What every engine in docs/reading.md reads (Spark, DuckDB, deltalake, Trino, BigQuery, Athena,
# Snowflake): reader protocol 3 with deletion vectors, instants as TIMESTAMP (not TIMESTAMP_NTZ). The
# lake's tables are kept to it (a test reads every table's protocol).
READER_VERSION, READER_FEATURES, TIMESTAMP_TYPES = 3, frozenset({"deletionVectors"}), frozenset({"timestamp"})
TRINO_CATALOG, TRINO_SCHEMA = "delta", "cs_platform"


class MissingReaderError(RuntimeError):
    """A reader package this call needs is not installed."""


@dataclass(frozen=True)
class CutTables:
    """Where every mirror of one published cut is, and at which version; and the history tables."""

    cut: PublishedCut
    uris: dict[str, str]  # table -> the mirror's URI
    histories: dict[str, str]  # table -> its history table's URI, for the tables that keep one
    manifest: str  # the manifest's URI

    @classmethod
    def of(cls, location: Location, cut: PublishedCut) -> CutTables:
        histories = {table: history_log(location, table) for table in cut.versions}
        return cls(
            cut,
            {table: mirror_log(location, table).uri for table in cut.versions},
            {table: log.uri for table, log in histories.items() if log.exists()},
            manifest_log(location).uri,
        )

    def pinned(self) -> list[tuple[str, str, int]]:
        """(table, uri, version) of every mirror, by table name."""
        return [(table, self.uris[table], version) for table, version in sorted(self.cut.versions.items())]


def statements(tables: CutTables, engine: str) -> str:
    """Statements that define one view per mirror, pinned at the cut, for ``engine`` (``ENGINES``)."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    header = f"-- consistent cut {tables.cut.cut.isoformat()}: every mirror at its version of that cut"
    return "\n".join([header, *{"spark": _spark, "duckdb": _duckdb, "trino": _trino}[engine](tables)]) + "\n"


def history_statements(tables: CutTables, engine: str, latest: bool = False) -> str:
    """Statements that define one view per history table holding the table as of the cut, read at
    the history table's *latest* version: for engines without time travel (``history``). With
    ``latest``, the views hold the latest published cut, read from the manifest's latest version
    whenever they are queried (a manifest row is written after every table of its cut committed).
    The bound columns (``_valid_from`` ...) are kept in the views."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    source = {
        "spark": lambda name, uri: f"delta.{quoted(uri)}",
        "duckdb": lambda name, uri: f"delta_scan({standard_string(uri)})",
        "trino": lambda name, uri: f"{TRINO_CATALOG}.{TRINO_SCHEMA}.{double_quoted(name.lower())}",
    }[engine]
    if latest:
        cut = f"(SELECT max(cut_timestamp) FROM {source('manifest', tables.manifest)})"
        header = "-- every history table as of the latest published cut (the manifest's), read at its latest version (no time travel)"
    else:
        at = tables.cut.cut.astimezone(timezone.utc)
        cut = {
            "spark": f"TIMESTAMP'{at.isoformat()}'",
            "duckdb": f"TIMESTAMPTZ '{at.isoformat()}'",
            "trino": f"TIMESTAMP '{at.strftime('%Y-%m-%d %H:%M:%S.%f')} UTC'",
        }[engine]
        header = f"-- every history table as of cut {tables.cut.cut.isoformat()}, read at its latest version (no time travel)"
    histories = {f"history_{table}": (table, uri) for table, uri in sorted(tables.histories.items())}
    lines = [header]
    if engine == "duckdb":
        lines += _duckdb_preamble()
    if engine == "trino":
        lines += _trino_registrations({"manifest": tables.manifest, **{name: uri for name, (_, uri) in histories.items()}})
    name = quoted if engine == "spark" else double_quoted
    view = "CREATE OR REPLACE TEMPORARY VIEW" if engine == "spark" else "CREATE OR REPLACE VIEW"
    lines += [
        f"{view} {name(table)} AS SELECT * FROM {source(history, uri)} "
        f"WHERE {VALID_FROM} <= {cut} AND ({VALID_TO} IS NULL OR {VALID_TO} > {cut});"
        for history, (table, uri) in histories.items()
    ]
    return "\n".join(lines) + "\n"


def _spark(tables: CutTables) -> list[str]:
    return [
        f"CREATE OR REPLACE TEMPORARY VIEW {quoted(table)} AS SELECT * FROM delta.{quoted(uri)} VERSION AS OF {version};"
        for table, uri, version in tables.pinned()
    ]


def _duckdb_preamble() -> list[str]:
    return [
        "SET autoinstall_known_extensions = false;",  # never download an extension at run time
        "SET autoload_known_extensions = false;",
        f"LOAD {standard_string(duckdb_delta_extension())};",
    ]


def _duckdb(tables: CutTables) -> list[str]:
    return _duckdb_preamble() + [
        f"CREATE OR REPLACE VIEW {double_quoted(table)} AS SELECT * FROM delta_scan({standard_string(uri)}, version => {version});"
        for table, uri, version in tables.pinned()
    ]


def _trino(tables: CutTables) -> list[str]:
    """Trino reads a Delta table once it is registered in its metastore (once per table), then
    pins a version with ``FOR VERSION AS OF``. Trino folds names to lower case; Spanner's table
    names are unique ignoring case, so the lower-case names stay unique."""
    lines = _trino_registrations({table: uri for table, uri, _ in tables.pinned()})
    return lines + [
        f"SELECT * FROM {TRINO_CATALOG}.{TRINO_SCHEMA}.{double_quoted(table.lower())} FOR VERSION AS OF {version};"
        for table, _, version in tables.pinned()
    ]


def _trino_registrations(uris: dict[str, str]) -> list[str]:
    lines = [f"-- once per table (catalog {TRINO_CATALOG!r} on the Delta Lake connector):"]
    return lines + [
        f"CALL {TRINO_CATALOG}.system.register_table(schema_name => {standard_string(TRINO_SCHEMA)}, "
        f"table_name => {standard_string(name.lower())}, table_location => {standard_string(uri)});"
        for name, uri in uris.items()
    ]


def read_arrow(tables: CutTables, storage_options: dict[str, str] | None = None) -> dict[str, pa.Table]:
    """Every mirror of the cut as an Arrow table, read by ``deltalake`` at its version. Through its
    query engine: its plain ``to_pyarrow_table`` refuses tables with deletion vectors, as mirrors have."""
    deltalake = _deltalake()
    opened = {}
    for table, uri, version in tables.pinned():
        query = deltalake.QueryBuilder().register("mirror", deltalake.DeltaTable(uri, version=version, storage_options=storage_options))
        opened[table] = pa.table(query.execute("SELECT * FROM mirror").read_all())
    return opened


@dataclass(frozen=True)
class TableProtocol:
    """What a reader must support to read one table (Delta's protocol action), and its timestamp types."""

    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...]
    writer_features: tuple[str, ...]
    timestamp_types: tuple[str, ...]  # "timestamp" (an instant, UTC) and/or "timestamp_ntz"


def table_protocols(location: Location) -> dict[str, TableProtocol]:
    """The protocol of every Delta table of one stream's lake (changelog, manifest, mirrors/<t>,
    history/<t>, quarantine), read by ``deltalake`` from each table's log."""
    deltalake = _deltalake()
    found = {}
    for name in ("changelog", "manifest", "quarantine"):
        found[name] = DeltaLog.under(location, name)
    for folder in ("mirrors", "history"):
        for table in location.filesystem.get_file_info(pafs.FileSelector(f"{location.base}/{folder}", allow_not_found=True)):
            found[f"{folder}/{table.base_name}"] = DeltaLog.under(location, folder, table.base_name)
    protocols = {}
    for name, log in sorted(found.items()):
        if not log.exists():
            continue
        table = deltalake.DeltaTable(log.uri)
        protocol = table.protocol()
        types = sorted({str(f.type.type) for f in table.schema().fields if str(getattr(f.type, "type", "")).startswith("timestamp")})
        protocols[name] = TableProtocol(
            protocol.min_reader_version,
            protocol.min_writer_version,
            tuple(sorted(protocol.reader_features or ())),
            tuple(sorted(protocol.writer_features or ())),
            tuple(types),
        )
    return protocols


def _deltalake():
    """The ``deltalake`` module (delta-rs), or a clear error naming the package and how to get it."""
    try:
        import deltalake
    except ImportError as e:
        raise MissingReaderError(
            "this reader needs the deltalake package, a dependency of cs_platform: run `make setup`, or add it with pip (deltalake==1.6.6)"
        ) from e
    return deltalake


def duckdb_delta_extension() -> str:
    """The path of DuckDB's ``delta`` extension inside the ``duckdb-extension-delta`` wheel, for the
    DuckDB version installed (``LOAD '<path>'`` needs no network)."""
    try:
        import duckdb
        import duckdb_extension_delta
    except ImportError as e:
        raise MissingReaderError(
            "DuckDB statements load the delta extension from its wheel: pip install duckdb duckdb-extension-delta "
            "(the same version for both)"
        ) from e
    path = Path(duckdb_extension_delta.__file__).parent / "extensions" / f"v{duckdb.__version__}" / "delta.duckdb_extension"
    if not path.is_file():
        shipped = sorted(p.name for p in path.parent.parent.iterdir())
        raise MissingReaderError(
            f"duckdb-extension-delta has no extension for DuckDB {duckdb.__version__} (it ships {', '.join(shipped)}): "
            "install the duckdb-extension-delta version equal to duckdb's"
        )
    return str(path)
