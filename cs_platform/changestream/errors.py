"""Named errors of the reader core, each in one of the project's two families
(``cs_platform.errors``: transient, a retry from the last safe point may succeed; terminal, it
cannot). Every message names the offending thing and the fix.
"""

from __future__ import annotations

from cs_platform.errors import TerminalError, TransientError


class InvalidIdentifierError(TerminalError, ValueError):
    """Raised when a name that ends up in SQL (stream, table) is not a plain Spanner identifier."""


class SettingsDriftError(TerminalError):
    """Raised when a configured start or end differs from the one the stream was started with."""


class UnknownChangeStreamError(TerminalError):
    """Raised when the database has no change stream of the configured name."""


class StartTimestampOutOfRangeError(TerminalError):
    """Raised when a start timestamp is before the stream existed or outside its retention."""


class InvalidPartitionTokenError(TerminalError):
    """Raised when Spanner rejects a partition token (not one of this stream's tokens)."""


class DatabaseNotFoundError(TerminalError):
    """Raised when the configured instance or database does not exist."""


class SpannerUnreachableError(TerminalError):
    """Raised when Spanner (or the emulator) does not answer at the configured address in time."""


class CredentialsError(TerminalError):
    """Raised when no usable Google credentials are configured."""


class MalformedRecordError(TerminalError):
    """Raised when a change stream row does not have the shape of a documented record."""


class PartitionEndedWithoutChildrenError(TerminalError):
    """Raised when a partition query ends before its end timestamp without child partitions.

    Spanner always reports children before ending a partition early; an early end without them
    means records would be lost if the partition were marked finished (Debezium lost data so).
    """


class FencedOffError(TerminalError):
    """Raised when a reader persists progress for a partition another reader has taken since.

    The sensor presumes a run dead once it stops landing and launches another, which takes the
    partition; the first run, alive after all (a paused VM, a long GC), must then move nothing:
    its watermark could pass records that only its late, possibly skipped, files hold.
    """


class MetadataContentionError(TransientError):
    """Raised when a partition metadata transaction kept aborting past its retry deadline.

    Spanner aborts the loser of a lock conflict and the client retries it; past the deadline the
    same transaction may still succeed later (the sensor's next tick, the reader's next landing),
    so the caller retries it on its own schedule instead of failing for good.
    """


class PartitionNotFoundError(TerminalError):
    """Raised when the metadata table has no row for a partition token."""


class SnapshotTooOldError(TerminalError):
    """Raised when a snapshot's read timestamp is older than the database keeps versions for."""


class WatchedTableMissingError(TerminalError):
    """Raised when a table the change stream watches cannot be read (dropped, or renamed)."""


class UnsupportedColumnTypeError(TerminalError):
    """Raised when a watched column's type has no mapping in cs_platform."""


class ResultTooLargeError(TerminalError):
    """Raised when Spanner cannot hold a query's result in memory (the emulator caps it at 128 MB).
    The reader narrows its query window and reads on; raised only when even a narrow one fails."""
