"""Landing files: ``<root>/<stream>/<partition key>/<query start>_<upto>_<rows>.json.gz``.

``<upto>`` is the chunk's watermark, or ``<T>-<n>`` for a piece of a commit timestamp T whose mods
outgrew a chunk (a huge transaction): the file then holds mods up to the n-th of T that the
partition returns (``PartitionBatch.mods_past_watermark``), and the watermark persisted after it
stays just below T. A partition's names sort in the order of what they reach (the changelog's
ingest relies on it): the pieces of T by n, and before any name whose upto is T or later, because
``-`` sorts before ``_``; and a piece re-read from T's start reaches no further than the piece of
an earlier read with the same or a larger n.

The name is a function of the partition and the range read, so landing the same read twice writes
the same file (idempotent), and a file is either complete or absent (``Location.write_atomic``).
The name also says what the lake's ingest needs before it reads a file: every row's commit
timestamp lies in [query start, upto's timestamp], and how many rows it holds. (Files landed by earlier
versions are Parquet, named ``<query start>_<watermark>.parquet``; ingest and cleanup still take them.)
A stream's directory belongs to one source (``_source.json``, see ``source``): a store given a
source refuses to land into another source's directory.

Only after :meth:`LandingStore.write` returns may the caller persist the partition's watermark
(DESIGN invariant 2).
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Mapping, Sequence

from cs_platform.changestream.metadata import ONE_MICROSECOND
from cs_platform.changestream.query import validate_identifier
from cs_platform.changestream.reader import PartitionBatch
from cs_platform.landing.rows import LANDING_COLUMNS, write_rows
from cs_platform.landing.source import SourceIdentity, bind, check_owner
from cs_platform.storage.location import Location

if TYPE_CHECKING:
    import pyarrow as pa
    from pyarrow import fs as pafs

SUFFIX = ".json.gz"
PIECE = "-"  # between a piece's timestamp and its count: sorts before "_" (see above)
PIECE_DIGITS = 9  # a count of mods at one commit timestamp (Cloud Spanner allows 80,000 mutations a commit)
PARQUET_SUFFIX = ".parquet"  # landed by versions before JSON lines
SUFFIXES = (SUFFIX, PARQUET_SUFFIX)
ROOT_SETTING = "CS_PLATFORM_LANDING_ROOT"


@dataclass(frozen=True)
class LandedFile:
    path: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class LandedName:
    """What a landing file's name says of it."""

    query_start: datetime  # no row of the file committed before this
    watermark: datetime  # nor after this
    rows: int | None  # None for a Parquet file of an earlier version: its name counts no rows
    piece: int | None = None  # a piece of ``watermark``'s mods: it reaches the piece-th of them


@dataclass(frozen=True)
class LandedRange:
    """What some landing files hold, from their names alone: the rows of those that count them, and
    bounds of every row's commit timestamp."""

    rows: int
    first: datetime | None  # None when there are no files
    last: datetime | None
    uncounted: tuple[str, ...] = ()  # Parquet files of an earlier version: count their rows by reading them


@dataclass(frozen=True)
class RemovedLanding:
    """What one landing cleanup removed, and what it kept because the changelog has not ingested it."""

    files: int
    bytes: int
    directories: int
    kept_not_ingested: int  # above their directory's ingested mark: never removed
    kept_recent: int  # ingested, but within the retention


_STAMP = "%Y%m%dT%H%M%S%fZ"


def _stamp(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime(_STAMP)


def _parse_stamp(text: str) -> datetime:
    return datetime.strptime(text, _STAMP).replace(tzinfo=timezone.utc)


def landed_name(name: str) -> LandedName:
    """Parse a landing file's name (its last path segment is taken)."""
    name = name.rpartition("/")[2]
    suffix = next((s for s in SUFFIXES if name.endswith(s)), None)
    parts = name.removesuffix(suffix).split("_") if suffix else []
    if len(parts) != (3 if suffix == SUFFIX else 2):
        raise ValueError(f"{name!r} is not a landing file's name (<query start>_<watermark>_<rows>{SUFFIX})")
    upto, _, piece = parts[1].partition(PIECE)
    return LandedName(
        _parse_stamp(parts[0]), _parse_stamp(upto), int(parts[2]) if suffix == SUFFIX else None, int(piece) if piece else None
    )


def landed_upto(name: str) -> datetime:
    """The watermark a landing file's name records."""
    return landed_name(name).watermark


def landed_range(files: Sequence[str]) -> LandedRange:
    """Rows and commit timestamp bounds of landing ``files`` (URIs as :meth:`LandingStore.files`
    gives them), from their names: the lake's ingest needs both before its MERGE, and reads no file
    for them."""
    names = [landed_name(f) for f in files]
    return LandedRange(
        rows=sum(n.rows for n in names if n.rows is not None),
        first=min((n.query_start for n in names), default=None),
        last=max((n.watermark for n in names), default=None),
        uncounted=tuple(f for f, n in zip(files, names) if n.rows is None),
    )


def _arrow_schema() -> "pa.Schema":
    import pyarrow as pa

    types = {"TIMESTAMP": pa.timestamp("us", tz="UTC"), "STRING": pa.string(), "INT": pa.int32(), "BIGINT": pa.int64(), "BOOLEAN": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in LANDING_COLUMNS])


class LandingStore:
    """Writes and lists landing files under one root (local path or URI such as ``gs://bucket/x``)."""

    def __init__(self, root: str, source: SourceIdentity | None = None) -> None:
        self.location = Location(root, ROOT_SETTING)
        self.base = self.location.base
        self.source = source
        self._bound: set[str] = set()

    def stream_directory(self, stream: str) -> str:
        return f"{self.base}/{validate_identifier(stream, 'change stream name')}"

    def directory(self, stream: str, partition_key: str) -> str:
        return f"{self.stream_directory(stream)}/{partition_key}"

    @property
    def filesystem(self) -> "pafs.FileSystem":
        return self.location.filesystem

    def path_for(self, stream: str, partition_key: str, batch: PartitionBatch) -> str:
        upto = _stamp(batch.watermark)
        if batch.mods_past_watermark:
            upto = f"{_stamp(batch.watermark + ONE_MICROSECOND)}{PIECE}{batch.mods_past_watermark:0{PIECE_DIGITS}d}"
        name = f"{_stamp(batch.query_start)}_{upto}_{batch.mod_count}{SUFFIX}"
        return f"{self.directory(stream, partition_key)}/{name}"

    def bind(self, stream: str) -> None:
        """Make sure the stream's directory belongs to this store's source (recording it if new)."""
        if self.source is not None and stream not in self._bound:
            bind(self.location, self.stream_directory(stream), self.source, f"landing directory of {stream}")
            self._bound.add(stream)

    def check_source(self, stream: str, source: SourceIdentity) -> None:
        """Refuse the stream's directory if another source owns it (read-only: records nothing)."""
        check_owner(self.location, self.stream_directory(stream), source, f"landing directory of {stream}")

    def check_writable(self) -> None:
        self.location.check_writable(self.base)

    def write(self, stream: str, partition_key: str, batch: PartitionBatch) -> LandedFile | None:
        """Land ``batch`` durably; None when it has no records (nothing to land)."""
        if not batch.records:
            return None
        self.bind(stream)
        path = self.path_for(stream, partition_key, batch)
        size = self.location.write_atomic(path, lambda out: write_rows(batch, out))
        return LandedFile(path=self.location.uri(path), rows=batch.mod_count, bytes=size)

    def _infos(self, stream: str) -> list["pafs.FileInfo"]:
        from pyarrow import fs as pafs  # listing is the lake's and cleanup's: a reader run never lists

        selector = pafs.FileSelector(self.stream_directory(stream), recursive=True, allow_not_found=True)
        found = self.filesystem.get_file_info(selector)
        return sorted((i for i in found if i.is_file and i.path.endswith(SUFFIXES)), key=lambda i: i.path)

    def _paths(self, stream: str) -> list[str]:
        return [i.path for i in self._infos(stream)]

    def partition_keys(self, stream: str) -> list[str]:
        """The partitions that have a landing directory (one listing of the stream's directory)."""
        return self.location.children(self.stream_directory(stream))

    def names_in(self, stream: str, partition_key: str) -> list[str]:
        """The landed files of one partition, by name, sorted (one listing of its directory)."""
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(self.directory(stream, partition_key), allow_not_found=True)
        return sorted(i.base_name for i in self.filesystem.get_file_info(selector) if i.is_file and i.base_name.endswith(SUFFIXES))

    def remove_ingested(
        self, stream: str, ingested_upto: Mapping[str, str], landed_before: datetime, live_keys: set[str]
    ) -> RemovedLanding:
        """Remove the files the changelog has ingested and whose watermark is before ``landed_before``.

        ``ingested_upto``: per landing directory (as :meth:`files` names it), the last file name the
        changelog ingested (``lake.published.ingested_landing``). A file above its directory's mark, or in a
        directory without one, is kept whatever its age: the changelog has not read it. A directory
        left empty is removed too, unless its partition (``live_keys``) may still land into it.
        """
        removed = removed_bytes = not_ingested = recent = 0
        emptied = set()
        by_directory: dict[str, list["pafs.FileInfo"]] = {}
        for info in self._infos(stream):
            by_directory.setdefault(info.path.rpartition("/")[0], []).append(info)
        for directory, infos in by_directory.items():
            mark = ingested_upto.get(self.location.uri(directory))
            kept = 0
            for info in infos:
                if mark is None or info.base_name > mark:
                    not_ingested += 1
                    kept += 1
                elif landed_upto(info.base_name) >= landed_before:
                    recent += 1
                    kept += 1
                else:
                    self.location.delete_file(info.path)
                    removed, removed_bytes = removed + 1, removed_bytes + info.size
            if not kept and directory.rpartition("/")[2] not in live_keys:
                emptied.add(directory)
        for directory in emptied:
            self.location.delete_tree(directory)
        return RemovedLanding(removed, removed_bytes, len(emptied), not_ingested, recent)

    def files(self, stream: str) -> list[str]:
        """Every landed file of a stream (temporary files excluded), sorted."""
        return [self.location.uri(p) for p in self._paths(stream)]

    def read(self, stream: str) -> "pa.Table":
        """All landed rows of a stream, duplicates included (tests and small tools; Spark reads at scale)."""
        import pyarrow as pa
        import pyarrow.json as pa_json
        import pyarrow.parquet as pq

        schema = _arrow_schema()
        options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")

        def table(path: str) -> pa.Table:
            if path.endswith(PARQUET_SUFFIX):
                return pq.read_table(path, filesystem=self.filesystem).select(schema.names).cast(schema)
            with self.filesystem.open_input_stream(path, compression=None) as compressed:
                lines = gzip.decompress(compressed.read())
            return pa_json.read_json(io.BytesIO(lines), parse_options=options).select(schema.names)

        tables = [table(p) for p in self._paths(stream)]
        return pa.concat_tables(tables) if tables else schema.empty_table()
