"""Where a Spanner database lives: the emulator on loopback, or Cloud Spanner with ADC credentials.

The same reader code runs against both; only this address differs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import spanner
from google.cloud.spanner_v1.database import Database

from cs_platform.changestream.errors import CredentialsError, DatabaseNotFoundError
from cs_platform.changestream.query import Dialect
from cs_platform.changestream.tail import POLLING, STREAMING, LiveTail

MULTIPLEXED_RW_ENV = "GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS_FOR_RW"


@dataclass(frozen=True)
class SpannerTarget:
    """A database address. ``emulator_host`` (``host:port``) selects the emulator, anonymously."""

    project: str
    instance: str
    database: str
    emulator_host: str | None = None

    @property
    def live_tail(self) -> LiveTail:
        """Stream from Cloud Spanner; poll past windows from the emulator (see ``tail``)."""
        return POLLING if self.emulator_host else STREAMING

    def client(self) -> spanner.Client:
        if self.emulator_host:
            # The emulator loses concurrent read-write transactions on multiplexed sessions
            # ("Transaction not found"); pooled sessions work. Cloud Spanner is unaffected.
            os.environ.setdefault(MULTIPLEXED_RW_ENV, "false")
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

    def connect(self, client: spanner.Client | None = None) -> Database:
        """Return the database handle, failing clearly if the instance or database does not exist."""
        client = client or self.client()
        instance = client.instance(self.instance)
        try:
            if not instance.exists():
                raise DatabaseNotFoundError(
                    f"Spanner instance {self.instance!r} does not exist in project {self.project!r}"
                    f"{' on emulator ' + self.emulator_host if self.emulator_host else ''}: create it or fix "
                    "the instance setting"
                )
            database = instance.database(self.database)
            if not database.exists():
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


def database_dialect(database: Database) -> Dialect:
    """The database's SQL dialect (call after ``connect``, which loads it). Databases created
    without a dialect (the emulator reports DATABASE_DIALECT_UNSPECIFIED) are GoogleSQL."""
    name = database.database_dialect.name
    return Dialect.GOOGLE_STANDARD_SQL if name == "DATABASE_DIALECT_UNSPECIFIED" else Dialect(name)
