"""The lake of one change stream in Dagster: changelog (bronze) and mirrors (+ manifest), one step.

Thin: a lake run is ``cs_platform.stream.lake_steps.keep_cutting`` and each of its cuts
``lake_steps.advance_lake`` (read the cut, ingest, apply), the calls ``make demo`` and the tests make.
Both assets come from that one step, because the cut must be read *before* the landing files are
listed (DESIGN invariant 2). The lake sensor launches a run whenever none is in flight and the low
watermark has moved, at most one lake run per stream at a time; that run keeps its Spark session and
cuts whenever the watermark moves, at most every CS_PLATFORM_CUT_INTERVAL_SECONDS, for
CS_PLATFORM_LAKE_SOFT_TIMEOUT_SECONDS. A materialization from the UI or a backfill takes one cut.

Several cuts in one step: a step yields each of its outputs (``MaterializeResult``, and an
``AssetCheckResult`` per check spec) once, so every cut but the run's last is recorded with
``context.log_event`` as an ``AssetMaterialization`` of both assets and an ``AssetCheckEvaluation``
per check, the moment it is applied; the last cut is the step's outputs. The UI shows each cut as a
materialization with its own metadata, and the checks' latest evaluation is the latest cut's. The
blocking completeness check stops the run on the cut that fails it: nothing is applied past it.

PySpark and the lake's modules are imported inside the step, not here: every run loads this code
location, and a reader run must not pay for them (``defs.resources.SparkResource``).
"""

import json
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Sequence

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetSpec,
    DagsterRunStatus,
    DefaultSensorStatus,
    Definitions,
    DynamicPartitionsDefinition,
    Failure,
    FreshnessPolicy,
    MaterializeResult,
    MetadataValue,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    define_asset_job,
    in_process_executor,
    multi_asset,
    sensor,
)

from cs_platform.changestream.catalog import watched_table_names
from cs_platform.changestream.metadata import PartitionMetadataStore, utc_now
from cs_platform.changestream.retention import RetentionLevel, RetentionWatch, watch_retention
from cs_platform.defs.names import ChangeStreamNames
from cs_platform.defs.resources import ChangeStreamResource, LakeResource
from cs_platform.defs.runs import (
    LIVE_RUN_STATUSES,
    drain_on_interrupt,
    end_canceled,
    marking_progress,
    seconds_since_progress,
    stop_if_presumed_dead,
)
from cs_platform.defs.tags import LAKE_TAG
from cs_platform.settings import naming_settings, start_over
from cs_platform.stream.reporting import Cadence, liveness_beat_seconds
from cs_platform.stream.state import StreamPosition, stream_cut

if TYPE_CHECKING:
    from cs_platform.lake.snapshot import SnapshotResult
    from cs_platform.lake.stream_lake import Lake
    from cs_platform.stream.lake_steps import LakeAdvance

# Set by the lake sensor: the run keeps cutting for CS_PLATFORM_LAKE_SOFT_TIMEOUT_SECONDS. Without it
# (a materialization from the UI, a backfill) a lake run takes one cut.
KEEP_CUTTING_TAG = "cs_platform/keep_cutting"
SHOWS_SOURCE_VALUES = frozenset({"first_values"})  # check metadata that quotes source values: in the event log, never in an alert
BLOCKING_CHECK = "complete_transactions_below_low_watermark"  # a failure stops the run: nothing is published past it

CHECKS = {
    BLOCKING_CHECK: (
        "Every transaction committed up to the cut has all its records in the changelog "
        "(records seen == number_of_records_in_transaction). Blocking: a cut never applies part of a "
        "transaction; a failure means records were lost before landing."
    ),
    "typed_values": (
        "Every value under the cut has a value of its column's type, and the quarantine table is empty. "
        "Red when a cut stopped on an untyped value (policy fail) or set a transaction aside (policy "
        "quarantine) until an operator resolves it (docs/lake.md, Quarantine), or stopped on a column "
        "whose Spanner type the lake cannot mirror yet (an upgrade, or leaving the column out of the stream, resolves it)."
    ),
    "watermark_lag": (
        "How far the cut (the stream's low watermark) is behind now. Warns beyond "
        "CS_PLATFORM_MAX_LAG_SECONDS: a partition is stuck or the readers cannot keep up. A finished "
        "stream (every partition read to its end timestamp) is complete, not late: it passes, and says so."
    ),
    "change_stream_retention": (
        "The unfinished partitions' watermarks against the change stream's retention_period (1 day unless "
        "set): warns once one is older than half of it, errors at 80 %, before its records expire unread, "
        "and for a partition already expired (the partition sensor stops launching it). The way out is in "
        "the check's metadata."
    ),
    "mirrors_match_source": (
        "At the cut, every watched table has a mirror with the source table's row count and columns, and a random "
        "sample of 100 of its rows equals, value by value, the same keys' rows in the source read at the cut "
        "timestamp. A mismatch (a row missing, a value reverted, a column the source lacks) means the mirror "
        "drifted, or the table was added to the stream after its start: rebuild the tables it names "
        "(mirror_rebuild partitions)."
    ),
}
HISTORY_CHECK = "history_matches_mirrors"
HISTORY_CHECK_TEXT = (
    "At the cut, every history table's versions valid at the cut (_valid_from <= cut < _valid_to, or still "
    "current), read at the history's latest version as an engine without time travel reads them, are exactly "
    "the mirror at the cut, row by row. A mismatch means the history drifted: rebuild the tables it names "
    "(mirror_rebuild partitions reseed their history)."
)


def lake_definitions(
    names: ChangeStreamNames,
    *,
    tables: DynamicPartitionsDefinition,
    max_lag_seconds: float,
    interval_seconds: int,
    bounded: bool,
    history: bool,
) -> Definitions:
    """The lake step (changelog + mirrors), its job and its sensor (which also keeps ``tables``,
    the rebuilds' partitions, equal to the tables the stream watches).

    An open-ended stream never finishes, so its mirrors carry a time-window freshness policy. A
    ``bounded`` stream (an end timestamp is set) finishes, and then its mirrors are final: a policy
    that only counts time since the last materialization would call it late forever after. Its
    lateness is the ``watermark_lag`` check's, which tells a live stream from a finished one.
    With ``history`` (CS_PLATFORM_HISTORY_TABLES names tables), the step also materializes the
    history tables, which the same cut writes."""
    slug, stream, landed_changes, rebuilds, resource_key = names.slug, names.stream, names.asset_key, names.rebuilds, names.resource_key
    history_key = AssetKey([slug, "history"]) if history else None
    assets = LakeAssets(stream, AssetKey([slug, "changelog"]), AssetKey([slug, "mirrors"]), rebuilds, history_key)
    changelog_key, mirrors_key = assets.changelog, assets.mirrors
    spec = partial(AssetSpec, group_name=names.lake_group, kinds={"spark", "delta"})
    history_specs = [
        spec(
            history_key,
            deps=[mirrors_key],
            description=(
                f"Type-2 history of the tables of {stream} named by CS_PLATFORM_HISTORY_TABLES: one row per version of "
                "a source row, full row state, _valid_from/_valid_to = Spanner commit timestamps, _transaction_id, "
                "_operation. Filtered at a published cut and read at its latest version it is the mirror at that cut: "
                "the consistent read for engines without time travel (docs/reading.md)."
            ),
        )
    ] if history else []
    history_checks = [AssetCheckSpec(HISTORY_CHECK, asset=history_key, description=HISTORY_CHECK_TEXT)] if history else []

    @multi_asset(
        name=f"{slug}_cut",
        specs=[
            spec(
                changelog_key,
                deps=[landed_changes],
                description=f"Every mod of stream {stream}, one Delta row each, ingested from landing files exactly once.",
            ),
            spec(
                mirrors_key,
                deps=[changelog_key, rebuilds],
                freshness_policy=None
                if bounded
                else FreshnessPolicy.time_window(
                    fail_window=timedelta(seconds=max_lag_seconds), warn_window=timedelta(seconds=max_lag_seconds / 2)
                ),
                description=(
                    f"One Delta table per source table of {stream}, brought to the low watermark by complete "
                    "transactions only; the manifest records each cut's table versions (open them together "
                    "with Lake.mirrors_at_cut)."
                ),
            ),
            *history_specs,
        ],
        check_specs=[
            AssetCheckSpec(name, asset=mirrors_key, description=text, blocking=name == BLOCKING_CHECK)
            for name, text in CHECKS.items()
        ] + history_checks,
        required_resource_keys={"pyspark", "lake", "landing", resource_key},
    )
    def lake_step(context: AssetExecutionContext):
        from cs_platform.lake.fence import LakeFencedError
        from cs_platform.lake.stream_lake import IncompleteTransactionsError, UnmappedColumnTypeError, UntypedValueError
        from cs_platform.stream.lake_steps import keep_cutting

        change_stream: ChangeStreamResource = getattr(context.resources, resource_key).validated()
        lake_settings: LakeResource = context.resources.lake
        lake = lake_settings.lake(context.resources.pyspark.spark_session, stream, holder=f"lake run {context.run_id}")
        seconds = lake_settings.lake_soft_timeout_seconds if context.run.tags.get(KEEP_CUTTING_TAG) else 0.0
        store, target = change_stream.metadata_store(), change_stream.spanner.target()
        taken, stop = 0, threading.Event()  # set by SIGTERM or Dagster's termination: the run ends after its cut

        def still_ours() -> None:
            """Before each cut: a run the lake sensor presumed dead (it was stopped or stalled) stops."""
            stop_if_presumed_dead(context.instance, context.run_id, "is alive: stopping before its next cut so that only its successor cuts")

        beat = liveness_beat_seconds(change_stream.stale_run_seconds)
        # Cuts are recorded once per report interval, each report covering the cuts since the last;
        # at once when a check's outcome changed or a table joined, was reshaped or left
        # (cs_platform.stream.reporting). The checks' evaluations are recorded on the run's first report,
        # when an outcome changed, and on its last cut. Every cut is checked all the same, and the
        # blocking check stops the run on the cut that fails it.
        cadence, covered, recorded = Cadence(lake_settings.report_interval_seconds), [], None

        def record(report: list, checks: bool) -> None:
            """Log a report's materializations, and its check evaluations if ``checks``."""
            for result in report:
                if checks or not isinstance(result, AssetCheckResult):
                    context.log_event(assets.as_event(result))
            context.log.info(describe(covered, taken))

        def record_before_failing() -> None:
            """The cuts published since the last report, before the cut that failed (it raised in
            ``keep_cutting``: none of it is in ``covered``)."""
            if covered:
                record(assets.report(covered, lake, store, change_stream, lake_settings.max_lag_seconds, last=False), checks=False)

        try:
            with naming_settings(stream), drain_on_interrupt(stop), marking_progress(context.instance, context.run_id, beat):
                cuts = keep_cutting(
                    lake, context.resources.landing.store(), store, target, stream, seconds, lake_settings.cut_interval_seconds, stop, still_ours
                )
                for taken, cut in enumerate(cuts, start=1):
                    covered.append(cut.advance)
                    report = assets.report(covered, lake, store, change_stream, lake_settings.max_lag_seconds, cut.last)
                    outcomes = check_outcomes(report)
                    if cut.last:  # the step's outputs: the run ends on this cut
                        context.log.info(describe(covered, taken))
                        yield from report
                    elif cadence.due(urgent=outcomes != recorded or notable(cut.advance)):  # the UI shows a live run's cuts
                        record(report, checks=outcomes != recorded)  # an evaluation when an outcome changed
                    else:
                        continue
                    covered, recorded = [], outcomes
        except IncompleteTransactionsError as e:
            record_before_failing()
            yield assets.on_mirrors(_check(BLOCKING_CHECK, False, {"incomplete": e.count, "sample": str(e.missing)}))
            raise Failure(description=str(e), allow_retries=False) from e
        except LakeFencedError as e:  # presumed dead, and its successor took the lake: it wrote nothing after that
            raise Failure(description=str(e), allow_retries=False) from None
        except (UntypedValueError, UnmappedColumnTypeError) as e:  # no retry types them: a fix, an upgrade or a narrower stream does
            record_before_failing()
            if isinstance(e, UntypedValueError):
                found = {"untyped_values": len(e.values), "first_values": "; ".join(v.describe() for v in e.values[:5])}
            else:
                found = {"unmapped_columns": len(e.columns), "first": "; ".join(f"{t}.{c}: {json.dumps(k)}" for t, c, k in e.columns[:5])}
            yield assets.on_mirrors(_check(BLOCKING_CHECK, True, {"incomplete": 0}))
            yield assets.on_mirrors(_check("typed_values", False, found))
            raise Failure(description=str(e), allow_retries=False) from e
        if stop.is_set():
            end_canceled(context.instance, context.run_id, f"stream {stream}: asked to end, the lake run ended on a published cut")
        if not taken:
            raise Failure(description=f"stream {stream} has no partitions yet: turn on its partition sensor first")

    job = define_asset_job(
        names.lake_job,
        selection=[changelog_key, mirrors_key, *([history_key] if history else [])],
        executor_def=in_process_executor,  # one step: a step subprocess would only add its start-up
        tags={LAKE_TAG: stream},
        description=(
            f"Consistent cuts of stream {stream}: ingest landing files, apply complete transactions up to the low "
            "watermark. Launched by the lake sensor it keeps cutting for CS_PLATFORM_LAKE_SOFT_TIMEOUT_SECONDS; "
            "from the UI or a backfill it takes one cut."
        ),
    )

    @sensor(
        name=f"{slug}_lake_sensor",
        job=job,
        minimum_interval_seconds=interval_seconds,
        required_resource_keys={resource_key},
        default_status=DefaultSensorStatus.RUNNING,
        description=(
            f"Launches a lake run of {stream} (it keeps cutting for CS_PLATFORM_LAKE_SOFT_TIMEOUT_SECONDS) whenever "
            "its low watermark has moved since the last requested run, never while another lake run of the stream is in flight; "
            "retries a failed cut after a pause. Keeps one mirror_rebuild partition per watched table."
        ),
    )
    def lake_sensor(context: SensorEvaluationContext):
        change_stream: ChangeStreamResource = getattr(context.resources, resource_key).validated()
        with naming_settings(stream):
            cut = stream_cut(change_stream.metadata_store())
            watched = set(watched_table_names(change_stream.source_database(), stream))
        new = sorted(watched - set(context.instance.get_dynamic_partitions(tables.name)))
        added = [tables.build_add_request(new)] if new else []
        decision = plan_lake_run(context, job.name, stream, cut, interval_seconds, change_stream.stale_run_seconds)
        if isinstance(decision, SkipReason):
            return SensorResult(skip_reason=decision, dynamic_partitions_requests=added)
        return SensorResult(run_requests=[decision], cursor=cut.isoformat(), dynamic_partitions_requests=added)

    return Definitions(assets=[lake_step], jobs=[job], sensors=[lake_sensor])


def plan_lake_run(
    context: SensorEvaluationContext, job_name: str, stream: str, cut: datetime | None, interval_seconds: int, stale_run_seconds: float
):
    """A RunRequest for a cut at ``cut``, or why not. A lake run in flight that has not shown it is
    alive for ``stale_run_seconds`` (its process marks it every few seconds, ``marking_progress``)
    is presumed dead, marked failed, and a new one requested at once: without it a lake run killed
    without a word (SIGKILL, a lost machine) would stay STARTED and stop the lake for good."""
    if cut is None:
        return SkipReason(f"stream {stream} has no partitions yet")
    in_flight = context.instance.get_run_records(RunsFilter(job_name=job_name, tags={LAKE_TAG: stream}, statuses=LIVE_RUN_STATUSES), limit=1)
    tags = {LAKE_TAG: stream, KEEP_CUTTING_TAG: "true"}
    if in_flight:
        record = in_flight[0]
        quiet = seconds_since_progress(record)
        if quiet is None or quiet <= stale_run_seconds:
            return SkipReason(f"lake run {record.dagster_run.run_id} of {stream} is in flight")
        context.instance.report_run_failed(
            record.dagster_run,
            f"presumed dead by the lake sensor: not alive for {quiet:.0f}s, longer than stale_run_seconds={stale_run_seconds:g}; "
            "a new lake run cuts from the last published cut",
        )
        return RunRequest(run_key=f"cut-{cut.isoformat()}-after-{record.dagster_run.run_id}", tags=tags)
    last = context.instance.get_run_records(RunsFilter(job_name=job_name, tags={LAKE_TAG: stream}), limit=1)
    requested = datetime.fromisoformat(context.cursor) if context.cursor else None
    if requested is not None and cut <= requested:
        failed = last and last[0].dagster_run.status == DagsterRunStatus.FAILURE
        pause = max(60, 4 * interval_seconds)
        if not failed or (last[0].end_time or 0) > time.time() - pause:
            return SkipReason(f"the low watermark of {stream} is still {cut.isoformat()}, the last requested cut")
        return RunRequest(run_key=f"cut-{cut.isoformat()}-retry-{int(time.time())}", tags=tags)
    return RunRequest(run_key=f"cut-{cut.isoformat()}", tags=tags)


@dataclass(frozen=True)
class LakeAssets:
    """The assets one lake step materializes, and how it reports a cut to Dagster."""

    stream: str
    changelog: AssetKey
    mirrors: AssetKey
    rebuilds: AssetKey
    history: AssetKey | None = None  # when CS_PLATFORM_HISTORY_TABLES names tables

    def report(
        self,
        covered: "Sequence[LakeAdvance]",
        lake: "Lake",
        store: PartitionMetadataStore,
        change_stream: ChangeStreamResource,
        max_lag_seconds: float,
        last: bool,
    ) -> list:
        """The cuts ``covered`` since the last report (the latest last) as Dagster results: the
        changelog's materialization, the checks, the mirrors' materialization. The counts add up
        over the covered cuts; the cut, versions and checks are the latest's. ``mirrors_match_source``
        reads every watched table's row count from Spanner, so it runs on a run's last cut only (each
        lake run, and each materialization from the UI, ends on one); the other checks run on every cut."""
        advance = covered[-1]
        cut, result = advance.cut, advance.result
        lag = 0.0 if advance.position.finished else round((utc_now() - cut).total_seconds(), 1)
        quarantined = lake.quarantine.transactions()
        checks = [
            _check(BLOCKING_CHECK, True, {"incomplete": 0}),
            _check(
                "typed_values",
                not quarantined,
                {
                    "quarantined_transactions": len(quarantined),
                    "set_aside_since_last_report": sum(len({v.transaction for v in a.result.quarantined}) for a in covered),
                    "first_values": "; ".join(f"{q['server_transaction_id']}: {q['reason']}" for q in quarantined[:5]) or "none",
                },
            ),
            lag_check(advance.position, lag, max_lag_seconds),
            retention_check(watch_retention(store.unfinished(), change_stream.retention_period, utc_now()), self.stream),
        ]
        if last:
            checks.append(mirrors_match_source(lake, change_stream.source_database(), self.stream, self.rebuilds))
        checks = [self.on_mirrors(c) for c in checks]
        changelog = MaterializeResult(
            asset_key=self.changelog,
            metadata={
                "new_files": sum(a.ingested.files for a in covered),
                "new_rows": sum(a.ingested.rows_added for a in covered),
                "rows_read": sum(a.ingested.rows_read for a in covered),
                "duplicates_dropped": sum(a.ingested.duplicates for a in covered),
            },
        )
        first = covered[0].result
        mirrors = MaterializeResult(
            asset_key=self.mirrors,
            metadata={
                "cut": MetadataValue.timestamp(cut),
                # This report covers the cuts after previous_cut up to cut (each in the manifest:
                # cs-platform-lake cuts lists them); one unless cuts came faster than the report interval.
                "cuts_covered": len(covered),
                "cuts_applied": sum(a.result.applied for a in covered),  # the others found their cut already applied
                "applied": any(a.result.applied for a in covered),
                "previous_cut": MetadataValue.timestamp(first.previous) if first.previous else "none",
                "transactions": sum(a.result.transactions for a in covered),
                "mods": sum(a.result.mods for a in covered),
                "quarantined_transactions": sum(len({v.transaction for v in a.result.quarantined}) for a in covered),
                "mirror_versions": MetadataValue.json(advance.versions),
                "mirrors_appended": MetadataValue.json(sorted({t for a in covered for t in a.result.appended})),  # only inserts: appended, not merged
                "lag_seconds": lag,
                "cut_seconds": advance.seconds,
                "cut_seconds_max": max(a.seconds for a in covered),
                "stream_finished": advance.position.finished,
                **snapshot_metadata(advance.snapshot),
                # Tables the stream watches since the lake's start, and tables whose watched columns DDL
                # changed (dropped, added, retyped): their rows at this cut, read whole.
                **({"tables_joined": MetadataValue.json(joined)} if (joined := read_whole(advance, reshaped=False)) else {}),
                **({"tables_reshaped": MetadataValue.json(reshaped)} if (reshaped := read_whole(advance, reshaped=True)) else {}),
                # Tables whose only DDL was columns added that no row holds a value in yet: not read,
                # their mirrors and histories took the columns (NULL before).
                **({"tables_widened": MetadataValue.json(widened)} if (widened := sorted({t for a in covered for t in a.widened})) else {}),
                # Tables the stream watches no more: their mirrors keep their last rows (since: the cut that found it).
                **({"tables_frozen": MetadataValue.json(frozen_since(result.frozen))} if result.frozen else {}),
            },
        )
        if self.history is None:
            return [changelog, *checks, mirrors]
        history = MaterializeResult(
            asset_key=self.history,
            metadata={
                "cut": MetadataValue.timestamp(cut),
                "versions_written": MetadataValue.json({t: v for a in covered for t, v in a.result.histories.items()}),  # table -> its history's newest version
            },
        )
        history_checks = [history_matches_mirrors(lake, self.history)] if last else []
        return [changelog, *checks, mirrors, history, *history_checks]

    def on_mirrors(self, check: AssetCheckResult) -> AssetCheckResult:
        """``check`` of the mirrors asset: a step that also materializes history must say which asset
        a check is of. A passing evaluation leaves out the check's description (the UI shows the
        spec's; it was a third of an evaluation's storage); a failing one keeps it for alerts."""
        return check._replace(asset_key=self.mirrors, description=None if check.passed else check.description)

    def as_event(self, result: MaterializeResult | AssetCheckResult) -> AssetMaterialization | AssetCheckEvaluation:
        """A result as the event Dagster records for it, for a cut that is not the step's output:
        a step yields each output once, but logs any number of materializations and check evaluations."""
        if isinstance(result, MaterializeResult):
            return AssetMaterialization(asset_key=result.asset_key, metadata=result.metadata)
        return AssetCheckEvaluation(
            asset_key=result.asset_key,
            check_name=result.check_name,
            passed=result.passed,
            metadata=result.metadata,
            severity=result.severity,
            description=result.description,
            blocking=result.check_name == BLOCKING_CHECK,
        )


def describe(covered: "Sequence[LakeAdvance]", number: int) -> str:
    """The log line of a report: the cuts it covers (the run's ``number``-th the latest)."""
    advance, result = covered[-1], covered[-1].result
    what = (
        f"cut {number} at {advance.cut.isoformat()}: {'applied' if result.applied else 'already applied'}, "
        f"{result.transactions} transactions, {result.mods} mods"
        if len(covered) == 1
        else f"cuts {number - len(covered) + 1}-{number} up to {advance.cut.isoformat()}: "
        f"{sum(a.result.transactions for a in covered)} transactions, {sum(a.result.mods for a in covered)} mods"
    )
    return (
        f"{what}, versions {advance.versions}, in {advance.seconds:.1f} s"
        + (f"; {', '.join(joined)} joined the stream: read whole at the cut" if (joined := read_whole(advance, reshaped=False)) else "")
        + (f"; {', '.join(reshaped)} reshaped by DDL: read whole at the cut" if (reshaped := read_whole(advance, reshaped=True)) else "")
        + (f"; {', '.join(left)} left the stream: frozen from this cut on" if (left := [t for t, c in result.frozen.items() if c == advance.cut]) else "")
    )


def notable(advance: "LakeAdvance") -> bool:
    """A cut a user must see at once, not in the next report: it took the snapshot, or a table
    joined the stream, was reshaped by DDL or left it."""
    return advance.snapshot is not None or advance.joined is not None or advance.cut in advance.result.frozen.values()


def check_outcomes(report: list) -> dict[str, tuple[bool, AssetCheckSeverity]]:
    """Each check's outcome in a report: one that changed is recorded at once."""
    return {r.check_name: (r.passed, r.severity) for r in report if isinstance(r, AssetCheckResult)}


def read_whole(advance: "LakeAdvance", reshaped: bool) -> dict[str, int]:
    """The rows of the tables the cut read whole: those whose columns DDL changed, or the others (joined)."""
    rows = advance.joined.rows if advance.joined else {}
    return {table: n for table, n in rows.items() if (table in advance.reshaped) == reshaped}


def frozen_since(frozen: dict) -> dict[str, str]:
    """Frozen mirrors as metadata: each table and the first cut that found it unwatched."""
    return {table: since.isoformat() for table, since in sorted(frozen.items())}


def lag_check(position: StreamPosition, lag: float, max_lag_seconds: float) -> AssetCheckResult:
    """Late beyond ``max_lag_seconds``, unless the stream is finished: then the cut is its end
    timestamp, every partition was read to it, and however long ago that was, nothing is late."""
    status = (
        f"finished: every partition was read to the end timestamp {position.cut.isoformat()}; the lake holds the whole stream"
        if position.finished
        else f"live: the cut is {lag:g} s behind now (late beyond {max_lag_seconds:g} s, CS_PLATFORM_MAX_LAG_SECONDS)"
    )
    metadata = {"lag_seconds": lag, "low_watermark": MetadataValue.timestamp(position.cut), "stream_finished": position.finished, "status": status}
    return _check("watermark_lag", position.finished or lag <= max_lag_seconds, metadata, AssetCheckSeverity.WARN)


def snapshot_metadata(snapshot: "SnapshotResult | None") -> dict:
    """What the snapshot at T0 wrote, on the cut that took it."""
    if snapshot is None:
        return {}
    return {
        "snapshot_at": MetadataValue.timestamp(snapshot.cut),
        "snapshot_rows": MetadataValue.json(snapshot.rows),
        "snapshot_read_partitions": snapshot.partitions,
        "snapshot_seconds": snapshot.seconds,
    }


def history_matches_mirrors(lake: "Lake", history: AssetKey) -> AssetCheckResult:
    """At the last applied cut, each history table filtered at the cut equals its mirror at the cut."""
    from cs_platform.lake.verify import history_against_mirrors

    found = history_against_mirrors(lake)
    if found.cut is None:
        metadata = {"note": "no cut yet"}
    else:
        metadata = {"cut": MetadataValue.timestamp(found.cut), "tables": MetadataValue.json(found.tables), "differing": ", ".join(found.differing) or "none"}
    return AssetCheckResult(asset_key=history, check_name=HISTORY_CHECK, passed=not found.differing, description=HISTORY_CHECK_TEXT, metadata=metadata)


def _check(name: str, passed: bool, metadata: dict, severity: AssetCheckSeverity = AssetCheckSeverity.ERROR) -> AssetCheckResult:
    return AssetCheckResult(check_name=name, passed=passed, severity=severity, metadata=metadata, description=CHECKS[name])


def retention_check(watch: RetentionWatch, stream: str) -> AssetCheckResult:
    metadata = {
        "status": watch.describe(stream, start_over(stream)),
        "oldest_watermark_age_hours": None if watch.oldest_age is None else round(watch.oldest_age.total_seconds() / 3600, 2),
        "retention_hours": None if watch.retention is None else round(watch.retention.total_seconds() / 3600, 2),
        "partitions_past_half": len(watch.past_half),
        "partitions_near_expiry": len(watch.near_expiry),
        "partitions_expired": len(watch.expired),
    }
    severity = AssetCheckSeverity.WARN if watch.level is RetentionLevel.WARN else AssetCheckSeverity.ERROR
    metadata = {k: v for k, v in metadata.items() if v is not None}
    return _check("change_stream_retention", watch.level is RetentionLevel.OK, metadata, severity)


def mirrors_match_source(lake: "Lake", database, stream: str, rebuilds: AssetKey) -> AssetCheckResult:
    """``lake.verify.mirrors_against_source`` as the check, naming the partitions of ``rebuilds`` to backfill."""
    from cs_platform.lake.verify import mirrors_against_source

    found = mirrors_against_source(lake, database, stream)
    if found.cut is None:
        return _check("mirrors_match_source", True, {"mismatched": "none", "note": "no cut applied yet: nothing has landed"})
    problems = found.mismatched
    rebuild = f"materialize {rebuilds.to_user_string()} for partitions {', '.join(problems)} (a backfill)" if problems else "none"
    return _check(
        "mirrors_match_source",
        not problems,
        {
            "cut": MetadataValue.timestamp(found.cut),
            "tables": MetadataValue.json(found.tables),
            "mismatched": ", ".join(problems) or "none",
            "to_rebuild": rebuild,
        },
    )
