"""Where alerts go: a Slack incoming webhook, a generic JSON webhook, e-mail over SMTP.

Each destination is configured by a setting (``docs/operations.md``); an alert goes to every one
configured, and none configured means none is sent (the alert sensor says so once). A destination
that fails does not stop the others: :func:`send` tries them all and says which failed, and the
sensor sends the alert to those again on its next tick (never twice to one that took it).

Slack's incoming webhooks take ``{"text": ...}`` with Slack's own link markup
(https://api.slack.com/messaging/webhooks); ``dagster-slack`` posts through a bot token and a
channel instead, which an incoming webhook has no use for, so the message is posted here.
"""

from __future__ import annotations

import json
import smtplib
import urllib.request
from dataclasses import asdict, dataclass
from email.message import EmailMessage
from typing import Mapping

from cs_platform import settings


@dataclass(frozen=True)
class Alert:
    """One thing an on-call engineer must know, once."""

    kind: str  # lake_runs_failing, reader_partition_failing, check_failed, freshness_failed
    stream: str
    title: str  # one line
    text: str  # what happened, and what to do
    link: str  # the run or the asset in the Dagster UI


@dataclass(frozen=True)
class Destinations:
    slack_webhook: str | None = None
    webhook: str | None = None
    email_to: tuple[str, ...] = ()
    smtp: str | None = None  # host:port
    email_from: str = "cs-platform@localhost"

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> "Destinations":
        return cls(
            slack_webhook=settings.value(environ, "CS_PLATFORM_ALERT_SLACK_WEBHOOK"),
            webhook=settings.value(environ, "CS_PLATFORM_ALERT_WEBHOOK"),
            email_to=tuple(settings.value(environ, "CS_PLATFORM_ALERT_EMAIL_TO") or ()),
            smtp=settings.value(environ, "CS_PLATFORM_ALERT_SMTP"),
            email_from=settings.value(environ, "CS_PLATFORM_ALERT_EMAIL_FROM"),
        )

    @property
    def configured(self) -> list[str]:
        names = ["slack"] if self.slack_webhook else []
        names += ["webhook"] if self.webhook else []
        return names + (["email"] if self.email_to else [])


def _post(url: str, body: dict, timeout_s: float) -> None:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        response.read()


def _email(alert: Alert, destinations: Destinations, timeout_s: float) -> None:
    host, _, port = (destinations.smtp or "127.0.0.1:25").rpartition(":")
    message = EmailMessage()
    message["Subject"] = f"[cs_platform] {alert.title}"
    message["From"] = destinations.email_from
    message["To"] = ", ".join(destinations.email_to)
    message.set_content(f"{alert.text}\n\n{alert.link}\n")
    with smtplib.SMTP(host, int(port), timeout=timeout_s) as smtp:
        smtp.send_message(message)


@dataclass(frozen=True)
class Delivery:
    delivered: tuple[str, ...]
    failed: dict[str, str]  # destination: why


def send(alert: Alert, destinations: Destinations, to: tuple[str, ...] | None = None, timeout_s: float = 10) -> Delivery:
    """Send ``alert`` to the destinations named in ``to`` (default: every configured one)."""
    delivered, failed = [], {}
    for name in to if to is not None else destinations.configured:
        try:
            if name == "slack":
                _post(destinations.slack_webhook, {"text": f"*{alert.title}*\n{alert.text}\n<{alert.link}|Open in Dagster>"}, timeout_s)
            elif name == "webhook":
                _post(destinations.webhook, asdict(alert), timeout_s)
            else:
                _email(alert, destinations, timeout_s)
            delivered.append(name)
        except (OSError, smtplib.SMTPException) as e:  # refused, timed out, an HTTP error status (URLError is an OSError)
            failed[name] = str(e)
    return Delivery(tuple(delivered), failed)
