"""Landing files: ``<root>/<stream>/<partition key>/<query start>_<watermark>.parquet``.

The path is a function of the partition and the range read, so landing the same read twice writes
the same file (idempotent), and a file is either complete or absent:

- local directories: write a temporary file in the target directory, fsync it, rename it into
  place (atomic on POSIX), fsync the directory, so a landed file survives a machine crash too;
- object stores (``gs://…``): a single-object upload, which becomes visible only when complete.

Only after :meth:`LandingStore.write` returns may the caller persist the partition's watermark
(DESIGN invariant 2).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from cs_platform.changestream.errors import InvalidArgumentError
from cs_platform.changestream.query import validate_identifier
from cs_platform.changestream.reader import PartitionBatch
from cs_platform.landing.rows import LANDING_SCHEMA, batch_to_table

SUFFIX = ".parquet"


@dataclass(frozen=True)
class LandedFile:
    path: str
    rows: int
    bytes: int


def _stamp(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


class LandingStore:
    """Writes and lists landing files under one root (local path or URI such as ``gs://bucket/x``)."""

    def __init__(self, root: str) -> None:
        if not root:
            raise InvalidArgumentError("landing root is empty: set it to a local directory or a gs:// URI")
        self.root = root.rstrip("/")
        self.is_local = "://" not in root or root.startswith("file://")
        if self.is_local:
            self.filesystem, self.base = pafs.LocalFileSystem(), str(Path(root.removeprefix("file://")).resolve())
        else:
            try:
                self.filesystem, self.base = pafs.FileSystem.from_uri(self.root)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise InvalidArgumentError(f"landing root {root!r} is not a supported location: {e}") from e

    def directory(self, stream: str, partition_key: str) -> str:
        return f"{self.base}/{validate_identifier(stream, 'change stream name')}/{partition_key}"

    def path_for(self, stream: str, partition_key: str, batch: PartitionBatch) -> str:
        name = f"{_stamp(batch.query_start)}_{_stamp(batch.watermark)}{SUFFIX}"
        return f"{self.directory(stream, partition_key)}/{name}"

    def write(self, stream: str, partition_key: str, batch: PartitionBatch) -> LandedFile | None:
        """Land ``batch`` durably; None when it has no records (nothing to land)."""
        if not batch.records:
            return None
        table = batch_to_table(batch)
        path = self.path_for(stream, partition_key, batch)
        if self.is_local:
            self._write_local(table, path)
        else:
            self.filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
            with self.filesystem.open_output_stream(path) as out:
                pq.write_table(table, out)
        return LandedFile(path=self._uri(path), rows=table.num_rows, bytes=self.filesystem.get_file_info(path).size)

    @staticmethod
    def _write_local(table: pa.Table, path: str) -> None:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        temporary = os.path.join(directory, f".{uuid.uuid4().hex}.tmp")
        try:
            with open(temporary, "wb") as out:
                pq.write_table(table, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _uri(self, path: str) -> str:
        if self.is_local:
            return path
        scheme = self.root.split("://", 1)[0]
        return f"{scheme}://{path}"

    def _paths(self, stream: str) -> list[str]:
        base = f"{self.base}/{validate_identifier(stream, 'change stream name')}"
        infos = self.filesystem.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        return sorted(i.path for i in infos if i.is_file and i.path.endswith(SUFFIX))

    def files(self, stream: str) -> list[str]:
        """Every landed file of a stream (temporary files excluded), sorted."""
        return [self._uri(p) for p in self._paths(stream)]

    def read(self, stream: str) -> pa.Table:
        """All landed rows of a stream, duplicates included (tests and small tools; Spark reads at scale)."""
        tables = [pq.read_table(p, filesystem=self.filesystem) for p in self._paths(stream)]
        return pa.concat_tables(tables) if tables else LANDING_SCHEMA.empty_table()
