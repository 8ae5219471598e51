"""The front's gRPC server: every call forwarded to the emulator as bytes, change stream queries
served as Cloud Spanner streams them, and the faults it is told to inject (the package's docstring
is the map: what each behaviour imitates, and the Google document it follows)."""

from __future__ import annotations

import argparse
import json
import logging
import re
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable, Iterator

import grpc
from google.cloud.spanner_v1.types import CommitRequest, ExecuteSqlRequest, PartialResultSet, RollbackRequest
from google.protobuf import struct_pb2

from cs_platform.changestream.metadata import ONE_MICROSECOND, utc_now
from cs_platform.changestream.query import PartitionMode
from cs_platform.changestream.values import format_timestamp, parse_timestamp
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.front.immutable_rows import immutable_response
from cs_platform.dev.front.key_ranges import KeyRangeStats, KeyRangeStream, KeyRangeStreams
from cs_platform.dev.front.mutable_key_range import (
    END_REQUIRED,
    END_TOO_FAR,
    MAX_END_AHEAD,
    MutableStreams,
    database_of,
    emulator_records,
    is_options_query,
    response_of,
    stream_of,
    with_options_rows,
)
from cs_platform.dev.front.partial_results import complete_values
from cs_platform.dev.front.proto_columns import ProtoColumns

log = logging.getLogger(__name__)

SPANNER = "/google.spanner.v1.Spanner/"
# Server-streaming methods of google.spanner.v1.Spanner (googleapis google/spanner/v1/spanner.proto);
# every other method of every service the front forwards is unary.
STREAMING_METHODS = frozenset({SPANNER + "ExecuteStreamingSql", SPANNER + "StreamingRead", SPANNER + "BatchWrite"})
COMMIT = SPANNER + "Commit"
ROLLBACK = SPANNER + "Rollback"

# What Cloud Spanner and gRPC say, for each fault (the client library and translate_error read them).
MESSAGES = {
    grpc.StatusCode.UNAVAILABLE: "The service is currently unavailable.",
    grpc.StatusCode.INTERNAL: "Received RST_STREAM with error code 2",
    grpc.StatusCode.DEADLINE_EXCEEDED: "Deadline Exceeded",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "Quota exceeded for quota metric 'Read requests' of service 'spanner.googleapis.com'.",
    grpc.StatusCode.NOT_FOUND: "Session not found: {session}",
    grpc.StatusCode.ABORTED: "Transaction was aborted.",
}
# RESOURCE_EXHAUSTED for a result the server cannot hold in memory (the emulator caps one at 128 MB).
OUT_OF_MEMORY = "Out of memory: the query's result is too large. Reduce the query's time range."

# The arguments of a change stream query: named (GoogleSQL ``start_timestamp => @p``) or by position
# (GoogleSQL ``READ_S(@a, @b, @c, @d)``, PostgreSQL ``spanner.read_json_s($1, $2, $3, $4, …)``).
_NAMED = {name: re.compile(rf"{name}\s*=>\s*@(\w+)", re.IGNORECASE) for name in ("start_timestamp", "end_timestamp", "partition_token")}
_POSITIONAL = re.compile(r"(?:read_\w+|spanner\.read_json_\w+|spanner\.read_proto_bytes_\w+)\s*\(([^)]*)\)", re.IGNORECASE)


@dataclass(frozen=True)
class StreamArguments:
    """Which request parameters hold a change stream query's start, end and partition token."""

    start: str
    end: str
    token: str

    @classmethod
    def of(cls, sql: str) -> "StreamArguments | None":
        named = {name: pattern.search(sql) for name, pattern in _NAMED.items()}
        if all(named.values()):
            return cls(*(m.group(1) for m in named.values()))
        call = _POSITIONAL.search(sql)
        if call is None:
            return None
        names = [a.strip().lstrip("@").replace("$", "p") for a in call.group(1).split(",")]
        return cls(*names[:3]) if len(names) >= 3 else None


def _timestamp(value: struct_pb2.Value) -> datetime | None:
    if value.HasField("null_value") or not value.string_value:
        return None
    return parse_timestamp(value.string_value)


def _parsed(call) -> list:
    """A forwarded call's serialized responses, read whole and parsed."""
    return [PartialResultSet.pb().FromString(r) for r in call]


def _answer(responses: list) -> tuple:
    """A query's parsed responses as its row type (None if it sent none) and its complete rows."""
    return next((r.metadata for r in responses if r.HasField("metadata")), None), complete_values(responses)


def has_child_partitions(responses: list) -> bool:
    """Whether a change stream query's responses hold a child partitions record, the partition's end.

    GoogleSQL: a row is ``ARRAY<STRUCT<data_change_record, heartbeat_record,
    child_partitions_record>>`` (lists, field 2 the children); PostgreSQL: a JSONB object whose key
    is the record's kind (https://cloud.google.com/spanner/docs/change-streams/details)."""
    for row in complete_values(responses):
        if row.HasField("string_value"):
            if "child_partitions_record" in json.loads(row.string_value):
                return True
            continue
        for record in row.list_value.values:
            fields = record.list_value.values
            if len(fields) > 2 and fields[2].list_value.values:
                return True
    return False


def _is_postgres(sql: str) -> bool:
    return "spanner.read_" in sql.lower()


def is_change_stream_query(sql: str) -> bool:
    """A change stream query: GoogleSQL ``READ_<stream>(...)`` or PostgreSQL ``spanner.read_json_<stream>(...)``
    / ``spanner.read_proto_bytes_<stream>(...)``."""
    text = sql.lower()
    return " from read_" in text or "spanner.read_json_" in text or "spanner.read_proto_bytes_" in text


@dataclass(frozen=True)
class Fault:
    """One fault, for the next call it applies to that gets that far: a change stream query
    (``on="query"``) that has sent ``after_responses`` responses, or a read-write commit
    (``on="commit"``).

    ``code`` None with ``delay_s``: a stall (the call pauses ``delay_s`` after ``after_responses``
    responses, then goes on) or, with ``each=True``, a slow link (every response ``delay_s`` late).
    Otherwise the call ends with ``code`` after ``after_responses`` responses have reached the client
    (0: before any; a query that ends with exactly that many ends with ``code`` instead of OK), with
    ``message`` or Cloud Spanner's for that code."""

    code: grpc.StatusCode | None = None
    after_responses: int = 0
    message: str | None = None
    on: str = "query"
    delay_s: float = 0.0
    each: bool = False

    def describe(self) -> str:
        what = self.code.name if self.code else ("slow link" if self.each else "stall")
        return f"{what} on a {self.on} after {self.after_responses} responses"


@dataclass
class _Faults:
    """The faults waiting, and those that fired; shared by the server's threads."""

    pending: list[Fault] = field(default_factory=list)
    injected: list[Fault] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    live_queries: int = 0  # change stream queries served from settled windows

    def due(self, on: str, sent: int = 0) -> Fault | None:
        """The first waiting fault of kind ``on`` that a call which has sent ``sent`` responses
        reaches, taken (it fires once)."""
        with self.lock:
            for fault in self.pending:
                if fault.on == on and fault.after_responses <= sent:
                    self.pending.remove(fault)
                    self.injected.append(fault)
                    return fault
            return None


def _status_message(fault: Fault, session: str) -> str:
    return fault.message or MESSAGES[fault.code].format(session=session)


class _Forwarder(grpc.GenericRpcHandler):
    """Forwards every method to the upstream channel as bytes, with the caller's metadata and deadline."""

    def __init__(
        self, channel: grpc.Channel, faults: _Faults, mutable: MutableStreams, key_ranges: KeyRangeStreams, protos: ProtoColumns, settle: timedelta, poll_s: float
    ) -> None:
        self.channel = channel
        self.protos = protos
        self.faults = faults
        self.mutable = mutable
        self.key_ranges = key_ranges
        self.settle = settle
        self.poll_s = poll_s

    def service(self, details: grpc.HandlerCallDetails):
        method = details.method
        if method in STREAMING_METHODS:
            upstream = self.channel.unary_stream(method)
            return grpc.unary_stream_rpc_method_handler(lambda request, context: self._stream(method, upstream, request, context))
        upstream = self.channel.unary_unary(method)
        return grpc.unary_unary_rpc_method_handler(lambda request, context: self._unary(method, upstream, request, context))

    @staticmethod
    def _call_options(context: grpc.ServicerContext) -> dict:
        remaining = context.time_remaining()
        return {"metadata": context.invocation_metadata(), "timeout": remaining if remaining is not None and remaining < 1e9 else None}

    def _unary(self, method: str, upstream: Callable, request: bytes, context: grpc.ServicerContext) -> bytes:
        fault = self.faults.due("commit") if method == COMMIT else None
        if fault is not None and fault.code is not None:
            log.info("front: %s", fault.describe())
            commit = CommitRequest.pb().FromString(request)
            if fault.code == grpc.StatusCode.ABORTED and commit.transaction_id:
                self._roll_back(commit, context)
            context.abort(fault.code, _status_message(fault, commit.session))
        try:
            return upstream(request, **self._call_options(context))
        except grpc.RpcError as e:  # the emulator's own error, passed on as it is
            context.abort(e.code(), e.details())

    def _roll_back(self, commit, context: grpc.ServicerContext) -> None:
        """End at the emulator the transaction the front aborts (module docstring, ``ABORTED``)."""
        rollback = RollbackRequest.pb()(session=commit.session, transaction_id=commit.transaction_id)
        try:
            self.channel.unary_unary(ROLLBACK)(rollback.SerializeToString(), **self._call_options(context))
        except grpc.RpcError as e:  # already ended by the emulator: nothing holds its locks
            log.info("front: rolling back the aborted transaction: %s", e.details())

    def _stream(self, method: str, upstream: Callable, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        session = None  # set for a change stream query: the only streaming call faults apply to
        if method == SPANNER + "ExecuteStreamingSql":
            parsed = ExecuteSqlRequest.pb().FromString(request)
            presented = self.mutable.options_rows(parsed.session) if is_options_query(parsed.sql) else []
            if presented:
                responses = _parsed(upstream(request, **self._call_options(context)))
                yield from (r.SerializeToString() for r in with_options_rows(responses, presented))
                return
            if is_change_stream_query(parsed.sql):
                session = parsed.session
                arguments = StreamArguments.of(parsed.sql)
                mutable = self.mutable.presents(session, parsed.sql)
                if mutable:
                    if arguments is None:
                        context.abort(grpc.StatusCode.UNIMPLEMENTED, "the front reads a MUTABLE_KEY_RANGE query's arguments from bound parameters only")
                    self._refuse_unbounded(parsed, arguments, context)
                    parsed.sql = re.sub("read_proto_bytes_", "read_json_", parsed.sql, flags=re.IGNORECASE)  # the emulator's name
                    request = parsed.SerializeToString()
                stream = (database_of(session), stream_of(parsed.sql) or "")
                if self.key_ranges.covers(*stream):
                    if arguments is None:
                        context.abort(grpc.StatusCode.UNIMPLEMENTED, "the front reads a re-partitioned stream query's arguments from bound parameters only")
                    served = self._key_range(upstream, parsed, arguments, context, *stream)
                else:
                    live = self._live(upstream, parsed, arguments, context, self.mutable if mutable else None)
                    served = live.stream(context) if live is not None else None
                if served is not None:
                    with self.faults.lock:
                        self.faults.live_queries += 1
                    yield from self._faulty(served, session, None, context)
                    return
                if mutable:
                    responses = upstream(request, **self._call_options(context))
                    yield from self._faulty(self._presented(responses, parsed, arguments), session, responses, context)
                    return
                if self.protos.covers(session):
                    responses = upstream(request, **self._call_options(context))
                    filled = (r.SerializeToString() for r in self._filled(session, _parsed(responses)))
                    yield from self._faulty(filled, session, responses, context)
                    return
            elif self.protos.covers(parsed.session):
                yield from self._faulty(self.protos.schema_answer(parsed.session, upstream(request, **self._call_options(context))), None, None, context)
                return
        responses = upstream(request, **self._call_options(context))
        yield from self._faulty(responses, session, responses, context)

    @staticmethod
    def _refuse_unbounded(request, arguments: StreamArguments, context: grpc.ServicerContext) -> None:
        """A MUTABLE_KEY_RANGE query must end, and at most 30 minutes ahead."""
        end = _timestamp(request.params.fields[arguments.end]) if arguments.end in request.params.fields else None
        if end is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, END_REQUIRED)
        if end > utc_now() + MAX_END_AHEAD:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, END_TOO_FAR)

    def _presented(self, call, request, arguments: StreamArguments) -> Iterator[bytes]:
        """A forwarded query's whole answer as one MUTABLE_KEY_RANGE response."""
        params = request.params.fields
        token = params[arguments.token]
        yield self.mutable.present(
            *_answer(self._filled(request.session, _parsed(call))), None if token.HasField("null_value") else token.string_value,
            _timestamp(params[arguments.start]), _is_postgres(request.sql),
        ).SerializeToString()

    def _live(self, upstream: Callable, request, arguments: StreamArguments | None, context, mutable: MutableStreams | None) -> "LiveQuery | None":
        """A streaming change stream query to serve from settled windows, or None to forward as it is
        (an end already settled, or the initial query, which only names the first partitions)."""
        if arguments is None:
            return None
        params = request.params.fields
        if not request.resume_token.startswith(LiveQuery.TOKEN_PREFIX):  # else resuming a stream the front served
            end = _timestamp(params[arguments.end])
            if params[arguments.token].HasField("null_value") or end is None or end <= utc_now() - self.settle:
                return None
        token = params[arguments.token].string_value
        postgres = _is_postgres(request.sql)

        def window(start: datetime, end: datetime) -> tuple[list, bool, datetime]:
            responses = self._filled(request.session, _parsed(upstream(_window(request, arguments, start, end, token), metadata=context.invocation_metadata())))
            ended = has_child_partitions(responses)
            if mutable is not None:  # one response of ChangeStreamRecord rows (mutable_key_range.py)
                responses = [mutable.present(*_answer(responses), token, start, postgres)]
            return responses, ended, end

        return LiveQuery(request, arguments, self.settle, self.poll_s, window)

    def _key_range(
        self, upstream: Callable, request, arguments: StreamArguments, context: grpc.ServicerContext, database: str, name: str
    ) -> Iterator[bytes]:
        """A query of stream ``name`` of ``database``, which the front re-partitions (key_ranges.py):
        the initial query names the first partitions; a partition's query is served from the
        stream's records, built from the emulator's as far as the query needs, in settled windows
        like any streamed query. A MUTABLE_KEY_RANGE stream's records are ``ChangeStreamRecord``
        rows; an IMMUTABLE_KEY_RANGE one's have the row type the emulator answers its initial query
        with (immutable_rows.py)."""
        params = request.params.fields
        postgres = _is_postgres(request.sql)
        column = f"read_proto_bytes_{name}" if postgres else "ChangeRecord"
        key = params[arguments.token]

        def answer(token: str | None, start: datetime, end: datetime) -> tuple:
            return _answer(self._filled(request.session, _parsed(upstream(_window(request, arguments, start, end, token), metadata=context.invocation_metadata()))))

        def fetch(token: str | None, start: datetime, end: datetime) -> list:
            return emulator_records(*answer(token, start, end), token, postgres)

        def response(stream: KeyRangeStream, messages: list):
            if stream.mutable:
                return response_of(messages, column, postgres)
            return immutable_response(messages, stream.row_type, postgres)

        try:
            if key.HasField("null_value"):
                start = _timestamp(params[arguments.start])
                stream = self.key_ranges.stream(database, name, start)
                if not stream.mutable and stream.row_type is None:
                    stream.row_type = answer(None, start, start)[0]
                first = response(stream, stream.initial(start))
                first.last = True
                yield first.SerializeToString()
                return
            stream = self.key_ranges.stream(database, name)
        except (KeyError, ValueError) as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        if key.string_value not in stream.partitions:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid partition token: {key.string_value}")

        def window(start: datetime, end: datetime) -> tuple[list, bool, datetime]:
            with stream.lock:
                horizon = utc_now() - self.settle
                if stream.mark < end and stream.mark < horizon - timedelta(seconds=self.poll_s):  # one build a poll, for every partition
                    stream.advance(horizon, fetch)
                served = min(end, stream.mark)
                if served < start:
                    return [], False, served
                messages, ended = stream.window(key.string_value, start, served)
            return [response(stream, messages)], ended, served

        yield from LiveQuery(request, arguments, self.settle, self.poll_s, window).stream(context)

    def _filled(self, session: str, responses: list) -> list:
        """A change stream query's parsed responses, its PROTO and ENUM columns filled in if its
        database has them (``proto_columns.py``; GoogleSQL only: a PostgreSQL database has no proto
        bundle), re-framed as one response."""
        if not self.protos.covers(session):
            return responses
        metadata, rows = _answer(responses)
        if metadata is None or [f.name for f in metadata.row_type.fields] != ["ChangeRecord"]:
            return responses
        filled = PartialResultSet.pb()(values=self.protos.change_records(session, metadata, rows), resume_token=responses[-1].resume_token, last=responses[-1].last)
        filled.metadata.CopyFrom(metadata)
        return [filled]

    def _faulty(self, responses: Iterator[bytes], session: str | None, call, context: grpc.ServicerContext) -> Iterator[bytes]:
        """Pass ``responses`` on, failing or delaying them as a due fault says (change stream queries only)."""
        sent, fault, final = 0, None, None
        try:
            for response in responses:
                fault = fault or (self.faults.due("query", sent) if session is not None else None)
                if fault is not None and fault.code is not None:
                    self._fail(fault, session, call, context)
                if fault is not None and (fault.each or sent == fault.after_responses):
                    time.sleep(fault.delay_s)  # a slow link, or a stall
                yield response
                sent, final = sent + 1, response
            # A query that ends having sent as many responses as a waiting fault names ends with
            # its code, not OK (a link that drops after the last response): on a loaded machine a
            # partition's query is often answered whole in one or two responses, and a fault
            # placed only between responses never fired. Not after a response marked ``last``
            # (PartialResultSet.last, googleapis spanner/v1/result_set.proto): the client library
            # stops reading there (spanner_v1/streamed.py) and never sees the status, so such a
            # fault would count as fired and change nothing; it waits for the next query.
            if session is None or (final is not None and PartialResultSet.pb().FromString(final).last):
                return  # not a change stream query: no fault applies, and its last response is not parsed
            fault = fault or self.faults.due("query", sent)
            if fault is not None and fault.code is not None:
                self._fail(fault, session, call, context)
        except grpc.RpcError as e:
            if e.code() is not grpc.StatusCode.CANCELLED or context.is_active():
                context.abort(e.code(), e.details())

    @staticmethod
    def _fail(fault: Fault, session: str, call, context: grpc.ServicerContext) -> None:
        log.info("front: %s", fault.describe())
        if call is not None:
            call.cancel()
        context.abort(fault.code, _status_message(fault, session))


def _window(request, arguments: StreamArguments, start: datetime, end: datetime, token: str | None) -> bytes:
    """``request`` for partition ``token`` (None: the initial query) in the window ``[start, end]``, not resumed."""
    window = type(request)()
    window.CopyFrom(request)
    window.ClearField("resume_token")
    window.params.fields[arguments.start].string_value = format_timestamp(start)
    window.params.fields[arguments.end].string_value = format_timestamp(end)
    if token is None:
        window.params.fields[arguments.token].null_value = struct_pb2.NULL_VALUE
    else:
        window.params.fields[arguments.token].string_value = token
    return window.SerializeToString()


# One settled window of a streamed query: (start, end) to its responses, whether the partition ended
# in it, and how far it was served (at most end).
Window = Callable[[datetime, datetime], tuple[list, bool, datetime]]


class LiveQuery:
    """One streaming change stream query, served as contiguous settled windows.

    The front's resume token for a response is ``front|<window start>|<window end>|<index>``: a
    window already past reads the same every time, so a resumed call reads that window again and
    goes on after the response with that index."""

    TOKEN_PREFIX = b"front|"

    def __init__(self, request, arguments: StreamArguments, settle: timedelta, poll_s: float, window: Window) -> None:
        self.request = request
        self.window = window
        self.settle = settle
        self.poll_s = poll_s
        params = request.params.fields
        self.end = _timestamp(params[arguments.end])
        self.cursor = _timestamp(params[arguments.start])
        self.skip = -1  # responses of the first window already delivered before a resume
        self.window_end: datetime | None = None
        if request.resume_token:
            start, end, index = request.resume_token.removeprefix(self.TOKEN_PREFIX).decode().split("|")
            self.cursor, self.window_end, self.skip = parse_timestamp(start), parse_timestamp(end), int(index)

    def stream(self, context: grpc.ServicerContext) -> Iterator[bytes]:
        first = not self.request.resume_token
        while context.is_active():
            end = self.window_end or min(self.end, utc_now() - self.settle)
            self.window_end = None
            if end < self.cursor:
                time.sleep(self.poll_s)
                continue
            responses, ended, end = self.window(self.cursor, end)
            if end < self.cursor:  # nothing new yet
                time.sleep(self.poll_s)
                continue
            ended = ended or end >= self.end
            for index, response in enumerate(responses):
                if index <= self.skip:
                    continue
                if not first:
                    response.ClearField("metadata")  # the row type comes once, in the stream's first response
                first = False
                response.last = ended and index == len(responses) - 1
                response.resume_token = self.TOKEN_PREFIX + f"{format_timestamp(self.cursor)}|{format_timestamp(end)}|{index}".encode()
                yield response.SerializeToString()
            self.skip = -1
            if ended:
                return
            self.cursor = end + ONE_MICROSECOND
            time.sleep(self.poll_s)


class SpannerFront:
    """A gRPC server on a free loopback port in front of the emulator at ``upstream`` (``host:port``).

    ``poll_s``: how often a streaming query asks the emulator for the next settled window (the
    emulator's cost per query grows with the stream, so as often as the reader polls it directly;
    a record then reaches the client ``settle`` to ``settle + poll_s`` after its commit, where Cloud
    Spanner takes tens of milliseconds, and each window brings one heartbeat);
    ``settle``: how far behind now a window ends (the emulator serves a window whose end it sees as
    past in one inclusive scan; it runs on this host's clock, so a small margin suffices)."""

    def __init__(
        self, upstream: str, port: int | None = None, threads: int = 256, poll_s: float = 0.5, settle: timedelta = timedelta(milliseconds=250)
    ) -> None:
        self.upstream = upstream
        self.port = port or free_loopback_port()
        self._faults = _Faults()
        self._mutable = MutableStreams()
        self._key_ranges = KeyRangeStreams()
        self._channel = grpc.insecure_channel(upstream, options=[("grpc.max_receive_message_length", 100 * 2**20)])
        self._protos = ProtoColumns(self._channel)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="spanner-front"),
            handlers=[_Forwarder(self._channel, self._faults, self._mutable, self._key_ranges, self._protos, settle, poll_s)],
            options=[("grpc.max_send_message_length", 100 * 2**20), ("grpc.max_receive_message_length", 100 * 2**20)],
        )
        self._server.add_insecure_port(f"127.0.0.1:{self.port}")

    @property
    def host(self) -> str:
        """The front's address, for ``SPANNER_EMULATOR_HOST``."""
        return f"127.0.0.1:{self.port}"

    def inject(self, *faults: Fault) -> None:
        """Queue faults; each fires on the next call it applies to, in the order given."""
        with self._faults.lock:
            self._faults.pending.extend(faults)

    def present_mutable(self, database: str, stream: str) -> None:
        """Present ``stream`` of database ``database`` (its id) as a MUTABLE_KEY_RANGE stream, as
        Cloud Spanner serves one created with that partition_mode (``mutable_key_range.py``)."""
        self._mutable.add(database, stream)

    def partition_by_key_range(
        self, database: str, stream: str, partitions: int, change_every: timedelta = timedelta(seconds=1), seed: int = 0,
        mode: PartitionMode = PartitionMode.MUTABLE_KEY_RANGE,
    ) -> None:
        """Re-partition ``stream`` of database ``database`` into ``partitions`` partitions by key
        range, one change of its key ranges every ``change_every`` (MUTABLE_KEY_RANGE, presented so:
        a move, a split, an end, in turn; IMMUTABLE_KEY_RANGE: a split, a merge), and its
        transactions spread over the partitions that own their keys (``key_ranges.py``). Its state
        starts at its first initial query."""
        if mode is PartitionMode.MUTABLE_KEY_RANGE:
            self._mutable.add(database, stream)
        self._key_ranges.add(database, stream, partitions, change_every, seed, mode)

    def fill_proto_columns(self, database: str) -> None:
        """Serve the PROTO and ENUM columns of database ``database`` (its id) with their types and
        values, as Cloud Spanner does (``proto_columns.py``): in its change records and in
        ``INFORMATION_SCHEMA.COLUMNS.SPANNER_TYPE``."""
        self._protos.add(database)

    def key_range_stats(self, database: str, stream: str) -> KeyRangeStats:
        """What re-partitioning ``stream`` has done so far."""
        return self._key_ranges.stream(database, stream).stats()

    @property
    def injected(self) -> list[Fault]:
        with self._faults.lock:
            return list(self._faults.injected)

    @property
    def live_queries(self) -> int:
        """How many change stream queries it served streaming, from settled windows."""
        return self._faults.live_queries

    @property
    def pending(self) -> list[Fault]:
        with self._faults.lock:
            return list(self._faults.pending)

    def start(self) -> "SpannerFront":
        self._server.start()
        log.info("Spanner front at %s, forwarding to %s", self.host, self.upstream)
        return self

    def stop(self) -> None:
        self._server.stop(grace=1).wait()
        self._channel.close()

    def __enter__(self) -> "SpannerFront":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cs_platform.dev.front.server",
        description="Serve Cloud Spanner's google.spanner.v1.Spanner API on loopback in front of a running emulator, "
        "forwarding every call; faults given here fire on the next change stream queries, in order.",
    )
    parser.add_argument("--upstream", required=True, help="the emulator's host:port (its gRPC port)")
    parser.add_argument("--port", type=int, help="the loopback port to serve on (default: a free one)")
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="CODE:AFTER",
        help="end a change stream query with status CODE (UNAVAILABLE, INTERNAL, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, NOT_FOUND) "
        "after AFTER responses; repeatable",
    )
    parser.add_argument(
        "--mutable", action="append", default=[], metavar="DATABASE:STREAM",
        help="present the stream as MUTABLE_KEY_RANGE (the emulator's partitions); repeatable",
    )
    parser.add_argument(
        "--key-ranges", action="append", default=[], metavar="DATABASE:STREAM:PARTITIONS[:SECONDS[:MODE]]",
        help="re-partition the stream by key range into PARTITIONS partitions, one change of their key ranges every SECONDS "
        "(default 1), transactions spread over them; MODE MUTABLE_KEY_RANGE (the default, presented so: moves, splits, ends) "
        "or IMMUTABLE_KEY_RANGE (splits and merges); repeatable",
    )
    parser.add_argument(
        "--proto-columns", action="append", default=[], metavar="DATABASE",
        help="stream the database's PROTO and ENUM columns with their types and values, as Cloud Spanner does; repeatable",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    front = SpannerFront(args.upstream, args.port)
    for spec in args.fault:
        code, _, after = spec.partition(":")
        front.inject(Fault(grpc.StatusCode[code.upper()], after_responses=int(after or 0)))
    for spec in args.mutable:
        database, stream = spec.split(":")
        front.present_mutable(database, stream)
    for spec in args.key_ranges:
        database, stream, partitions, *rest = spec.split(":")
        if len(rest) > 2:
            parser.error(f"--key-ranges {spec}: expected DATABASE:STREAM:PARTITIONS[:SECONDS[:MODE]]")
        every, mode = rest + ["1", PartitionMode.MUTABLE_KEY_RANGE.value][len(rest):]
        front.partition_by_key_range(database, stream, int(partitions), timedelta(seconds=float(every)), mode=PartitionMode(mode.upper()))
    for database in args.proto_columns:
        front.fill_proto_columns(database)
    with front:
        print(f"SPANNER_EMULATOR_HOST={front.host}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
