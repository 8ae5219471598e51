"""The alerts sensor (``defs/alerts.py``) on a real instance, its alerts sent to a real HTTP server
(Slack's incoming webhook and a JSON webhook) and a real SMTP server on loopback: each alert once,
to every destination, with a link to the run or the asset; none sent and said once when nothing is
configured; a destination that was down gets the alert at the next tick, the others not twice.

The runs are the product's jobs, ended the way Dagster's run monitoring ends a run it finds dead
(``report_run_failed``, and the same event for a success), so the sensor reads the events a
daemon's tick would; a check failure of a real lake step is alerted in
``test_lake_assets.py``."""

import os
import socket
import threading
from dataclasses import asdict

import pytest
from dagster import AssetCheckEvaluation, AssetCheckSeverity, AssetKey, build_sensor_context
from dagster._core.definitions.freshness import FreshnessState, FreshnessStateChange

from cs_platform import notify, settings
from cs_platform.definitions import build_definitions
from cs_platform.defs.alerts import FACT_CHARS, MAX_PENDING, READER_FAILURES_TO_ALERT, AlertState
from cs_platform.dev.deadline import load_per_core
from cs_platform.notify import Alert, Destinations, send
from cs_platform.settings import SettingError
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


class Unanswered:
    """A TCP server on loopback that takes every connection and never answers: a webhook that hangs."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.connections: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                self.connections.append(self.server.accept()[0])
            except OSError:  # closed
                return

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}/hook"

    def close(self) -> None:
        self.server.close()
        for connection in self.connections:
            connection.close()


def test_a_destination_that_never_answers_is_tried_once_a_tick_and_the_others_get_every_alert(dagster_instance, alert_receivers, monkeypatch, capfd):
    # Long enough for the healthy destinations on a loaded machine (at a load of 10 per core an SMTP
    # server got the third e-mail whole, but its answer came after a 1 s timeout: sent again at the
    # next tick), and below the tick's sending budget (TICK_SENDING_S), which the wait on the
    # destination that never answers counts against.
    timeout_s = round(min(10.0, 2.0 * max(1.0, load_per_core())))
    monkeypatch.setattr(notify, "SEND_TIMEOUT_S", float(timeout_s))
    ticks = Ticks(dagster_instance)
    ticks.tick()
    hanging = Unanswered()
    try:
        monkeypatch.setenv("CS_PLATFORM_ALERT_WEBHOOK", hanging.url)
        for partition in ("p1", "p2", "p3"):  # three alerts in one tick
            for _ in range(READER_FAILURES_TO_ALERT):
                ticks.end_run(READER_JOB, failed=True, partition=partition)
        assert ticks.tick() == "3 alert(s) sent, 3 waiting to be sent again"
        assert len(hanging.connections) == 1  # tried with the first alert, then left for the next tick
        assert len(alert_receivers.posts["/slack"]) == len(alert_receivers.mails) == 3
        logged = capfd.readouterr().err  # the sensor's log, on the console
        assert f"alert destination webhook failed (no answer within {timeout_s} s)" in logged and hanging.url not in logged
        assert "destination slack failed" not in logged and "destination email failed" not in logged
        assert ticks.tick() == "0 alert(s) sent, 3 waiting to be sent again" and len(hanging.connections) == 2
    finally:
        hanging.close()
    monkeypatch.setenv("CS_PLATFORM_ALERT_WEBHOOK", alert_receivers.posts_url("/hook"))
    assert ticks.tick() == "3 alert(s) sent, 0 waiting to be sent again"
    assert len(alert_receivers.posts["/hook"]) == 3 and len(alert_receivers.posts["/slack"]) == 3


def test_at_most_a_hundred_alerts_wait_for_a_destination_that_is_down(dagster_instance, alert_receivers, monkeypatch, capfd):
    ticks = Ticks(dagster_instance)
    ticks.tick()
    # The sensor's cursor, as ticks with the webhook down left it: 120 alerts the webhook still waits for.
    state = AlertState(ticks.cursor)
    state.pending = [
        {"alert": asdict(Alert("check_failed", "BankStream", f"alert {n}", "text", "link")), "to": ["webhook"]} for n in range(MAX_PENDING + 20)
    ]
    ticks.cursor = state.to_cursor()
    monkeypatch.setenv("CS_PLATFORM_ALERT_WEBHOOK", "http://127.0.0.1:1/hook")  # nothing listens there
    assert ticks.tick() == f"0 alert(s) sent, {MAX_PENDING} waiting to be sent again"
    assert "20 alert(s) dropped, the oldest" in capfd.readouterr().err
    monkeypatch.setenv("CS_PLATFORM_ALERT_WEBHOOK", alert_receivers.posts_url("/hook"))
    while AlertState(ticks.cursor).pending:  # a tick sends for TICK_SENDING_S at most: a loaded machine may need two
        ticks.tick()
    assert [h["title"] for h in alert_receivers.posts["/hook"]] == [f"alert {n}" for n in range(20, MAX_PENDING + 20)]  # the newest, once each
    assert "/slack" not in alert_receivers.posts and not alert_receivers.mails


@pytest.mark.parametrize(
    "name, value",
    [
        ("CS_PLATFORM_ALERT_SLACK_WEBHOOK", "hooks.slack.com/services/T0/B0/secret-token"),  # no scheme
        ("CS_PLATFORM_ALERT_WEBHOOK", "https://hooks.example.com/a b/secret-token"),  # a space
        ("CS_PLATFORM_ALERT_WEBHOOK", "http://hooks.example.com/secret-token"),  # clear text off this machine
        ("CS_PLATFORM_ALERT_WEBHOOK", "file:///etc/secret-token"),
        ("CS_PLATFORM_ALERT_SMTP", "smtp.example.com"),  # no port
    ],
)
def test_a_malformed_alert_setting_stops_the_code_location_naming_it_and_quoting_no_secret(name, value):
    with pytest.raises(SettingError, match=name) as refused:
        build_definitions({**BASE, name: value})
    if settings.SETTINGS[name].secret:
        assert "secret-token" not in str(refused.value) and refused.value.__cause__ is None


def test_clear_text_mail_is_only_for_this_machine_and_a_wrong_password_is_named_not_shown(dagster_instance, alert_receivers, monkeypatch):
    with pytest.raises(SettingError, match="CS_PLATFORM_ALERT_SMTP_SECURITY=none sends alert e-mails in clear text to smtp.example.com"):
        Destinations.from_environ({**os.environ, "CS_PLATFORM_ALERT_SMTP": "smtp.example.com:25", "CS_PLATFORM_ALERT_SMTP_SECURITY": "none"})
    monkeypatch.setenv("CS_PLATFORM_ALERT_SMTP_PASSWORD", "wrong-password")
    delivery = send(Alert("k", "BankStream", "title", "text", "link"), Destinations.from_environ(os.environ), ("email",))
    assert delivery.failed == {"email": "the SMTP server refused the login (code 535)"} and not alert_receivers.mails
    monkeypatch.setenv("CS_PLATFORM_ALERT_SMTP_SECURITY", "none")  # the server requires STARTTLS: nothing is sent in clear text
    delivery = send(Alert("k", "BankStream", "title", "text", "link"), Destinations.from_environ(os.environ), ("email",))
    assert list(delivery.failed) == ["email"] and not alert_receivers.mails


def test_an_alert_carries_no_source_value_and_cuts_long_text(dagster_instance, alert_receivers):
    ticks = Ticks(dagster_instance)
    ticks.tick()
    quoted_row = "transaction t1 wrote 'card 4111 1111 1111 1111' to Hands.Card, which is not a INT64"
    dagster_instance.report_runless_asset_event(AssetCheckEvaluation(
        asset_key=AssetKey(["bank_stream", "mirrors"]), check_name="typed_values", passed=False, severity=AssetCheckSeverity.ERROR,
        metadata={"untyped_values": 1, "first_values": quoted_row, "note": "x" * 5000},
    ))
    assert ticks.tick().startswith("1 alert(s) sent")
    for text in (alert_receivers.posts["/hook"][0]["text"], alert_receivers.posts["/slack"][0]["text"], alert_receivers.mails[0].get_content()):
        assert "untyped_values: 1" in text and "4111" not in text
        assert "x" * FACT_CHARS + "…" in text and "x" * (FACT_CHARS + 1) not in text
