"""A partition batch as landing rows: one JSON line per mod, every field of its record kept, gzipped.

Mod values stay in Spanner's JSON wire encoding (lossless; the lake casts them by column type).
The identity of a row is (server_transaction_id, record_sequence, mod_index): a replayed or
re-landed read produces rows with the same identity, which the changelog removes.

Written with the standard library alone: a reader run loads neither pyarrow nor Spark (pyarrow is
some 40 MB of a reader run's memory, and building Arrow and Parquet from a chunk some 20 more).
Spark reads the lines with the columns given below, failing on any line that does not fit them.
"""

from __future__ import annotations

import gzip
import json
from datetime import datetime
from typing import IO

from cs_platform.changestream.reader import PartitionBatch
from cs_platform.changestream.records import ColumnType

# Every landing row's columns and their types (Spark SQL type names), in order.
LANDING_COLUMNS: tuple[tuple[str, str], ...] = (
    ("commit_timestamp", "TIMESTAMP"),
    ("server_transaction_id", "STRING"),
    ("record_sequence", "STRING"),
    ("mod_index", "INT"),
    ("table_name", "STRING"),
    ("mod_type", "STRING"),
    ("keys", "STRING"),
    ("new_values", "STRING"),
    ("old_values", "STRING"),
    ("column_types", "STRING"),
    ("value_capture_type", "STRING"),
    ("number_of_records_in_transaction", "BIGINT"),
    ("number_of_partitions_in_transaction", "BIGINT"),
    ("is_last_record_in_transaction_in_partition", "BOOLEAN"),
    ("transaction_tag", "STRING"),
    ("is_system_transaction", "BOOLEAN"),
    ("partition_token", "STRING"),
)

IDENTITY = ("server_transaction_id", "record_sequence", "mod_index")  # one change; the changelog merges on it

# How commit_timestamp is written (ISO 8601, microseconds, UTC offset), as a Spark datetime pattern.
TIMESTAMP_PATTERN = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"

# zlib's level 6: within a few percent of the smallest file, at a fraction of level 9's time.
COMPRESS_LEVEL = 6


def column_types_json(column_types: tuple[ColumnType, ...]) -> str:
    return json.dumps(
        [
            {"name": c.name, "type": c.type, "is_primary_key": c.is_primary_key, "ordinal_position": c.ordinal_position}
            for c in column_types
        ],
        separators=(",", ":"),
    )


def write_rows(batch: PartitionBatch, out: IO[bytes]) -> None:
    """Write one JSON line per mod of ``batch`` to ``out``, gzip-compressed.

    A record's lines are encoded and compressed before the next record's, so the write holds one
    record's lines, not the chunk's. The gzip header carries no time stamp: landing the same read
    again writes the same bytes (nor the temporary file's name)."""
    encode = json.JSONEncoder(separators=(",", ":")).encode
    with gzip.GzipFile(filename="", mode="wb", compresslevel=COMPRESS_LEVEL, fileobj=out, mtime=0) as compressed:
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
            lines = []
            for index, mod in enumerate(record.mods):
                values = {"keys": encode(dict(mod.keys)), "new_values": encode(dict(mod.new_values)), "old_values": encode(dict(mod.old_values))}
                lines.append(encode({**shared, "mod_index": index, **values}))
            if lines:
                compressed.write(("\n".join(lines) + "\n").encode())
