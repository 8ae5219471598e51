"""What a Delta table's log says, read from its ``_delta_log`` commit files: no Spark, no Delta reader.

Facts a cut needs on every run (does the table exist, its latest version, what its last commit
recorded) and what a reader on any engine needs to open a cut (which versions the manifest's
commits recorded) are in the commit files themselves: reading them starts no Spark job, and
nothing read grows with the table's data.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator, Self

from pyarrow import fs as pafs

from cs_platform.storage.location import Location

_LOG = "_delta_log"
_COMMIT = ".json"
CLAIM = "claimed_by"  # what a claim of the lake's fence records (``lake.fence``): no cut, no ingest marks  # <20-digit version>.json: one commit; checkpoints and .crc files are ignored


@dataclass(frozen=True)
class DeltaLog:
    """The log of the Delta table at ``path`` (as ``location.filesystem`` names it, under ``location.base``)."""

    location: Location
    path: str

    @classmethod
    def under(cls, location: Location, *parts: str) -> Self:
        return cls(location, "/".join((location.base, *parts)))

    @property
    def uri(self) -> str:
        """The path as Spark names it (a URI for object stores)."""
        return self.location.uri(self.path)

    def _commits(self) -> list[int]:
        selector = pafs.FileSelector(f"{self.path}/{_LOG}", allow_not_found=True)
        return sorted(
            int(name[: -len(_COMMIT)])
            for info in self.location.filesystem.get_file_info(selector)
            if (name := info.base_name).endswith(_COMMIT) and name[: -len(_COMMIT)].isdigit()
        )

    def version(self) -> int | None:
        """The latest committed version; None if there is no table here."""
        commits = self._commits()
        return commits[-1] if commits else None

    def exists(self) -> bool:
        return self.version() is not None

    def _commit(self, version: int) -> list[dict[str, Any]]:
        text = self.location.read_text(f"{self.path}/{_LOG}/{version:020d}{_COMMIT}")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def commit_timestamp(self, version: int) -> datetime:
        """When ``version`` was committed, by its writer's clock."""
        return datetime.fromtimestamp(self._commit_info(version)["timestamp"] / 1000, timezone.utc)

    def _commit_info(self, version: int) -> dict[str, Any]:
        """The commit's ``commitInfo`` action; empty for a commit a writer recorded none in."""
        return next((action["commitInfo"] for action in self._commit(version) if "commitInfo" in action), {})

    def commit_metrics(self, version: int) -> dict[str, str]:
        """The ``operationMetrics`` ``version``'s commit recorded (numOutputRows, ...)."""
        return self._commit_info(version).get("operationMetrics", {})

    def recorded(self, claims: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
        """(version, what it recorded) of each commit that recorded ``userMetadata`` (a JSON
        object), newest first; commits without it (maintenance, say) are passed over, and so are
        the fence's claims unless ``claims``. Lazy: a caller after the latest record reads one or
        two commit files, not the whole log."""
        for version in reversed(self._commits()):
            metadata = self._recorded_in(version)
            if metadata is not None and (claims or CLAIM not in metadata):
                yield version, metadata

    def all_recorded(self, workers: int = 16) -> list[tuple[int, dict[str, Any]]]:
        """:meth:`recorded` for every commit, oldest first, reading the commit files ``workers`` at a
        time: a listing of a log with a commit every few seconds reads thousands of small files, and on
        an object store each is a round trip."""
        versions = self._commits()
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="delta-log") as pool:
            found = pool.map(self._recorded_in, versions)
        return [(version, metadata) for version, metadata in zip(versions, found) if metadata is not None and CLAIM not in metadata]

    def _recorded_in(self, version: int) -> dict[str, Any] | None:
        metadata = self._commit_info(version).get("userMetadata")
        return json.loads(metadata) if metadata else None

    def last_commit_metadata(self) -> dict[str, Any] | None:
        """What the latest commit that recorded ``userMetadata`` recorded; None if none did."""
        return next((metadata for _, metadata in self.recorded()), None)
