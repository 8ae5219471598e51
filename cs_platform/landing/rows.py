"""A partition batch as landing rows: one row per mod, every field of its record kept.

Mod values stay in Spanner's JSON wire encoding (lossless; the lake casts them by column type).
The identity of a row is (server_transaction_id, record_sequence, mod_index): a replayed or
re-landed read produces rows with the same identity, which the changelog removes.
"""

from __future__ import annotations

import io
import json
from datetime import datetime
from typing import Iterator

import pyarrow as pa
import pyarrow.json as pa_json

from cs_platform.changestream.reader import PartitionBatch
from cs_platform.changestream.records import ColumnType

LANDING_SCHEMA = pa.schema(
    [
        ("commit_timestamp", pa.timestamp("us", tz="UTC")),
        ("server_transaction_id", pa.string()),
        ("record_sequence", pa.string()),
        ("mod_index", pa.int32()),
        ("table_name", pa.string()),
        ("mod_type", pa.string()),
        ("keys", pa.string()),
        ("new_values", pa.string()),
        ("old_values", pa.string()),
        ("column_types", pa.string()),
        ("value_capture_type", pa.string()),
        ("number_of_records_in_transaction", pa.int64()),
        ("number_of_partitions_in_transaction", pa.int64()),
        ("is_last_record_in_transaction_in_partition", pa.bool_()),
        ("transaction_tag", pa.string()),
        ("is_system_transaction", pa.bool_()),
        ("partition_token", pa.string()),
    ]
)

IDENTITY = ("server_transaction_id", "record_sequence", "mod_index")  # one change; the changelog merges on it


# A reader run lands a chunk and then holds nothing of it: the system allocator gives that memory
# back, where pyarrow's default pool (mimalloc) keeps its high-water mark for the run's lifetime.
LANDING_MEMORY_POOL = pa.system_memory_pool()

# Columns that repeat within a file (one value per transaction, table or partition) are dictionary
# encoded; the mod values and keys are mostly unique, and a dictionary for them only costs memory.
DICTIONARY_COLUMNS = [
    "server_transaction_id", "record_sequence", "table_name", "mod_type", "column_types",
    "value_capture_type", "transaction_tag", "partition_token",
]


def column_types_json(column_types: tuple[ColumnType, ...]) -> str:
    return json.dumps(
        [
            {"name": c.name, "type": c.type, "is_primary_key": c.is_primary_key, "ordinal_position": c.ordinal_position}
            for c in column_types
        ],
        separators=(",", ":"),
    )


def batch_to_tables(batch: PartitionBatch, rows_per_table: int) -> Iterator[pa.Table]:
    """One row per mod of ``batch``, as Arrow tables of at most ``rows_per_table`` rows each.

    A landing write converts and writes one table before building the next, so its memory holds one
    slice of the chunk in every form (JSON lines, Arrow, Parquet pages), not the whole chunk in each.

    Built by Arrow's JSON reader from one JSON line per row, not by ``pa.array`` over Python lists:
    the first ``pa.array`` of a process imports pandas (pyarrow looks for pandas types in its
    argument), some 40 MB that a reader run otherwise never needs. Timestamps go through ISO 8601
    with microseconds, the precision of the column."""
    encode = json.JSONEncoder(separators=(",", ":")).encode
    lines: list[str] = []
    for record in batch.records:
        shared = {
            "commit_timestamp": datetime.isoformat(record.commit_timestamp, timespec="microseconds"),
            "server_transaction_id": record.server_transaction_id,
            "record_sequence": record.record_sequence,
            "table_name": record.table_name,
            "mod_type": record.mod_type.value,
            "column_types": column_types_json(record.column_types),
            "value_capture_type": record.value_capture_type.value,
            "number_of_records_in_transaction": record.number_of_records_in_transaction,
            "number_of_partitions_in_transaction": record.number_of_partitions_in_transaction,
            "is_last_record_in_transaction_in_partition": record.is_last_record_in_transaction_in_partition,
            "transaction_tag": record.transaction_tag,
            "is_system_transaction": record.is_system_transaction,
            "partition_token": record.partition_token,
        }
        for index, mod in enumerate(record.mods):
            values = {"keys": encode(dict(mod.keys)), "new_values": encode(dict(mod.new_values)), "old_values": encode(dict(mod.old_values))}
            lines.append(encode({**shared, "mod_index": index, **values}))
            if len(lines) == rows_per_table:
                yield _parse(lines)
                lines = []
    if lines:
        yield _parse(lines)


def _parse(lines: list[str]) -> pa.Table:
    text = "\n".join(lines).encode()
    return pa_json.read_json(
        io.BytesIO(text),
        read_options=pa_json.ReadOptions(use_threads=False, block_size=len(text) + 1),  # a block never splits a line
        parse_options=pa_json.ParseOptions(explicit_schema=LANDING_SCHEMA, unexpected_field_behavior="error"),
        memory_pool=LANDING_MEMORY_POOL,
    )  # columns in the explicit schema's order
