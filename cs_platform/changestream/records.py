"""Change stream records as immutable values.

Field names and meanings follow Spanner's record reference (GoogleSQL and PostgreSQL share them).
Mod values stay in Spanner's JSON wire encoding (INT64 and NUMERIC as strings, BYTES as base64 …):
that encoding is lossless, it is what the landing files store, and Spark casts it by column type.
:meth:`DataChangeRecord.typed_mods` decodes them to Python values when a caller needs them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping, Union

from cs_platform.changestream import values


class ModType(str, enum.Enum):
    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"


class ValueCaptureType(str, enum.Enum):
    OLD_AND_NEW_VALUES = "OLD_AND_NEW_VALUES"
    NEW_ROW = "NEW_ROW"
    NEW_VALUES = "NEW_VALUES"
    NEW_ROW_AND_OLD_VALUES = "NEW_ROW_AND_OLD_VALUES"


@dataclass(frozen=True, slots=True)
class ColumnType:
    """One column of the modified table as the record describes it.

    ``type`` is Spanner's type structure, e.g. ``{"code": "ARRAY", "array_element_type": {"code": "INT64"}}``.
    """

    name: str
    type: Mapping[str, Any]
    is_primary_key: bool
    ordinal_position: int

    @property
    def code(self) -> str:
        return self.type["code"]


@dataclass(frozen=True, slots=True)
class Mod:
    """One row change: primary key, and the new/old non-key values the capture type carries."""

    keys: Mapping[str, Any]
    new_values: Mapping[str, Any]
    old_values: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class DataChangeRecord:
    """Changes of one mod type to one table, by one transaction, in one partition."""

    partition_token: str
    commit_timestamp: datetime
    record_sequence: str
    server_transaction_id: str
    is_last_record_in_transaction_in_partition: bool
    table_name: str
    column_types: tuple[ColumnType, ...]
    mods: tuple[Mod, ...]
    mod_type: ModType
    value_capture_type: ValueCaptureType
    number_of_records_in_transaction: int
    number_of_partitions_in_transaction: int
    transaction_tag: str
    is_system_transaction: bool

    def change_ids(self) -> list[tuple[str, str, int]]:
        """Identity of each mod: (server_transaction_id, record_sequence, mod index).

        Replays and duplicate landings are removed downstream by this key (DESIGN invariant 3).
        """
        return [(self.server_transaction_id, self.record_sequence, i) for i in range(len(self.mods))]

    def typed_mods(self) -> list[Mod]:
        """The mods with values decoded to Python types by ``column_types``."""
        types = {c.name: c.type for c in self.column_types}

        def decode(row: Mapping[str, Any]) -> dict[str, Any]:
            return {name: values.decode(types[name], value) for name, value in row.items()}

        return [Mod(decode(m.keys), decode(m.new_values), decode(m.old_values)) for m in self.mods]


@dataclass(frozen=True, slots=True)
class HeartbeatRecord:
    """Every record of the partition with commit_timestamp <= ``timestamp`` has been returned."""

    partition_token: str
    timestamp: datetime


@dataclass(frozen=True, slots=True)
class ChildPartition:
    token: str
    parent_tokens: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ChildPartitionsRecord:
    """New partitions that continue (part of) this partition's key range from ``start_timestamp``."""

    partition_token: str
    start_timestamp: datetime
    record_sequence: str
    child_partitions: tuple[ChildPartition, ...]


# MUTABLE_KEY_RANGE streams (google.spanner.v1.ChangeStreamRecord, googleapis
# google/spanner/v1/change_stream.proto): partitions are announced by any live partition, end with
# an end record, and key ranges move between live partitions.


@dataclass(frozen=True, slots=True)
class PartitionStartRecord:
    """Partitions to query from ``start_timestamp`` on. Any partition may announce them, several may
    announce the same token, and the announcing partition goes on unless it is the initial query."""

    partition_token: str
    start_timestamp: datetime
    record_sequence: str
    partition_tokens: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PartitionEndRecord:
    """The partition's last record: every change it holds has a timestamp <= ``end_timestamp``."""

    partition_token: str
    end_timestamp: datetime
    record_sequence: str


@dataclass(frozen=True, slots=True)
class PartitionEventRecord:
    """Key ranges moved into this partition from ``moved_in_from`` and out of it to ``moved_out_to``
    at ``commit_timestamp``. It orders one key's changes across partitions; the lake orders every
    change by its commit timestamp at a cut every live partition has passed, so it needs no wait."""

    partition_token: str
    commit_timestamp: datetime
    record_sequence: str
    moved_in_from: tuple[str, ...]
    moved_out_to: tuple[str, ...]


ChangeRecord = Union[
    DataChangeRecord, HeartbeatRecord, ChildPartitionsRecord, PartitionStartRecord, PartitionEndRecord, PartitionEventRecord
]
