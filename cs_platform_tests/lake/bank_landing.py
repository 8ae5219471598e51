"""Landing files of a small bank, shaped the way the reader lands them, for lake tests without Spanner."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from cs_platform.changestream.reader import PartitionBatch
from cs_platform.changestream.records import ColumnType, DataChangeRecord, Mod, ModType, ValueCaptureType
from cs_platform.landing.store import LandingStore

T0 = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
ACCOUNTS = (
    ColumnType("AccountId", {"code": "STRING"}, True, 1),
    ColumnType("Balance", {"code": "INT64"}, False, 2),
)
TRANSFERS = (
    ColumnType("TransferId", {"code": "STRING"}, True, 1),
    ColumnType("FromAccount", {"code": "STRING"}, False, 2),
    ColumnType("ToAccount", {"code": "STRING"}, False, 3),
    ColumnType("Amount", {"code": "INT64"}, False, 4),
)


def _record(txn, seq, ts, table, mod_type, mods, records):
    return DataChangeRecord(
        "p", ts, f"{seq:08d}", txn, True, table, ACCOUNTS if table == "Accounts" else TRANSFERS,
        tuple(Mod(k, n, {}) for k, n in mods), ModType(mod_type), ValueCaptureType.OLD_AND_NEW_VALUES, records, 1, "", False,
    )


def land_bank(store: LandingStore, accounts: int = 20, transfers: int = 400, files: int = 8) -> list[datetime]:
    """Accounts opened with 1000, then random transfers (3 records each: debit, credit, transfer
    row) landed in ``files`` files; returns each file's last commit timestamp (cut candidates)."""
    rng = random.Random(11)
    balances = {f"acct-{i:03d}": 1000 for i in range(accounts)}
    transactions, ts = [], T0
    for account in balances:
        ts += timedelta(milliseconds=1)
        transactions.append([_record(f"open-{account}", 0, ts, "Accounts", "INSERT", [({"AccountId": account}, {"Balance": "1000"})], 1)])
    for n in range(transfers):
        ts += timedelta(milliseconds=1)
        source, target = rng.sample(sorted(balances), 2)
        amount = rng.randrange(1, 50)
        balances[source] -= amount
        balances[target] += amount
        txn = f"xfer-{n:05d}"
        transactions.append([
            _record(txn, 0, ts, "Accounts", "UPDATE", [({"AccountId": source}, {"Balance": str(balances[source])})], 3),
            _record(txn, 1, ts, "Accounts", "UPDATE", [({"AccountId": target}, {"Balance": str(balances[target])})], 3),
            _record(txn, 2, ts, "Transfers", "INSERT", [({"TransferId": f"t{n:05d}"}, {"FromAccount": source, "ToAccount": target, "Amount": str(amount)})], 3),
        ])
    chunk = -(-len(transactions) // files)
    cuts = []
    for i in range(0, len(transactions), chunk):
        part = tuple(r for t in transactions[i : i + chunk] for r in t)  # files end between transactions
        end = part[-1].commit_timestamp
        store.write("Bank", f"f{i:06d}", PartitionBatch("p", part[0].commit_timestamp, end, part, (), end, False))
        cuts.append(end)
    return cuts
