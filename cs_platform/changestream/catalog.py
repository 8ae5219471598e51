"""What the source database says about its change streams (``INFORMATION_SCHEMA``).

Lower-case names work in both dialects: GoogleSQL names are case-insensitive, PostgreSQL folds
unquoted names to lower case.
"""

from __future__ import annotations

from google.cloud.spanner_v1.database import Database

from cs_platform.changestream.errors import UnknownChangeStreamError


def change_streams(database: Database, timeout_s: float = 30.0) -> list[str]:
    with database.snapshot() as snap:
        rows = snap.execute_sql("SELECT change_stream_name FROM information_schema.change_streams", timeout=timeout_s)
        return sorted(r[0] for r in rows)


def require_change_stream(database: Database, stream: str, timeout_s: float = 30.0) -> None:
    """Raise :class:`UnknownChangeStreamError` naming the streams that do exist if ``stream`` does not."""
    found = change_streams(database, timeout_s)
    if stream not in found:
        raise UnknownChangeStreamError(
            f"change stream {stream!r} does not exist in database {database.database_id!r} (it has: "
            f"{', '.join(found) or 'none'}): create it (CREATE CHANGE STREAM {stream} FOR …) or fix "
            "CS_PLATFORM_CHANGE_STREAMS"
        )
