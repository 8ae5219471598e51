"""A streamed query's responses joined into its values (``google/spanner/v1/spanner.proto``,
``PartialResultSet``): what the Cloud Spanner front reads of the emulator's answers before it
re-frames them."""

from google.protobuf import struct_pb2


def merge(head: struct_pb2.Value, tail: struct_pb2.Value) -> struct_pb2.Value:
    """Join a chunked value with its continuation (spanner.proto, PartialResultSet.chunked_value:
    strings are concatenated; lists are concatenated, their meeting elements merged the same way)."""
    if head.HasField("string_value"):
        return struct_pb2.Value(string_value=head.string_value + tail.string_value)
    items = list(head.list_value.values)
    more = list(tail.list_value.values)
    if items and more and items[-1].WhichOneof("kind") in ("string_value", "list_value") and items[-1].WhichOneof("kind") == more[0].WhichOneof("kind"):
        items[-1] = merge(items[-1], more.pop(0))
    return struct_pb2.Value(list_value=struct_pb2.ListValue(values=items + more))


def complete_values(responses: list) -> list[struct_pb2.Value]:
    """The complete values of one query's responses (one column: one value per row)."""
    values: list[struct_pb2.Value] = []
    chunked = False
    for response in responses:
        incoming = list(response.values)
        if chunked and incoming:
            values[-1] = merge(values[-1], incoming.pop(0))
        values += incoming
        chunked = response.chunked_value
    return values
