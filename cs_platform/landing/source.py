"""Which source a landing root or lake belongs to, recorded in a ``_source.json`` marker.

A change's identity (server_transaction_id, record_sequence, mod_index) is unique only within one
source: the emulator restarts its transaction ids with every process, and two databases share
nothing. Files of another source must therefore never meet in one changelog, where identity would
silently de-duplicate them away (DESIGN invariant 7). The first writer records its source; every
later writer or reader must present the same one, or is refused with both named.

The epoch tells two lives of the same database and stream apart: the creation time of the stream's
initial partition row in the metadata table (a reset or a new emulator process gives a new one).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from cs_platform.errors import TerminalError
from cs_platform.storage.location import Location

MARKER = "_source.json"


class SourceMismatchError(TerminalError):
    """Raised when a landing root or lake already belongs to another source or epoch."""


@dataclass(frozen=True)
class SourceIdentity:
    project: str
    instance: str
    database: str
    stream: str
    epoch: str  # creation time of the initial partition row, RFC 3339 UTC

    def describe(self) -> str:
        return f"projects/{self.project}/instances/{self.instance}/databases/{self.database} stream {self.stream} (epoch {self.epoch})"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "SourceIdentity":
        return cls(**json.loads(text))


def bind(location: Location, directory: str, source: SourceIdentity, what: str) -> None:
    """Record ``source`` as the owner of ``directory`` if it has none; refuse any other owner."""
    marker = f"{directory}/{MARKER}"
    if not location.exists(marker):
        location.write_atomic(marker, lambda out: out.write(source.to_json().encode()))
    check_owner(location, directory, source, what)


def check_owner(location: Location, directory: str, source: SourceIdentity, what: str) -> None:
    """Refuse ``directory`` if it records an owner other than ``source`` (one without a marker passes)."""
    owner = owner_of(location, directory)
    if owner is not None and owner != source:
        raise SourceMismatchError(
            f"{what} {location.uri(directory)} belongs to {owner.describe()}, not to {source.describe()}. "
            f"Nothing was written, ingested or dropped. Point {location.setting} at a directory of this source, "
            "or, to start this stream over, reset it (python -m cs_platform.reset, see docs/settings.md)."
        )


def owner_of(location: Location, directory: str) -> SourceIdentity | None:
    marker = f"{directory}/{MARKER}"
    return SourceIdentity.from_json(location.read_text(marker)) if location.exists(marker) else None
