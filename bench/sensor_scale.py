"""Sensor tick time against the size of the partition metadata table's history.

A stream that runs for months accumulates FINISHED partitions; the tick must not grow with them.
On a private emulator, the metadata table holds N live partitions (RUNNING ones, CREATED ones whose
parents are all FINISHED, and merge children still waiting for a RUNNING parent) plus F FINISHED
ones. For each F, the real partition sensor from ``build_definitions()`` is evaluated on a real
Dagster instance: one warm-up tick, then the median of 3 timed ticks. Baseline, in the same run:
F = 0.

    .venv/bin/python bench/sensor_scale.py [--live 1000] [--finished 0 1000 10000]

Prints ``tick_s_f<F>`` for each F and ``tick_growth_f<max>_over_f0`` (goal: at most 2).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import statistics
import time
from datetime import timedelta
from pathlib import Path

from dagster import DagsterInstance
from google.api_core import exceptions as gexc
from google.cloud import spanner

from cs_platform.changestream.metadata import (
    COLUMNS,
    INITIAL_PARTITION_TOKEN,
    PartitionMetadataStore,
    PartitionState,
    partition_key,
    utc_now,
)
from cs_platform.definitions import build_definitions
from cs_platform.defs.names import ChangeStreamNames
from cs_platform.defs.resources import change_stream_resource_key, configured_resources
from cs_platform.dev.embedded import STREAM, embedded_bank
from cs_platform.dev.sensor_loop import evaluate_sensor

BATCH_ROWS = 2_000  # 12 columns a row: well under Spanner's 80k mutations a commit


class MetadataHistory:
    """Writes a metadata table of a given shape: F finished partitions behind N live ones."""

    def __init__(self, store: PartitionMetadataStore, most_finished: int) -> None:
        self.store = store
        self.span_s = most_finished * 0.1 + 600  # finished partitions 0.1 s apart, then the live ones
        self.start = utc_now() - timedelta(seconds=self.span_s)
        self.finished = 0
        self.live_tokens: list[str] = []

    def _row(self, token: str, parents: list[str], state: PartitionState, offset_s: float) -> list:
        start = self.start + timedelta(seconds=offset_s)
        stamp = start + timedelta(seconds=1)
        return [
            token,
            partition_key(token, start),
            parents,
            start,
            None,
            1000,
            state.value,
            stamp,
            start,
            stamp if state is not PartitionState.CREATED else None,
            stamp if state in (PartitionState.RUNNING, PartitionState.FINISHED) else None,
            stamp if state is PartitionState.FINISHED else None,
            None,  # Owner: no reader took it
        ]

    def _write(self, rows: list[list]) -> None:
        for i in range(0, len(rows), BATCH_ROWS):
            with self.store.database.batch() as batch:
                batch.insert_or_update(self.store.table, COLUMNS, rows[i : i + BATCH_ROWS])

    def finished_token(self, i: int) -> str:
        return f"finished-{i:07d}" if self.finished else INITIAL_PARTITION_TOKEN

    def grow_to(self, finished: int, live: int) -> None:
        """Add FINISHED partitions up to ``finished`` and write ``live`` live ones afresh."""
        self._write(
            [
                self._row(f"finished-{i:07d}", [self.finished_token(i - 1) if i else INITIAL_PARTITION_TOKEN], PartitionState.FINISHED, i * 0.1)
                for i in range(self.finished, finished)
            ]
        )
        self.finished = finished
        if self.live_tokens:
            with self.store.database.batch() as batch:
                batch.delete(self.store.table, spanner.KeySet(keys=[[t] for t in self.live_tokens]))
        running = [f"running-{i:05d}" for i in range(live * 8 // 10)]
        ready = [f"ready-{i:05d}" for i in range(live // 10)]
        waiting = [f"waiting-{i:05d}" for i in range(live - len(running) - len(ready))]
        now = self.span_s - 60
        last = max(self.finished - 1, 0)
        rows = [self._row(t, [self.finished_token(last - i % 97)], PartitionState.RUNNING, now) for i, t in enumerate(running)]
        rows += [
            self._row(t, [self.finished_token(last - i % 89), self.finished_token(last - i % 83)], PartitionState.CREATED, now)
            for i, t in enumerate(ready)
        ]
        rows += [
            self._row(t, [running[i % len(running)], self.finished_token(last - i % 79)], PartitionState.CREATED, now)
            for i, t in enumerate(waiting)
        ]
        self._write(rows)
        self.live_tokens = running + ready + waiting


def timed_ticks(instance: DagsterInstance, ticks: int = 3) -> list[float]:
    definitions = build_definitions()
    sensor = definitions.resolve_sensor_def(ChangeStreamNames(STREAM).sensor)
    times = []
    # The sensor's log lines (one per launch) go to Dagster's console handler on stderr: not ours.
    with contextlib.redirect_stderr(io.StringIO()):
        cursor = evaluate_sensor(definitions, instance, sensor, None).cursor  # warm-up: the first tick's checks
        for _ in range(ticks):
            began = time.perf_counter()
            cursor = evaluate_sensor(definitions, instance, sensor, cursor).cursor
            times.append(time.perf_counter() - began)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--live", type=int, default=1_000)
    parser.add_argument("--finished", type=int, nargs="+", default=[0, 1_000, 10_000])
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    results: dict[int, float | None] = {}
    with embedded_bank(Path(".demo/bench_sensor_scale")):
        store = configured_resources(os.environ)[change_stream_resource_key(STREAM)].metadata_store()
        store.initialize(None, None, 1000)
        store.transition([INITIAL_PARTITION_TOKEN], PartitionState.FINISHED)
        history = MetadataHistory(store, max(args.finished))
        with DagsterInstance.get() as instance:
            for finished in sorted(args.finished):
                began = time.perf_counter()
                history.grow_to(finished, args.live)
                print(f"# {args.live} live + {finished} finished rows written in {time.perf_counter() - began:.1f}s", flush=True)
                try:
                    times = timed_ticks(instance)
                except gexc.DeadlineExceeded as e:
                    print(f"tick_s_f{finished}: failed ({type(e).__name__}: the tick's metadata query ran past its {store.timeout_s:g}s deadline)")
                    results[finished] = None
                    continue
                results[finished] = statistics.median(times)
                print(f"tick_s_f{finished}: {results[finished]:.3f}  # ticks {', '.join(f'{t:.3f}' for t in times)}", flush=True)
    largest = max(results)
    if results.get(0) and results[largest]:
        print(f"tick_growth_f{largest}_over_f0: {results[largest] / results[0]:.2f}")
    else:
        print(f"tick_growth_f{largest}_over_f0: n/a (a tick failed)")


if __name__ == "__main__":
    main()
