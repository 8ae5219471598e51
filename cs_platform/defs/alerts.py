"""The ``alerts`` sensor: tells the on-call engineer, once, what the UI alone would show.

Open-source Dagster has no alert policies (Dagster+ has); a sensor reads the instance instead. Each
tick it reads what changed since the last one and decides, keeping what it knows in its cursor:

- **lake runs failing**: the first failed lake run of a stream alerts; later failures are the same
  burst and do not, until a lake run of that stream succeeds;
- **a partition's reads failing**: ``READER_FAILURES_TO_ALERT`` failed reader runs of one partition
  in a row alert, once, until one of its runs succeeds;
- **a check failing**: any asset check whose latest evaluation failed and whose previous one did
  not (the blocking ones that stop the lake, the lag check, the retention watchdog at WARN or
  ERROR), with its severity and what it says;
- **a freshness policy at FAIL**: an asset whose freshness state became FAIL (Dagster's freshness
  daemon records the states).

Alerts go where ``notify.Destinations`` says (``docs/operations.md``); with none configured the
sensor says so once in its log and sends nothing. A destination that fails gets the alert again at
the next tick; one that took it never gets it twice.

A tick stays well inside Dagster's sensor timeout (60 s) whatever the destinations do: each alert
goes to its destinations at once, a destination that failed is not tried again in the same tick,
and sending stops after ``TICK_SENDING_S``; the cursor is updated after each alert. At most
``MAX_PENDING`` alerts wait for a destination that is down; beyond that the oldest are dropped, and
the log says how many. An alert carries no source value: a check's facts that quote rows
(``SHOWS_SOURCE_VALUES``) stay in the event log, and every other text is cut at ``FACT_CHARS``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict

from dagster import (
    AssetCheckKey,
    AssetKey,
    DagsterEventType,
    DefaultSensorStatus,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from cs_platform import settings
from cs_platform.defs.lake_assets import SHOWS_SOURCE_VALUES
from cs_platform.defs.names import ChangeStreamNames
from cs_platform.notify import Alert, Destinations, send

READER_FAILURES_TO_ALERT = 3
SENSOR_NAME = "alerts"
TICK_SENDING_S = 30.0  # no alert is sent after this much of a tick (Dagster ends a sensor tick at 60 s)
MAX_PENDING = 100  # alerts waiting for a destination that is down; the oldest are dropped beyond
FACT_CHARS = 200  # a check's text fact in an alert is cut here
_PAGE = 500


def _jobs(streams: list[ChangeStreamNames]) -> dict[str, tuple[str, str]]:
    """Per job name, the stream it serves and whether it reads (``reader``) or cuts (``lake``)."""
    return {n.job: (n.stream, "reader") for n in streams} | {n.lake_job: (n.stream, "lake") for n in streams}


class AlertState:
    """What the sensor knows between ticks (its cursor, as JSON)."""

    def __init__(self, cursor: str | None) -> None:
        state = json.loads(cursor) if cursor else {}
        self.run_cursors: dict[str, str | None] = state.get("run_cursors", {})
        self.lake_failing: dict[str, str] = state.get("lake_failing", {})  # stream: the run that opened the burst
        self.reader_failures: dict[str, int] = state.get("reader_failures", {})  # "stream partition": failures in a row
        self.failed_checks: list[str] = state.get("failed_checks", [])
        self.stale_assets: list[str] = state.get("stale_assets", [])
        self.pending: list[dict] = state.get("pending", [])  # {"alert": ..., "to": [destinations left]}
        self.said_unconfigured: bool = state.get("said_unconfigured", False)

    def to_cursor(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


def alerts_sensor(streams: list[ChangeStreamNames], minimum_interval_seconds: int = 30):
    """The sensor over the streams of these definitions."""
    jobs = _jobs(streams)
    by_slug = {n.slug: n.stream for n in streams}  # an asset's first key part: its stream

    @sensor(
        name=SENSOR_NAME,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description="Sends an alert (Slack, webhook, e-mail: CS_PLATFORM_ALERT_*) when lake runs start failing, a partition's "
        "reads fail repeatedly, an asset check fails (blocking checks, lag, retention) or a freshness policy reaches FAIL; "
        "once each (docs/operations.md).",
    )
    def alerts(context: SensorEvaluationContext):
        environ = os.environ
        destinations = Destinations.from_environ(environ)
        ui = settings.value(environ, "CS_PLATFORM_DAGSTER_URL").rstrip("/")
        state = AlertState(context.cursor)
        found = _run_alerts(context, jobs, state, ui) + _check_alerts(context, state, ui, by_slug) + _freshness_alerts(context, state, ui, by_slug)
        if not destinations.configured:
            if not state.said_unconfigured:
                context.log.info("no alert destination is configured (CS_PLATFORM_ALERT_SLACK_WEBHOOK, CS_PLATFORM_ALERT_WEBHOOK, CS_PLATFORM_ALERT_EMAIL_TO): alerts are not sent")
                state.said_unconfigured = True
            context.update_cursor(state.to_cursor())
            return SkipReason(f"{len(found)} alert(s), no destination configured")
        state.pending += [{"alert": asdict(alert), "to": destinations.configured} for alert in found]
        if len(state.pending) > MAX_PENDING:
            dropped = len(state.pending) - MAX_PENDING
            context.log.warning(f"{dropped} alert(s) dropped, the oldest: more than {MAX_PENDING} were waiting for a destination that is down")
            state.pending = state.pending[dropped:]
        context.update_cursor(state.to_cursor())
        sent, down, began = 0, {}, time.monotonic()
        for item in list(state.pending):
            to = tuple(d for d in item["to"] if d not in down)
            if not to or time.monotonic() - began > TICK_SENDING_S:
                continue
            alert = Alert(**item["alert"])
            delivery = send(alert, destinations, to)
            down |= delivery.failed
            item["to"] = [d for d in item["to"] if d not in delivery.delivered]
            state.pending = [i for i in state.pending if i["to"]]
            context.update_cursor(state.to_cursor())  # what a destination took is never sent to it again
            if delivery.delivered:
                sent += 1
                context.log.info(f"alert sent: {alert.title} ({', '.join(delivery.delivered)})")
        for name, why in sorted(down.items()):
            context.log.warning(f"alert destination {name} failed ({why}): its alerts are sent again next tick")
        return SkipReason(f"{sent} alert(s) sent, {len(state.pending)} waiting to be sent again")

    return alerts


def _run_alerts(context: SensorEvaluationContext, jobs: dict[str, tuple[str, str]], state: AlertState, ui: str) -> list[Alert]:
    """Lake bursts and repeatedly failing partitions, from the runs that ended since the last tick
    (in the order they ended)."""
    ended = []
    for event_type in (DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_SUCCESS):
        cursor = state.run_cursors.get(event_type.value)
        if cursor is None and event_type.value not in state.run_cursors:  # first tick: from now on, not the history
            latest = context.instance.fetch_run_status_changes(event_type, limit=1)
            state.run_cursors[event_type.value] = latest.cursor if latest.records else None
            continue
        while True:
            page = context.instance.fetch_run_status_changes(event_type, limit=_PAGE, cursor=cursor, ascending=True)
            ended += [(r.storage_id, event_type, r.event_log_entry.run_id) for r in page.records]
            cursor = page.cursor if page.records else cursor
            if not page.has_more:
                break
        state.run_cursors[event_type.value] = cursor
    alerts = []
    for _, event_type, run_id in sorted(ended):
        run = context.instance.get_run_by_id(run_id)
        if run is None or run.job_name not in jobs:
            continue
        stream, kind = jobs[run.job_name]
        failed = event_type is DagsterEventType.RUN_FAILURE
        if kind == "lake":
            if failed and stream not in state.lake_failing:
                state.lake_failing[stream] = run_id
                alerts.append(Alert(
                    "lake_runs_failing", stream, f"{stream}: lake runs are failing",
                    f"Lake run {run_id} of stream {stream} failed: the lake is not cut until a lake run succeeds. Its log says "
                    "why; later failures of this burst are not alerted again.", f"{ui}/runs/{run_id}",
                ))
            elif not failed:
                state.lake_failing.pop(stream, None)
            continue
        partition = run.tags.get("dagster/partition", "")
        key = f"{stream} {partition}"
        if not failed:
            state.reader_failures.pop(key, None)
            continue
        state.reader_failures[key] = state.reader_failures.get(key, 0) + 1
        if state.reader_failures[key] == READER_FAILURES_TO_ALERT:
            alerts.append(Alert(
                "reader_partition_failing", stream, f"{stream}: partition {partition} failed {READER_FAILURES_TO_ALERT} reads in a row",
                f"The last {READER_FAILURES_TO_ALERT} reader runs of partition {partition} of stream {stream} failed (the latest: "
                f"{run_id}); the sensor launches it again from its watermark, and nothing is lost while it fails, but the low "
                "watermark and the lake wait for it.", f"{ui}/runs/{run_id}",
            ))
    return alerts


def _asset_keys(context: SensorEvaluationContext, by_slug: dict[str, str]) -> list[AssetKey]:
    return [key for key in context.repository_def.asset_graph.get_all_asset_keys() if key.path[0] in by_slug]


def _check_alerts(context: SensorEvaluationContext, state: AlertState, ui: str, by_slug: dict[str, str]) -> list[Alert]:
    """Checks whose latest evaluation failed where the one before did not."""
    keys: list[AssetCheckKey] = [k for k in context.repository_def.asset_graph.asset_check_keys if k.asset_key.path[0] in by_slug]
    latest = context.instance.event_log_storage.get_latest_asset_check_execution_by_key(keys)
    failing, alerts = [], []
    for key, record in sorted(latest.items(), key=lambda item: item[0].to_user_string()):
        evaluation = record.event.asset_check_evaluation if record.event else None
        if evaluation is None or evaluation.passed:
            continue
        name = key.to_user_string()
        failing.append(name)
        if name in state.failed_checks:
            continue
        facts = [
            f"{name}: {_cut(value.value)}"
            for name, value in evaluation.metadata.items()
            if isinstance(value.value, (str, int, float)) and name not in SHOWS_SOURCE_VALUES
        ]
        alerts.append(Alert(
            "check_failed", by_slug[key.asset_key.path[0]], f"check {key.name} of {key.asset_key.to_user_string()} failed ({evaluation.severity.value})",
            "\n".join([evaluation.description or "", *facts]).strip(), f"{ui}/assets/{'/'.join(key.asset_key.path)}?view=checks",
        ))
    state.failed_checks = failing
    return alerts


def _cut(value: str | int | float) -> str | int | float:
    return value[:FACT_CHARS] + "…" if isinstance(value, str) and len(value) > FACT_CHARS else value


def _freshness_alerts(context: SensorEvaluationContext, state: AlertState, ui: str, by_slug: dict[str, str]) -> list[Alert]:
    """Assets whose freshness state became FAIL."""
    records = context.instance.get_freshness_state_records(_asset_keys(context, by_slug))
    stale = sorted(key.to_user_string() for key, r in records.items() if r.freshness_state.value == "FAIL")
    alerts = [
        Alert(
            "freshness_failed", by_slug[AssetKey.from_user_string(name).path[0]], f"{name} is not fresh (freshness policy at FAIL)",
            f"Asset {name} was not updated within its freshness policy's window (CS_PLATFORM_MAX_LAG_SECONDS): the lake is late.",
            f"{ui}/assets/{name}",
        )
        for name in stale if name not in state.stale_assets
    ]
    state.stale_assets = stale
    return alerts
