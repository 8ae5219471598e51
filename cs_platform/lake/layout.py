"""Where a stream's lake lives under the lake root: one directory per stream. Imports nothing, so
the code location (every reader run loads it) names a lake without loading pyarrow or Spark."""

from __future__ import annotations


def stream_root(root: str, stream: str) -> str:
    """Stream ``stream``'s lake under the lake root ``root`` (its name checked by the caller, as
    every stream name is, ``validate_identifier``)."""
    return f"{root.rstrip('/')}/{stream}"
