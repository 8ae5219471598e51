"""The published cuts of a lake, read from its manifest's Delta log alone: no Spark, no Delta reader.

Every manifest commit that publishes a cut records it in its ``userMetadata``: the cut, the cut
before it and the version of every mirror at the cut (:class:`PublishedCut`). A maintenance pass
that drops old cuts records, in its own commit, the oldest cut it kept (``expired_before``), and
keeps the manifest's log back to that cut (``maintenance``). So the log alone says which cuts a
reader may open and at which versions, on any engine: this module is what the ``cs-platform-lake``
command and :mod:`cs_platform.lake.engines` are built on, and it imports nothing of Spark.

A cut is published after every mirror it names committed, so a cut read here is complete; a cut
being applied is not here yet.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime

from cs_platform.lake.delta_log import DeltaLog
from cs_platform.storage.location import Location

ROOT_SETTING = "CS_PLATFORM_LAKE_ROOT"
MARKS = "ingested_upto"  # a changelog commit's userMetadata key: {landing directory: last file name ingested}
EXPIRED_BEFORE = "expired_before"  # what a maintenance commit that dropped cuts records



class CutNotFoundError(KeyError):
    """The cut asked for is not published (not a cut, or no longer kept)."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


@dataclass(frozen=True)
class PublishedCut:
    """A cut as its manifest commit recorded it (the commit's ``userMetadata``). ``frozen`` names
    the mirrors of tables the stream no longer watches (taken out of it, dropped, or renamed), each
    with the first cut that found it so: such a mirror keeps its last rows, at the version the cut
    names, and no later change reaches it. ``shapes`` holds, per live mirror, the digest of its
    table's watched columns its rows have (``catalog.shape``): a table whose digest
    at a cut differs was reshaped by DDL, and is read whole at that cut (``lake_steps``)."""

    cut: datetime
    versions: dict[str, int]
    previous: datetime | None = None
    frozen: dict[str, datetime] = field(default_factory=dict)
    shapes: dict[str, str] = field(default_factory=dict)
    seconds: float | None = None  # how long applying and publishing it took (None: not recorded)

    def to_json(self) -> str:
        previous = self.previous and self.previous.isoformat()
        recorded = {"cut": self.cut.isoformat(), "previous": previous, "versions": self.versions}
        if self.frozen:
            recorded["frozen"] = {table: since.isoformat() for table, since in sorted(self.frozen.items())}
        if self.shapes:
            recorded["shapes"] = dict(sorted(self.shapes.items()))
        if self.seconds is not None:
            recorded["seconds"] = round(self.seconds, 3)
        return json.dumps(recorded)

    @classmethod
    def from_json(cls, recorded: dict) -> PublishedCut:
        previous = recorded.get("previous")
        return cls(
            datetime.fromisoformat(recorded["cut"]),
            {t: int(v) for t, v in recorded["versions"].items()},
            datetime.fromisoformat(previous) if previous else None,
            {t: datetime.fromisoformat(since) for t, since in recorded.get("frozen", {}).items()},
            recorded.get("shapes", {}),
            recorded.get("seconds"),
        )


def cut_record(cut: datetime, previous: datetime | None) -> str:
    """What every mirror commit of a cut records in its ``userMetadata``: the cut it belongs to."""
    return json.dumps({"cut": cut.isoformat(), "previous": previous and previous.isoformat()})


def cut_of_version(location: Location, table: str, version: int) -> datetime | None:
    """The cut a version of ``table``'s mirror belongs to: the one its newest commit at or before
    ``version`` that names a cut recorded (None for a mirror written before commits named it)."""
    recorded = (r for v, r in mirror_log(location, table).recorded() if v <= version and "cut" in r)
    found = next(recorded, None)
    return datetime.fromisoformat(found["cut"]) if found else None


def absolute_root(root: str) -> str:
    """`ALTER TABLE delta.`<path>`` needs an absolute path; a relative local root would fail there."""
    return root.rstrip("/") if "://" in root else os.path.abspath(root)


def lake_location(root: str) -> Location:
    """The location of the lake of one stream (``<CS_PLATFORM_LAKE_ROOT>/<stream>``)."""
    return Location(absolute_root(root), ROOT_SETTING)


def manifest_log(location: Location) -> DeltaLog:
    return DeltaLog.under(location, "manifest")


def mirror_log(location: Location, table: str) -> DeltaLog:
    return DeltaLog.under(location, "mirrors", table)


def history_log(location: Location, table: str) -> DeltaLog:
    return DeltaLog.under(location, "history", table)


def ingested_landing(root: str) -> dict[str, str]:
    """What the changelog of the lake at ``root`` has ingested, per landing directory (the last file
    name; ``changelog.Changelog.ingest`` records it): read from its Delta log, without Spark."""
    return (DeltaLog.under(lake_location(root), "changelog").last_commit_metadata() or {}).get(MARKS, {})


def latest_cut(location: Location) -> PublishedCut | None:
    """The latest published cut: the newest manifest commit that recorded one (one or two commit
    files read). None if no cut was published, or the manifest predates commits recording cuts."""
    return next((PublishedCut.from_json(r) for _, r in manifest_log(location).recorded() if "cut" in r), None)


def published_cuts(location: Location) -> list[PublishedCut]:
    """Every kept cut, oldest first. Reads every commit file of the manifest's log (concurrently;
    the log reaches back to the oldest kept cut, see ``maintenance``); a cut published twice (a
    mirror rebuilt at the latest cut records new versions) counts as recorded last."""
    cuts: dict[datetime, PublishedCut] = {}
    expired: datetime | None = None
    for _, recorded in manifest_log(location).all_recorded():
        if "cut" in recorded:
            published = PublishedCut.from_json(recorded)
            cuts[published.cut] = published
        if EXPIRED_BEFORE in recorded:
            expired = datetime.fromisoformat(recorded[EXPIRED_BEFORE])
    return [c for _, c in sorted(cuts.items()) if expired is None or c.cut >= expired]


def published_cut(location: Location, cut: datetime | None = None) -> PublishedCut:
    """The cut at ``cut`` exactly, or the latest if None; :class:`CutNotFoundError` if not published."""
    if cut is None:
        latest = latest_cut(location)
        if latest is None:
            raise CutNotFoundError(f"no cut is published in {manifest_log(location).uri} yet")
        return latest
    if cut.tzinfo is None:
        raise ValueError(f"cut {cut.isoformat()} has no time zone: give it in UTC, as published cuts are")
    # Newest first, stopping at the cut: cuts grow with the manifest's versions, and a maintenance
    # commit that dropped the cut is newer than the cut's own commit.
    for _, recorded in manifest_log(location).recorded():
        if EXPIRED_BEFORE in recorded and datetime.fromisoformat(recorded[EXPIRED_BEFORE]) > cut:
            break
        published = PublishedCut.from_json(recorded) if "cut" in recorded else None
        if published is not None and published.cut == cut:
            return published
        if published is not None and published.cut < cut:
            break
    raise CutNotFoundError(
        f"no cut at {cut.isoformat()} in {manifest_log(location).uri}: not a cut, or older than the cuts lake "
        "maintenance keeps (CS_PLATFORM_LAKE_KEPT_CUTS_SECONDS); `cs-platform-lake cuts <lake>` lists the kept ones"
    )
