"""A storage root given as a local directory or a URI (``gs://bucket/prefix``), opened with
pyarrow's filesystems, with the one write primitive landing and markers need.

A local root opens pyarrow's filesystem only when something lists or deletes: a reader run, which
writes and reads single files, then never loads pyarrow (about 40 MB of its memory).

``write_atomic`` leaves a file complete or absent:

- local directories: write a temporary file in the target directory, fsync it, rename it into
  place (atomic on POSIX), fsync the directory, so the file survives a machine crash too;
- object stores: the file is serialized in memory first, then sent as a single-object upload,
  which becomes visible only when complete (a failure while serializing sends nothing at all).

``gs://`` roots are reached as ``cs_platform.storage.gcs`` says: an emulator endpoint, or Cloud
Storage with credentials that are checked before the first object is touched.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable

from cs_platform.errors import InvalidArgumentError
from cs_platform.storage.gcs import GcsAccess

if TYPE_CHECKING:
    from pyarrow import fs as pafs


def is_local(root: str) -> bool:
    """A local directory (a path or a ``file://`` URI), not an object store."""
    return "://" not in root or root.startswith("file://")


class Location:
    def __init__(self, root: str, setting: str) -> None:
        if not root:
            raise InvalidArgumentError(f"{setting} is empty: set it to a local directory or a gs:// URI")
        self.root = root.rstrip("/")
        self.setting = setting
        self.is_local = is_local(root)
        self._filesystem: pafs.FileSystem | None = None
        if self.is_local:
            self.base = str(Path(root.removeprefix("file://")).resolve())
        elif self.root.startswith("gs://"):
            access = GcsAccess.from_environment()
            access.check(setting, root)
            self._filesystem, self.base = access.filesystem(), self.root.removeprefix("gs://")
        else:
            import pyarrow as pa
            from pyarrow import fs as pafs

            try:
                self._filesystem, self.base = pafs.FileSystem.from_uri(self.root)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise InvalidArgumentError(f"{setting}={root!r} is not a supported location: {e}") from e

    @property
    def filesystem(self) -> "pafs.FileSystem":
        """pyarrow's filesystem of the root (a local root's is opened on first use)."""
        if self._filesystem is None:
            from pyarrow import fs as pafs

            self._filesystem = pafs.LocalFileSystem()
        return self._filesystem

    def uri(self, path: str) -> str:
        """A path under :attr:`base` as the user names it (a URI for object stores)."""
        if self.is_local:
            return path
        return f"{self.root.split('://', 1)[0]}://{path}"

    def exists(self, path: str) -> bool:
        if self.is_local:
            return os.path.exists(path)
        from pyarrow import fs as pafs

        return self.filesystem.get_file_info(path).type != pafs.FileType.NotFound

    def children(self, directory: str) -> list[str]:
        """The names of the directories right under ``directory`` (none if it does not exist)."""
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(directory, allow_not_found=True)
        return sorted(i.base_name for i in self.filesystem.get_file_info(selector) if i.type == pafs.FileType.Directory)

    def read_text(self, path: str) -> str:
        if self.is_local:
            return Path(path).read_text()
        with self.filesystem.open_input_stream(path, compression=None) as f:
            return f.read().decode()

    def write_atomic(self, path: str, write: Callable[[IO[bytes]], None]) -> int:
        """Write ``path`` whole or not at all with ``write(stream)``; returns its size in bytes."""
        if self.is_local:
            _write_local(path, write)
            return os.path.getsize(path)
        import pyarrow as pa

        buffer = pa.BufferOutputStream()
        write(buffer)
        with self.filesystem.open_output_stream(path, compression=None) as out:  # bytes as given, whatever the suffix
            out.write(buffer.getvalue())
        return self.filesystem.get_file_info(path).size

    def delete_file(self, path: str) -> None:
        if self.is_local:
            os.unlink(path)
        else:
            self.filesystem.delete_file(path)

    def delete_tree(self, directory: str) -> bool:
        """Remove ``directory`` and everything under it; False if it did not exist."""
        if not self.exists(directory):
            return False
        self.filesystem.delete_dir_contents(directory, missing_dir_ok=True)
        if self.exists(directory):  # an object store may have no marker object for the directory itself
            self.filesystem.delete_dir(directory)
        return True

    def check_writable(self, directory: str) -> None:
        """Write and remove a probe file under ``directory``, naming the setting if that fails."""
        probe = f"{directory}/.probe-{uuid.uuid4().hex}"
        try:
            self.write_atomic(probe, lambda out: out.write(b"probe"))
            self.delete_file(probe)
        except OSError as e:
            raise InvalidArgumentError(
                f"{self.setting}={self.root!r} is not writable ({e}): point it at a directory (or bucket) "
                "this process may write, or fix its permissions"
            ) from e


PRIVATE_FILE, PRIVATE_DIRECTORY = 0o600, 0o700  # landing files hold whole rows: the service's user only


def _write_local(path: str, write: Callable[[IO[bytes]], None]) -> None:
    directory = os.path.dirname(path)
    _private_directories(directory)
    temporary = os.path.join(directory, f".{uuid.uuid4().hex}.tmp")
    try:
        with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE), "wb") as out:
            write(out)
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


def _private_directories(directory: str) -> None:
    """``directory`` and each missing parent, created without group or world access whatever the
    process's umask (``os.makedirs`` gives its mode to the last directory only)."""
    if not directory or os.path.isdir(directory):
        return
    _private_directories(os.path.dirname(directory))
    try:
        os.mkdir(directory, PRIVATE_DIRECTORY)
    except FileExistsError:  # another writer made it meanwhile
        pass
