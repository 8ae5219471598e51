"""The Cloud Spanner front: a gRPC server on loopback (``server``) that forwards every call to the
emulator, streams change stream queries the way Cloud Spanner does, and, as configured, fails them
and metadata commits the way Cloud Spanner does.

**Streaming.** Cloud Spanner streams a change stream query whose end timestamp is still ahead:
records as they commit, heartbeats while there are none, the query ending at its end timestamp
(https://cloud.google.com/spanner/docs/change-streams/details#query). The emulator, asked the same,
loses commits that fall on its internal scan boundaries (``changestream/tail.py``). The front
serves such a query as Cloud Spanner would, built from settled reads underneath: it asks the
emulator for contiguous windows ``[cursor, min(end, now - settle)]`` that are already past (each one
inclusive scan, nothing lost), every ``poll`` seconds, and forwards their responses on the one
stream until the end timestamp or the partition's end (a child partitions record). Each response
it forwards carries a resume token of the front's own, so the client library's resume after
``UNAVAILABLE`` or a reset stream continues exactly after it (spanner.proto, PartialResultSet:
"resume_token ... can be used to resume the stream from this point").

**Faults.** The emulator answers every call it gets; Cloud Spanner sometimes does not. What the reader must
survive is written down by Google, and this front plays it through the real client library, so the
client's own retries, ``translate_error`` and the reader's resume all meet a real gRPC status:

- ``UNAVAILABLE`` and ``INTERNAL`` with ``Received RST_STREAM`` mid-stream: a server or link
  that goes away (https://cloud.google.com/spanner/docs/error-codes: retry UNAVAILABLE; the client
  resumes an INTERNAL stream reset, ``google.cloud.spanner_v1._helpers._STREAM_RESUMPTION_INTERNAL_ERROR_MESSAGES``);
- ``DEADLINE_EXCEEDED`` (error-codes: "the deadline expired before the operation could complete");
- ``RESOURCE_EXHAUSTED``: a quota or throttling refusal (error-codes: "retry using exponential
  backoff"), or the server running out of memory for a query's result (narrow the query);
- ``NOT_FOUND`` "Session not found" (https://cloud.google.com/spanner/docs/sessions: a session
  the server deleted; the client creates another and the call is retried);
- ``ABORTED`` on a read-write transaction's commit (error-codes: "retry the whole transaction"); the
  front rolls the transaction back at the emulator first, as an aborted transaction holds no locks
  (spanner.proto, ``Rollback``: "releasing any locks it holds"): the emulator runs one read-write
  transaction at a time and would abort every retry while the abandoned one lived;
- stalls and slow links: responses held back, or each delayed.

**Cloud Spanner's partitioning.** A stream may be re-partitioned by key range into many partitions,
with transactions spread over them (``key_ranges``): presented as MUTABLE_KEY_RANGE
(``mutable_key_range``), key ranges move between live partitions; in IMMUTABLE_KEY_RANGE,
partitions split and merge (``immutable_rows`` writes their records as the emulator would).

**PROTO and ENUM columns.** The emulator streams a proto bundle's columns with their types spelled
by name and NULL values; for a database it is told of, the front sends their types and values as
Cloud Spanner does, read from the emulator at the commit timestamp (``proto_columns``).

Nothing the front does changes what the emulator committed or returns: a fault ends or delays a
call, and every row that reaches the client is one the emulator sent, unchanged (a streamed query's
responses are re-framed only: the front's resume tokens, the row type once, ``last`` at the end),
but for the proto columns it fills in from the emulator's own reads. ``python -m
cs_platform.dev.front.server --help`` runs one in front of a running emulator. What it reads of the
emulator's streamed answers is joined by ``partial_results``.

Python API::

    from cs_platform.dev.front.server import Fault, SpannerFront

    with SpannerFront(upstream="127.0.0.1:9010") as front:      # its address: front.host
        front.inject(Fault(StatusCode.UNAVAILABLE, after_responses=3))   # the next change stream query
        front.present_mutable(database_id, "S")                   # S as MUTABLE_KEY_RANGE (mutable_key_range)
        front.partition_by_key_range(database_id, "S", partitions=48)   # ... in 48 partitions (key_ranges)
        front.fill_proto_columns(database_id)                     # its PROTO and ENUM columns streamed (proto_columns)
        ... point SPANNER_EMULATOR_HOST at front.host ...
        front.injected                                            # the faults that fired, in order
"""
