"""Landing files: ``<root>/<stream>/<partition key>/<query start>_<watermark>.parquet``.

The path is a function of the partition and the range read, so landing the same read twice writes
the same file (idempotent), and a file is either complete or absent (``Location.write_atomic``).
A stream's directory belongs to one source (``_source.json``, see ``source``): a store given a
source refuses to land into another source's directory.

Only after :meth:`LandingStore.write` returns may the caller persist the partition's watermark
(DESIGN invariant 2).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from cs_platform.changestream.query import validate_identifier
from cs_platform.changestream.reader import PartitionBatch
from cs_platform.landing.location import Location
from cs_platform.landing.rows import DICTIONARY_COLUMNS, LANDING_MEMORY_POOL, LANDING_SCHEMA, batch_to_tables
from cs_platform.landing.source import SourceIdentity, bind, check_owner

SUFFIX = ".parquet"
ROOT_SETTING = "CS_PLATFORM_LANDING_ROOT"


@dataclass(frozen=True)
class LandedFile:
    path: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class LandedRange:
    """What some landing files hold: their rows and the range of their commit timestamps."""

    rows: int
    first: datetime | None  # None when there are no rows
    last: datetime | None


@dataclass(frozen=True)
class RemovedLanding:
    """What one landing cleanup removed, and what it kept because the changelog has not ingested it."""

    files: int
    bytes: int
    directories: int
    kept_not_ingested: int  # above their directory's ingested mark: never removed
    kept_recent: int  # ingested, but within the retention


_STAMP = "%Y%m%dT%H%M%S%fZ"


# Rows per Parquet row group, built and written one at a time: this bounds the memory a landing
# write adds to its run, whatever the chunk's size.
ROW_GROUP_ROWS = 2_000


def _write_parquet(batch: PartitionBatch, out) -> None:
    """Write ``batch``'s rows as Parquet to ``out``, one row group at a time."""
    with pq.ParquetWriter(out, LANDING_SCHEMA, use_dictionary=DICTIONARY_COLUMNS, memory_pool=LANDING_MEMORY_POOL) as writer:
        for table in batch_to_tables(batch, ROW_GROUP_ROWS):
            writer.write_table(table, row_group_size=ROW_GROUP_ROWS)


def _stamp(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime(_STAMP)


def landed_upto(name: str) -> datetime:
    """The watermark a landing file's name records (``<query start>_<watermark>.parquet``)."""
    return datetime.strptime(name.removesuffix(SUFFIX).rpartition("_")[2], _STAMP).replace(tzinfo=timezone.utc)


FOOTER_READERS = 16  # footers read at once: object stores answer each in tens of milliseconds


def landed_range(files: Sequence[str]) -> LandedRange:
    """Rows and commit timestamp range of landing ``files`` (URIs as :meth:`LandingStore.files`
    gives them), from their Parquet footers alone: the lake's ingest needs both before its MERGE,
    and reading the footers here costs less than a Spark job that reads them."""
    if not files:
        return LandedRange(0, None, None)
    location = Location(files[0], ROOT_SETTING)

    def footer(uri: str) -> tuple[int, datetime | None, datetime | None]:
        metadata = pq.read_metadata(location.path_of(uri), filesystem=location.filesystem)
        column = metadata.schema.names.index("commit_timestamp")
        groups = [metadata.row_group(g) for g in range(metadata.num_row_groups)]
        stats = [g.column(column).statistics for g in groups if g.num_rows]
        if not all(s is not None and s.has_min_max for s in stats):
            raise ValueError(f"landing file {uri} has no commit_timestamp statistics: it was not landed by a reader run")
        return metadata.num_rows, min((s.min for s in stats), default=None), max((s.max for s in stats), default=None)

    with ThreadPoolExecutor(min(FOOTER_READERS, len(files))) as pool:
        found = list(pool.map(footer, files))
    firsts, lasts = [f for _, f, _ in found if f is not None], [l for _, _, l in found if l is not None]
    return LandedRange(sum(rows for rows, _, _ in found), min(firsts, default=None), max(lasts, default=None))


class LandingStore:
    """Writes and lists landing files under one root (local path or URI such as ``gs://bucket/x``)."""

    def __init__(self, root: str, source: SourceIdentity | None = None) -> None:
        self.location = Location(root, ROOT_SETTING)
        self.filesystem, self.base = self.location.filesystem, self.location.base
        self.source = source
        self._bound: set[str] = set()

    def stream_directory(self, stream: str) -> str:
        return f"{self.base}/{validate_identifier(stream, 'change stream name')}"

    def directory(self, stream: str, partition_key: str) -> str:
        return f"{self.stream_directory(stream)}/{partition_key}"

    def path_for(self, stream: str, partition_key: str, batch: PartitionBatch) -> str:
        name = f"{_stamp(batch.query_start)}_{_stamp(batch.watermark)}{SUFFIX}"
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
        size = self.location.write_atomic(path, lambda out: _write_parquet(batch, out))
        return LandedFile(path=self.location.uri(path), rows=batch.mod_count, bytes=size)

    def _infos(self, stream: str) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(self.stream_directory(stream), recursive=True, allow_not_found=True)
        return sorted((i for i in self.filesystem.get_file_info(selector) if i.is_file and i.path.endswith(SUFFIX)), key=lambda i: i.path)

    def _paths(self, stream: str) -> list[str]:
        return [i.path for i in self._infos(stream)]

    def remove_ingested(
        self, stream: str, ingested_upto: Mapping[str, str], landed_before: datetime, live_keys: set[str]
    ) -> RemovedLanding:
        """Remove the files the changelog has ingested and whose watermark is before ``landed_before``.

        ``ingested_upto``: per landing directory (as :meth:`files` names it), the last file name the
        changelog ingested (``changelog.ingested_marks``). A file above its directory's mark, or in a
        directory without one, is kept whatever its age: the changelog has not read it. A directory
        left empty is removed too, unless its partition (``live_keys``) may still land into it.
        """
        removed = removed_bytes = not_ingested = recent = 0
        emptied = set()
        by_directory: dict[str, list[pafs.FileInfo]] = {}
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

    def read(self, stream: str) -> pa.Table:
        """All landed rows of a stream, duplicates included (tests and small tools; Spark reads at scale)."""
        tables = [pq.read_table(p, filesystem=self.filesystem) for p in self._paths(stream)]
        return pa.concat_tables(tables) if tables else LANDING_SCHEMA.empty_table()
