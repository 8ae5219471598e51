"""The lake assets in Dagster: a lake run shaped as the lake sensor launches it cuts beside the
sensor-launched reads, and its checks pass (complete transactions, lag, mirrors and history vs the
source read at the cut); a maintenance pass after it leaves every cut readable, and materializing
again from the UI is a no-op cut whose checks still pass. A column the lake cannot mirror stops the
step with its check red."""

from datetime import timedelta

from dagster import AssetKey, DagsterEventType, build_sensor_context, materialize

from cs_platform.changestream.metadata import utc_now
from cs_platform.definitions import build_definitions
from cs_platform.defs import lake_assets
from cs_platform.defs.lake_assets import CHECKS
from cs_platform.defs.tags import LAKE_TAG
from cs_platform.dev.deadline import load_per_core
from cs_platform.dev.oracle import check_bank_cut
from cs_platform.lake.spark import warm_delta
from cs_platform.lake.stream_lake import Lake
from cs_platform_tests.changestream.test_value_capture import cards_bundle
from cs_platform_tests.lake.readers import check_history_at_cut

MIRRORS = AssetKey(["bank_stream", "mirrors"])
HISTORY = AssetKey(["bank_stream", "history"])
# The lake run cuts while the low watermark moves, about six times in its window (the default 3 s on
# a quiet machine, longer under load, where the window grows): a report covers one cut or more. At
# 1 s, and then at 3 s in a window grown to 60 s, it cut back to back all through the window, most
# of them cuts of no new commit (the writes stop after 15 s), each a round of Spark jobs in a suite
# that is short of CPU.
REPORT_EVERY_S = 4
CUTS_PER_WINDOW = 6


def test_a_sensor_launched_lake_run_keeps_cutting_and_records_each_cut(bank_stream, dagster_instance, spark, monkeypatch, tmp_path):
    """What the lake sensor launches: one run, one Spark session, a cut whenever the low watermark
    moved while the stream is read. Its cuts are reported as materializations of both assets: the
    first at once, then one report per report interval covering the cuts since the last, every cut
    in exactly one; the checks' evaluations are recorded on the first and the last, none changed; the run ends on its last cut once the finished stream's
    end is applied, and every cut it published is a consistent cut of the bank."""
    monkeypatch.setenv("CS_PLATFORM_REPORT_INTERVAL_SECONDS", str(REPORT_EVERY_S))
    monkeypatch.setenv("CS_PLATFORM_HISTORY_TABLES", "Accounts")  # the same cuts write its history table
    # The run shares this process's JVM: warm it first, as a lake run's first cut on a cold JVM
    # (the first test on a worker) can take the whole window, leaving one cut where two are needed.
    warm_delta(spark, str(tmp_path / "warm-up"))
    # A cut takes 2-3 s on a quiet machine and 15 s or more at a load of 4 per core: the window
    # grows with the load, so the run has time for several cuts either way. The writes stop after
    # 15 s: the cuts after them (nothing new committed) publish the same versions with no MERGE, so
    # a loaded machine gets a longer window, not more work to load it further.
    window_s = min(90.0, 20 * max(1.0, load_per_core()))
    monkeypatch.setenv("CS_PLATFORM_CUT_INTERVAL_SECONDS", str(max(3.0, window_s / CUTS_PER_WINDOW)))
    # A bound, far off: the run ends once the finished stream's end is applied.
    monkeypatch.setenv("CS_PLATFORM_LAKE_SOFT_TIMEOUT_SECONDS", str(window_s + 300))
    runs = []

    def lake_run() -> None:
        defs = build_definitions()
        cut_step = [a for a in defs.assets if MIRRORS in a.keys]
        tags = {LAKE_TAG: "BankStream", lake_assets.KEEP_CUTTING_TAG: "true"}
        runs.append(materialize(cut_step, resources=defs.resources, instance=dagster_instance, tags=tags, raise_on_error=False))

    workload, end = bank_stream.read_short_window(dagster_instance, seconds=window_s, alongside=lake_run, write_seconds=15)

    (run,) = runs
    assert run.success
    recorded = [
        r.asset_materialization.metadata
        for r in reversed(dagster_instance.fetch_materializations(MIRRORS, limit=1000).records)
        if r.run_id == run.run_id
    ]
    lake = Lake(spark, str(bank_stream.landing_root.parent / "lake" / "BankStream"))
    cuts = lake.cuts()  # cuts[0] is the snapshot at the start, the run's first cut the next
    assert len(cuts) >= 3, f"one run applied {len(cuts) - 1} cuts in {window_s:.0f} s"
    # Every cut the run published is in exactly one report, which names the last it covers (the
    # others it took found theirs already applied: its last, the stream's end again, at least).
    applied, reported = sum(m["cuts_applied"].value for m in recorded), [m["cut"].value for m in recorded]
    assert applied == len(cuts) - 1 < sum(m["cuts_covered"].value for m in recorded), recorded
    assert {m["cut"].value for m in recorded if m["applied"].value} <= {c.timestamp() for c in cuts}, reported
    assert recorded[0]["cuts_covered"].value == 1 and "snapshot_rows" in recorded[0]  # the first cut took the snapshot: at once
    assert sum(m["transactions"].value for m in recorded) == sum(1 for t in workload.committed if t.commit_timestamp <= end)
    # No more reports than the run's life allows: the first, then one per interval (and the step's output).
    lives = dagster_instance.get_run_record_by_id(run.run_id)
    assert len(recorded) <= 2 + (lives.end_time - lives.start_time) / REPORT_EVERY_S
    assert cuts[-1] == end and reported[-1] == end.timestamp() and recorded[-1]["stream_finished"].value is True
    evaluations = [
        e.asset_check_evaluation
        for e in dagster_instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    ]
    by_check = {name: [e for e in evaluations if e.check_name == name] for name in CHECKS}
    assert all(e.passed for e in evaluations), [e for e in evaluations if not e.passed]
    # Evaluations on the run's first report and its last cut: no outcome changed in between.
    assert len(by_check["complete_transactions_below_low_watermark"]) == 2 <= len(recorded)
    assert len(by_check["mirrors_match_source"]) == 1  # reads the source: on the run's last cut
    changelog_rows = sum(
        r.asset_materialization.metadata["new_rows"].value
        for r in dagster_instance.fetch_materializations(AssetKey(["bank_stream", "changelog"]), limit=1000).records
        if r.run_id == run.run_id
    )
    assert changelog_rows == sum(len(t.mods) for t in workload.committed if t.commit_timestamp <= end) > 0
    for cut in (cuts[1], cuts[len(cuts) // 2], cuts[-1]):
        check_bank_cut(lake, bank_stream.bank, cut)
    check_history_at_cut(lake, cuts[-1])
    # The history asset: a materialization per report, and its check on the run's last cut.
    history = [r for r in dagster_instance.fetch_materializations(HISTORY, limit=1000).records if r.run_id == run.run_id]
    assert len(history) == len(recorded)
    (checked,) = [e for e in evaluations if e.check_name == lake_assets.HISTORY_CHECK]
    assert checked.passed and checked.asset_key == HISTORY

    # The same lake from the UI, three minutes on: a maintenance pass keeps every cut readable, and a
    # materialization takes one cut, the end again (a no-op), whose checks all pass: the finished
    # stream is complete, not late, though its end is past the max lag (the least it takes: 120 s).
    monkeypatch.setenv("CS_PLATFORM_MAX_LAG_SECONDS", "120")
    monkeypatch.setattr(lake_assets, "utc_now", lambda: utc_now() + timedelta(minutes=3))
    defs = build_definitions()
    cut_step = [a for a in defs.assets if MIRRORS in a.keys]
    assert cut_step[0].specs_by_key[MIRRORS].freshness_policy is None  # a bounded stream finishes: its mirrors are final
    maintenance = [a for a in defs.assets if AssetKey(["bank_stream", "lake_maintenance"]) in a.keys]
    maintained = materialize(maintenance, resources=defs.resources, instance=dagster_instance)
    assert maintained.success
    report = maintained.asset_materializations_for_node(maintenance[0].op.name)[0].metadata
    assert (report["kept_cuts"].value, report["cuts_dropped"].value) == (len(cuts), 0)
    assert "mirrors/Accounts" in report["tables"].value
    again = materialize(cut_step, resources=defs.resources, instance=dagster_instance)
    assert again.success
    checks = {c.check_name: c for c in again.get_asset_check_evaluations()}
    assert {name: checks[name].passed for name in CHECKS} == dict.fromkeys(CHECKS, True)
    lag = checks["watermark_lag"].metadata
    assert lag["stream_finished"].value is True and lag["lag_seconds"].value == 0 and lag["status"].value.startswith("finished")
    [mirrors] = [m.metadata for m in again.asset_materializations_for_node("bank_stream_cut") if m.asset_key == MIRRORS]
    assert mirrors["applied"].value is False and mirrors["cut"].value == end.timestamp() and "snapshot_rows" not in mirrors
    assert lake.cuts() == cuts


def test_a_column_the_lake_cannot_mirror_stops_the_lake_step_with_its_check_red(stream_setup, dagster_instance, spark, monkeypatch, tmp_path, alert_receivers):
    """A column added mid-stream whose type the lake has no mirror type for (a proto column as the
    emulator streams it: its type by bare name, see changestream/test_value_capture.py): the lake
    step applies nothing, its typed_values check goes red naming the column, and the step fails
    saying what resolves it (raised with allow_retries=False: no retry maps a type)."""
    monkeypatch.setenv("CS_PLATFORM_SPARK_MASTER", "local[2]")
    hands = stream_setup(
        ["CREATE PROTO BUNDLE (cs.Card, cs.Suit)", "CREATE TABLE Hands (Id INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (Id)",
         "CREATE CHANGE STREAM HandsStream FOR Hands"],
        "HandsStream", proto_descriptors=cards_bundle(),
    )
    start = utc_now()
    hands.configure(start, start + timedelta(seconds=6))
    hands.bank.update_ddl(["ALTER TABLE Hands ADD COLUMN Card cs.Card"]).result()
    hands.bank.run_in_transaction(lambda t: t.execute_update("INSERT INTO Hands (Id, Name, Card) VALUES (1, 'one', NEW cs.Card { name: 'ace' rank: 1 })"))
    hands.read_until_finished(dagster_instance, timeout_s=120)

    defs = build_definitions()
    cut_step = [a for a in defs.assets if AssetKey(["hands_stream", "mirrors"]) in a.keys]
    result = materialize(cut_step, resources=defs.resources, instance=dagster_instance, raise_on_error=False)

    assert not result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert checks["typed_values"].passed is False and checks["complete_transactions_below_low_watermark"].passed
    assert checks["typed_values"].metadata["unmapped_columns"].value == 1
    assert checks["typed_values"].metadata["first"].value == 'Hands.Card: {"code": "`cs.Card`"}'
    [failure] = [e for e in result.all_events if e.event_type is DagsterEventType.STEP_FAILURE]
    error = failure.step_failure_data
    assert "Hands.Card" in error.error.message and "upgrade cs_platform" in error.error.message
    assert Lake(spark, str(tmp_path / "lake" / "HandsStream")).cuts() == [start]  # the snapshot at T0 only: the cut applied nothing
    # The on-call engineer is told, once, by the alerts sensor (defs/alerts.py), with what the check says.
    with build_sensor_context(instance=dagster_instance, repository_def=defs.get_repository_def()) as context:
        assert defs.get_sensor_def("alerts").evaluate_tick(context).skip_message.startswith("1 alert(s) sent")
    [alert] = alert_receivers.posts["/hook"]
    assert alert["kind"] == "check_failed" and alert["title"] == "check typed_values of hands_stream/mirrors failed (ERROR)"
    assert "Hands.Card" in alert["text"] and alert["link"].endswith("/assets/hands_stream/mirrors?view=checks")
    assert len(alert_receivers.posts["/slack"]) == len(alert_receivers.mails) == 1
