"""The alerts sensor (``defs/alerts.py``) on a real instance, its alerts sent to a real HTTP server
(Slack's incoming webhook and a JSON webhook) and a real SMTP server on loopback: each alert once,
to every destination, with a link to the run or the asset; none sent and said once when nothing is
configured; a destination that was down gets the alert at the next tick, the others not twice.

The runs are the product's jobs, ended the way Dagster's run monitoring ends a run it finds dead
(``report_run_failed``, and the same event for a success), so the sensor reads the events a
daemon's tick would; a check failure of a real lake step is alerted in
``test_lake_assets.py``."""

from dagster import AssetCheckEvaluation, AssetCheckSeverity, AssetKey, build_sensor_context
from dagster._core.definitions.freshness import FreshnessState, FreshnessStateChange

from cs_platform.definitions import build_definitions
from cs_platform.defs.alerts import READER_FAILURES_TO_ALERT
from cs_platform_tests.conftest import end_run
from cs_platform_tests.test_settings import BASE

LAKE_JOB, READER_JOB = "bank_stream_lake", "bank_stream_read_partition"


class Ticks:
    """The alerts sensor of the definitions, evaluated tick after tick with its cursor."""

    def __init__(self, instance) -> None:
        self.defs = build_definitions(BASE)
        self.sensor = self.defs.get_sensor_def("alerts")
        self.instance = instance
        self.cursor = None

    def tick(self) -> str:
        with build_sensor_context(instance=self.instance, cursor=self.cursor, repository_def=self.defs.get_repository_def()) as context:
            result = self.sensor.evaluate_tick(context)
        self.cursor = result.cursor
        return result.skip_message or ""

    def end_run(self, job: str, failed: bool, partition: str | None = None) -> str:
        return end_run(self.instance, self.defs.resolve_job_def(job), failed, {"dagster/partition": partition} if partition else {})


def test_each_alert_reaches_slack_the_webhook_and_email_once(dagster_instance, alert_receivers):
    ticks = Ticks(dagster_instance)
    ticks.end_run(LAKE_JOB, failed=True)  # before the sensor's first tick: history, not alerted
    assert ticks.tick().startswith("0 alert(s) sent")

    first = ticks.end_run(LAKE_JOB, failed=True)
    ticks.end_run(LAKE_JOB, failed=True)  # the same burst
    for _ in range(READER_FAILURES_TO_ALERT):
        ticks.end_run(READER_JOB, failed=True, partition="p-broken")
    ticks.end_run(READER_JOB, failed=True, partition="p-flaky")
    ticks.end_run(READER_JOB, failed=False, partition="p-flaky")  # a success starts its count again
    ticks.end_run(READER_JOB, failed=True, partition="p-flaky")
    assert ticks.tick().startswith("2 alert(s) sent")
    hooks = alert_receivers.posts["/hook"]
    assert [(h["kind"], h["stream"]) for h in hooks] == [("lake_runs_failing", "BankStream"), ("reader_partition_failing", "BankStream")]
    assert hooks[0]["link"] == f"http://dagster.example:3000/runs/{first}"
    assert "p-broken" in hooks[1]["title"]
    assert [s["text"].splitlines()[0] for s in alert_receivers.posts["/slack"]] == [f"*{h['title']}*" for h in hooks]
    assert [m["Subject"] for m in alert_receivers.mails] == [f"[cs_platform] {h['title']}" for h in hooks]
    assert hooks[0]["link"] in alert_receivers.mails[0].get_content()

    ticks.end_run(LAKE_JOB, failed=True)  # still the same burst
    ticks.end_run(READER_JOB, failed=True, partition="p-broken")  # its fourth: alerted at the third
    assert ticks.tick().startswith("0 alert(s) sent")
    ticks.end_run(LAKE_JOB, failed=False)
    ticks.end_run(LAKE_JOB, failed=True)  # a new burst
    assert ticks.tick().startswith("1 alert(s) sent") and len(alert_receivers.posts["/hook"]) == 3

    # A check that fails (the retention watchdog at WARN), stays failed, passes, fails again.
    check = AssetCheckEvaluation(asset_key=AssetKey(["bank_stream", "mirrors"]), check_name="change_stream_retention", passed=False, severity=AssetCheckSeverity.WARN,
                                 metadata={"status": "stream BankStream keeps records 24.0h; the oldest unfinished watermark is 13.0h old"})
    dagster_instance.report_runless_asset_event(check)
    assert ticks.tick().startswith("1 alert(s) sent")
    alerted = alert_receivers.posts["/hook"][-1]
    assert alerted["kind"] == "check_failed" and "(WARN)" in alerted["title"] and "13.0h old" in alerted["text"]
    assert alerted["link"] == "http://dagster.example:3000/assets/bank_stream/mirrors?view=checks"
    dagster_instance.report_runless_asset_event(check)
    assert ticks.tick().startswith("0 alert(s) sent")
    dagster_instance.report_runless_asset_event(AssetCheckEvaluation(asset_key=check.asset_key, check_name=check.check_name, passed=True))
    assert ticks.tick().startswith("0 alert(s) sent")
    dagster_instance.report_runless_asset_event(check)
    assert ticks.tick().startswith("1 alert(s) sent")

    # A freshness policy reaching FAIL, as Dagster's freshness daemon records it.
    dagster_instance.report_runless_asset_event(
        FreshnessStateChange(key=AssetKey(["bank_stream", "mirrors"]), new_state=FreshnessState.FAIL, previous_state=FreshnessState.PASS, state_change_timestamp=0.0)
    )
    assert ticks.tick().startswith("1 alert(s) sent") and ticks.tick().startswith("0 alert(s) sent")
    assert alert_receivers.posts["/hook"][-1]["kind"] == "freshness_failed"
    assert len(alert_receivers.posts["/slack"]) == len(alert_receivers.mails) == len(alert_receivers.posts["/hook"]) == 6


def test_a_destination_that_was_down_gets_the_alert_next_tick_and_the_others_not_twice(dagster_instance, alert_receivers, monkeypatch):
    ticks = Ticks(dagster_instance)
    ticks.tick()
    monkeypatch.setenv("CS_PLATFORM_ALERT_WEBHOOK", "http://127.0.0.1:1/hook")  # nothing listens there
    ticks.end_run(LAKE_JOB, failed=True)
    assert "1 waiting to be sent again" in ticks.tick()
    assert len(alert_receivers.posts["/slack"]) == len(alert_receivers.mails) == 1 and "/hook" not in alert_receivers.posts
    monkeypatch.setenv("CS_PLATFORM_ALERT_WEBHOOK", alert_receivers.posts_url("/hook"))
    assert ticks.tick().startswith("1 alert(s) sent")
    assert len(alert_receivers.posts["/hook"]) == 1 and len(alert_receivers.posts["/slack"]) == len(alert_receivers.mails) == 1


def test_no_destination_sends_nothing_and_says_so_once(dagster_instance, capfd):
    ticks = Ticks(dagster_instance)
    ticks.tick()
    ticks.end_run(LAKE_JOB, failed=True)
    assert ticks.tick() == "1 alert(s), no destination configured"
    ticks.end_run(LAKE_JOB, failed=False)
    ticks.end_run(LAKE_JOB, failed=True)
    ticks.tick()
    assert capfd.readouterr().err.count("no alert destination is configured") == 1  # the sensor's log, on the console
