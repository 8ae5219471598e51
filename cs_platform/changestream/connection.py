"""Where a Spanner database lives: the emulator on loopback, or Cloud Spanner with ADC credentials.

The same reader code runs against both; only this address differs.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import spanner
from google.cloud.spanner_v1.database import Database

from cs_platform.changestream.errors import (
    CredentialsError,
    DatabaseNotFoundError,
    SpannerUnreachableError,
)
from cs_platform.changestream.query import Dialect
from cs_platform.changestream.tail import POLLING, STREAMING, LiveTail
from cs_platform.errors import InvalidArgumentError

# The client multiplexes transactions over one session per ``Database`` unless these say "false":
# read-only snapshots, partitioned reads (batch snapshots) and read-write transactions respectively.
MULTIPLEXED_SESSION_SETTINGS = (
    "GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS",
    "GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS_PARTITIONED_OPS",
    "GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS_FOR_RW",
)


READ_MODES = ("auto", "streaming", "polling")


@dataclass(frozen=True)
class SpannerTarget:
    """A database address. ``emulator_host`` (``host:port``) selects the emulator, anonymously."""

    project: str
    instance: str
    database: str
    emulator_host: str | None = None
    timeout_s: float = 20.0  # deadline of the calls that find the database
    read_mode: str = "auto"  # streaming, polling, or auto: polling on an emulator, else streaming

    def __post_init__(self) -> None:
        if self.read_mode not in READ_MODES:
            raise InvalidArgumentError(f"read mode {self.read_mode!r} is not one of {', '.join(READ_MODES)}")

    @property
    def live_tail(self) -> LiveTail:
        """Stream from Cloud Spanner; poll past windows from the emulator (see ``tail``), unless
        ``read_mode`` says which: an emulator behind a front that streams as Cloud Spanner does
        (``dev/front/server.py``) is read streaming."""
        if self.read_mode == "auto":
            return POLLING if self.emulator_host else STREAMING
        return STREAMING if self.read_mode == "streaming" else POLLING

    def client(self) -> spanner.Client:
        if self.emulator_host:
            # The emulator has no multiplexed sessions: on one, a later transaction drops the earlier
            # ones, so threads sharing a Database fail with "Transaction not found" (read-only,
            # partitioned and read-write alike). Pooled sessions give each transaction a session of
            # its own. The client reads these per transaction; Cloud Spanner multiplexes safely.
            for setting in MULTIPLEXED_SESSION_SETTINGS:
                os.environ.setdefault(setting, "false")
            return spanner.Client(
                project=self.project,
                credentials=AnonymousCredentials(),
                client_options={"api_endpoint": self.emulator_host},
                disable_builtin_metrics=True,
            )
        try:
            return spanner.Client(project=self.project)
        except auth_exceptions.DefaultCredentialsError as e:
            raise CredentialsError(
                f"no Google credentials for Spanner project {self.project!r}: run "
                "'gcloud auth application-default login' or set GOOGLE_APPLICATION_CREDENTIALS to a "
                "service account key file (or set SPANNER_EMULATOR_HOST to use the emulator)"
            ) from e

    @property
    def where(self) -> str:
        return f"the Spanner emulator at {self.emulator_host} (SPANNER_EMULATOR_HOST)" if self.emulator_host else "Cloud Spanner"

    def _probe_emulator(self) -> None:
        """Fail at once, naming the setting, when nothing listens at the emulator's address (the
        client would otherwise retry UNAVAILABLE for up to an hour)."""
        host, _, port = self.emulator_host.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=min(self.timeout_s, 5)):
                return
        except (OSError, ValueError) as e:
            raise SpannerUnreachableError(
                f"nothing answers at SPANNER_EMULATOR_HOST={self.emulator_host!r} ({e}): start the emulator there, "
                "fix SPANNER_EMULATOR_HOST, or unset it to use Cloud Spanner"
            ) from e

    def connect(self, client: spanner.Client | None = None) -> Database:
        """Return the database handle, failing clearly if the instance or database does not exist,
        and within ``timeout_s`` if Spanner cannot be reached."""
        if self.emulator_host:
            self._probe_emulator()
        client = client or self.client()
        instance = client.instance(self.instance)
        try:
            if not self._found(lambda: client.instance_admin_api.get_instance(name=instance.name, timeout=self.timeout_s)):
                raise DatabaseNotFoundError(
                    f"Spanner instance {self.instance!r} does not exist in project {self.project!r}"
                    f"{' on emulator ' + self.emulator_host if self.emulator_host else ''}: create it or fix "
                    "the instance setting"
                )
            database = instance.database(self.database)
            if not self._found(lambda: client.database_admin_api.get_database(name=database.name, timeout=self.timeout_s)):
                raise DatabaseNotFoundError(
                    f"Spanner database {self.database!r} does not exist in instance {self.instance!r}: "
                    "create it or fix the database setting"
                )
        except gexc.PermissionDenied as e:
            raise CredentialsError(
                f"the credentials in use may not access {self.instance}/{self.database}: grant them "
                "roles/spanner.databaseReader (and databaseUser on the metadata database)"
            ) from e
        database.reload()
        return database

    def _found(self, call) -> bool:
        """Whether the admin ``call`` finds its resource; unreachable within the deadline is an error."""
        try:
            call()
        except gexc.NotFound:
            return False
        except (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.RetryError) as e:
            raise SpannerUnreachableError(
                f"{self.where} did not answer within {self.timeout_s:g}s ({type(e).__name__}): check the address and "
                "network, or give it a longer timeout.",
                fixed_by=("timeout",),
            ) from e
        return True


def database_dialect(database: Database) -> Dialect:
    """The database's SQL dialect (call after ``connect``, which loads it). When the admin API does
    not say (the emulator reports DATABASE_DIALECT_UNSPECIFIED for every database it did not create
    in this handle, PostgreSQL ones included), the database's own ``INFORMATION_SCHEMA`` does; a
    database's dialect never changes, so that answer is kept per database."""
    name = database.database_dialect.name
    if name != "DATABASE_DIALECT_UNSPECIFIED":
        return Dialect(name)
    if database.name not in _DIALECTS:
        with database.snapshot() as snap:
            rows = list(snap.execute_sql("SELECT option_value FROM information_schema.database_options WHERE option_name = 'database_dialect'"))
        _DIALECTS[database.name] = Dialect(rows[0][0]) if rows and rows[0][0] else Dialect.GOOGLE_STANDARD_SQL
    return _DIALECTS[database.name]


_DIALECTS: dict[str, Dialect] = {}  # database path -> dialect, where the admin API did not say
