"""Demo schema and a bank workload whose commits we log, so tests can compare the stream with the source.

Tables (GoogleSQL): ``Accounts``, ``Transfers`` and ``AuditEvents``; every transfer is one transaction
that debits one account, credits another, inserts a Transfers row and an audit row: three tables and
random key ranges in one commit. The sum of balances stays 1000 x accounts, the oracle for the lake.

Writes are blind mutation batches from one writer that tracks balances itself, which gives each
transaction's exact commit timestamp and mod list for the comparison.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from google.cloud import spanner
from google.cloud.spanner_admin_database_v1 import DatabaseDialect
from google.cloud.spanner_v1.database import Database
from google.cloud.spanner_v1.instance import Instance

log = logging.getLogger(__name__)

INITIAL_BALANCE = 1000

BANK_TABLES_DDL = [
    """CREATE TABLE Accounts (
        AccountId STRING(36) NOT NULL,
        Balance INT64 NOT NULL,
        UpdatedAt TIMESTAMP
    ) PRIMARY KEY (AccountId)""",
    """CREATE TABLE Transfers (
        TransferId STRING(36) NOT NULL,
        FromAccount STRING(36),
        ToAccount STRING(36),
        Amount INT64,
        CommittedAt TIMESTAMP
    ) PRIMARY KEY (TransferId)""",
    """CREATE TABLE AuditEvents (
        EventId STRING(36) NOT NULL,
        Kind STRING(32) NOT NULL,
        Payload JSON
    ) PRIMARY KEY (EventId)""",
]
BANK_TABLES = ("Accounts", "Transfers", "AuditEvents")


def bank_stream_ddl(stream: str, value_capture_type: str = "OLD_AND_NEW_VALUES") -> str:
    return (
        f"CREATE CHANGE STREAM {stream} FOR {', '.join(BANK_TABLES)} "
        f"OPTIONS (value_capture_type = '{value_capture_type}')"
    )


def create_instance(client: spanner.Client, instance_id: str) -> Instance:
    instance = client.instance(
        instance_id,
        configuration_name=f"projects/{client.project}/instanceConfigs/emulator-config",
        display_name=instance_id,
        node_count=1,
    )
    if not instance.exists():
        instance.create().result(timeout=60)
    return instance


def create_database(
    instance: Instance, database_id: str, ddl: list[str], postgres: bool = False, proto_descriptors: bytes | None = None
) -> Database:
    """Create a database with the given DDL (PostgreSQL databases get their DDL after creation);
    ``proto_descriptors``: the serialized ``FileDescriptorSet`` of a ``CREATE PROTO BUNDLE`` in it."""
    if postgres:
        database = instance.database(database_id, database_dialect=DatabaseDialect.POSTGRESQL)
        database.create().result(timeout=120)
        if ddl:
            database.update_ddl(ddl).result(timeout=120)
    else:
        database = instance.database(database_id, ddl_statements=ddl, proto_descriptors=proto_descriptors)
        database.create().result(timeout=120)
    database.reload()
    return database


@dataclass(frozen=True)
class CommittedMod:
    table: str
    keys: str  # canonical JSON of the key columns, as the stream reports them
    mod_type: str


@dataclass(frozen=True)
class CommittedTransaction:
    commit_timestamp: datetime
    mods: tuple[CommittedMod, ...]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _stamp() -> datetime:
    """A TIMESTAMP value to write: now, in whole seconds. The emulator cuts TIMESTAMP values in
    change records to whole seconds (EMULATOR.md, an emulator bug: Cloud Spanner keeps them whole),
    so a mirror built from the stream equals the source value by value only for such values."""
    return _now().replace(microsecond=0)


def start_after(committed: datetime) -> datetime:
    """A stream start after a commit at ``committed``: on the emulator commit timestamps run ahead
    of the host clock (EMULATOR.md), so the host's "now" just after a commit can still precede it."""
    return max(_now(), committed + timedelta(microseconds=1))


def key_json(**keys: str) -> str:
    return json.dumps(keys, sort_keys=True)


@dataclass
class BankWorkload:
    """Single-writer bank: accounts created with 1000 each, then random transfers."""

    database: Database
    seed: int = 7
    balances: dict[str, int] = field(default_factory=dict)
    committed: list[CommittedTransaction] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # the audit events that exist
    deleted: str | None = None  # an audit event ``recycle_event`` deleted, to insert again

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def create_account(self) -> str:
        account = str(uuid.UUID(int=self._random.getrandbits(128)))
        event = str(uuid.UUID(int=self._random.getrandbits(128)))
        with self.database.batch() as batch:
            batch.insert("Accounts", ["AccountId", "Balance", "UpdatedAt"], [[account, INITIAL_BALANCE, _stamp()]])
            batch.insert("AuditEvents", ["EventId", "Kind", "Payload"], [[event, "open", json.dumps({"account": account})]])
        self.balances[account] = INITIAL_BALANCE
        self.events.append(event)
        self._log(
            batch.committed,
            CommittedMod("Accounts", key_json(AccountId=account), "INSERT"),
            CommittedMod("AuditEvents", key_json(EventId=event), "INSERT"),
        )
        return account

    def transfer(self) -> None:
        source, target = self._random.sample(sorted(self.balances), 2)
        amount = self._random.randint(1, 50)
        transfer_id = str(uuid.UUID(int=self._random.getrandbits(128)))
        event = str(uuid.UUID(int=self._random.getrandbits(128)))
        new_source = self.balances[source] - amount
        new_target = self.balances[target] + amount
        now = _stamp()
        with self.database.batch() as batch:
            batch.update(
                "Accounts",
                ["AccountId", "Balance", "UpdatedAt"],
                [[source, new_source, now], [target, new_target, now]],
            )
            batch.insert(
                "Transfers",
                ["TransferId", "FromAccount", "ToAccount", "Amount", "CommittedAt"],
                [[transfer_id, source, target, amount, now]],
            )
            batch.insert("AuditEvents", ["EventId", "Kind", "Payload"], [[event, "transfer", json.dumps({"transfer": transfer_id})]])
        self.balances[source], self.balances[target] = new_source, new_target
        self.events.append(event)
        self._log(
            batch.committed,
            CommittedMod("Accounts", key_json(AccountId=source), "UPDATE"),
            CommittedMod("Accounts", key_json(AccountId=target), "UPDATE"),
            CommittedMod("Transfers", key_json(TransferId=transfer_id), "INSERT"),
            CommittedMod("AuditEvents", key_json(EventId=event), "INSERT"),
        )

    def audit_all(self, events: int) -> None:
        """One large transaction over the three tables: ``events`` audit events and as many transfers
        of 0 between accounts, and every account's ``UpdatedAt`` touched (balances stay as they
        are, so the bank's sum holds): ``2 x events + accounts`` mods, the shape of a nightly batch
        job. Cloud Spanner takes up to 80,000 mutations a commit; the emulator writes a few
        thousand rows a commit in seconds when a stream watches them."""
        accounts, now = sorted(self.balances), _stamp()
        transfers = [str(uuid.UUID(int=self._random.getrandbits(128))) for _ in range(events)]
        audits = [str(uuid.UUID(int=self._random.getrandbits(128))) for _ in range(events)]
        pairs = [(accounts[i % len(accounts)], accounts[(i + 1) % len(accounts)]) for i in range(events)]
        with self.database.batch() as batch:
            batch.update("Accounts", ["AccountId", "Balance", "UpdatedAt"], [[a, self.balances[a], now] for a in accounts])
            batch.insert(
                "Transfers",
                ["TransferId", "FromAccount", "ToAccount", "Amount", "CommittedAt"],
                [[t, source, target, 0, now] for t, (source, target) in zip(transfers, pairs)],
            )
            batch.insert("AuditEvents", ["EventId", "Kind", "Payload"], [[e, "audit", json.dumps({"transfer": t})] for e, t in zip(audits, transfers)])
        self._log(
            batch.committed,
            *(CommittedMod("Accounts", key_json(AccountId=a), "UPDATE") for a in accounts),
            *(CommittedMod("Transfers", key_json(TransferId=t), "INSERT") for t in transfers),
            *(CommittedMod("AuditEvents", key_json(EventId=e), "INSERT") for e in audits),
        )

    def recycle_event(self) -> None:
        """Delete an audit event, or insert the one deleted last time again (with another kind): a
        key deleted and re-inserted, each in a transaction of its own. The bank's sums are untouched."""
        with self.database.batch() as batch:
            if self.deleted is None:
                event = self.events.pop(self._random.randrange(len(self.events)))
                batch.delete("AuditEvents", spanner.KeySet(keys=[[event]]))
            else:
                event = self.deleted
                batch.insert("AuditEvents", ["EventId", "Kind", "Payload"], [[event, "reopened", json.dumps({"event": event})]])
        mod = "DELETE" if self.deleted is None else "INSERT"
        self.deleted = event if self.deleted is None else None
        if self.deleted is None:
            self.events.append(event)
        self._log(batch.committed, CommittedMod("AuditEvents", key_json(EventId=event), mod))

    def _log(self, commit_timestamp: datetime, *mods: CommittedMod) -> None:
        self.committed.append(CommittedTransaction(commit_timestamp, mods))

    def run(self, accounts: int, transfers: int, stop: threading.Event | None = None, progress_every: int = 500) -> None:
        """Create ``accounts`` accounts (one transaction each), then commit ``transfers`` transfers."""
        started = time.monotonic()
        for _ in range(accounts):
            self.create_account()
        for i in range(transfers):
            if stop is not None and stop.is_set():
                break
            self.transfer()
            if progress_every and (i + 1) % progress_every == 0:
                log.info("workload: %d transfers committed (%.0f tx/s)", i + 1, (i + 1) / (time.monotonic() - started))

    def run_until(
        self, stop_at: datetime, per_second: float, accounts: int = 20, stop: threading.Event | None = None, recycle_every: int = 0
    ) -> None:
        """Create ``accounts`` accounts, then transfer at about ``per_second`` until a commit passes
        ``stop_at`` (or ``stop`` is set), and every ``recycle_every`` transfers (0: never) delete an
        audit event or insert it again (``recycle_event``). Paced because unpaced writes starve the
        emulator's partition churn thread."""
        for _ in range(accounts):
            self.create_account()
        began = time.monotonic()
        while self.committed[-1].commit_timestamp < stop_at and not (stop and stop.is_set()):
            self.transfer()
            if recycle_every and len(self.committed) % recycle_every == 0:
                self.recycle_event()
            ahead = began + len(self.committed) / per_second - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        log.info("workload: %d transactions committed", len(self.committed))
