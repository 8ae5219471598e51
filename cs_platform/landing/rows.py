"""A partition batch as landing rows: one row per mod, every field of its record kept.

Mod values stay in Spanner's JSON wire encoding (lossless; the lake casts them by column type).
The identity of a row is (server_transaction_id, record_sequence, mod_index): a replayed or
re-landed read produces rows with the same identity, which the changelog removes.
"""

from __future__ import annotations

import json

import pyarrow as pa

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


def batch_to_table(batch: PartitionBatch) -> pa.Table:
    columns: dict[str, list] = {name: [] for name in LANDING_SCHEMA.names}
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    for record in batch.records:
        types = column_types_json(record.column_types)
        for index, mod in enumerate(record.mods):
            columns["commit_timestamp"].append(record.commit_timestamp)
            columns["server_transaction_id"].append(record.server_transaction_id)
            columns["record_sequence"].append(record.record_sequence)
            columns["mod_index"].append(index)
            columns["table_name"].append(record.table_name)
            columns["mod_type"].append(record.mod_type.value)
            columns["keys"].append(dumps(dict(mod.keys)))
            columns["new_values"].append(dumps(dict(mod.new_values)))
            columns["old_values"].append(dumps(dict(mod.old_values)))
            columns["column_types"].append(types)
            columns["value_capture_type"].append(record.value_capture_type.value)
            columns["number_of_records_in_transaction"].append(record.number_of_records_in_transaction)
            columns["number_of_partitions_in_transaction"].append(record.number_of_partitions_in_transaction)
            columns["is_last_record_in_transaction_in_partition"].append(
                record.is_last_record_in_transaction_in_partition
            )
            columns["transaction_tag"].append(record.transaction_tag)
            columns["is_system_transaction"].append(record.is_system_transaction)
            columns["partition_token"].append(record.partition_token)
    pool = LANDING_MEMORY_POOL
    return pa.Table.from_arrays(
        [pa.array(columns[f.name], type=f.type, memory_pool=pool) for f in LANDING_SCHEMA], schema=LANDING_SCHEMA
    )
