"""Where alerts go: a Slack incoming webhook, a generic JSON webhook, e-mail over SMTP.

Each destination is configured by a setting (``docs/operations.md``); an alert goes to every one
configured, and none configured means none is sent (the alert sensor says so once). A destination
that fails does not stop the others: :func:`send` tries them all at once, each within its timeout,
and says which failed and why in words that never quote a URL (a webhook's URL is its credential);
the sensor sends the alert to those again on its next tick (never twice to one that took it).

Webhook URLs are https (http only to this machine: ``settings``); e-mail goes over STARTTLS or
SMTPS, with a login whose password comes from the environment, unless the server is this machine's
own relay (``CS_PLATFORM_ALERT_SMTP_SECURITY=none``). Certificates are checked against the system's
authorities (``SSL_CERT_FILE`` names another bundle, as for any OpenSSL program).

Slack's incoming webhooks take ``{"text": ...}`` with Slack's own link markup
(https://api.slack.com/messaging/webhooks); ``dagster-slack`` posts through a bot token and a
channel instead, which an incoming webhook has no use for, so the message is posted here.
"""

from __future__ import annotations

import http.client
import json
import smtplib
import socket
import ssl
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from email.message import EmailMessage
from typing import Callable, Mapping

from cs_platform import settings
from cs_platform.settings import LOOPBACK_NAMES, SettingError

SEND_TIMEOUT_S = 10.0  # one destination's connection, request and answer


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
    smtp: tuple[str, int] = ("127.0.0.1", 25)
    smtp_security: str = "starttls"  # starttls, smtps or none
    smtp_user: str | None = None
    smtp_password: str | None = None
    email_from: str = "cs-platform@localhost"

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> "Destinations":
        """The destinations the settings name; a bad one is refused here, naming its variable."""
        destinations = cls(
            slack_webhook=settings.value(environ, "CS_PLATFORM_ALERT_SLACK_WEBHOOK"),
            webhook=settings.value(environ, "CS_PLATFORM_ALERT_WEBHOOK"),
            email_to=tuple(settings.value(environ, "CS_PLATFORM_ALERT_EMAIL_TO") or ()),
            smtp=settings.value(environ, "CS_PLATFORM_ALERT_SMTP"),
            smtp_security=settings.value(environ, "CS_PLATFORM_ALERT_SMTP_SECURITY"),
            smtp_user=settings.value(environ, "CS_PLATFORM_ALERT_SMTP_USER"),
            smtp_password=settings.value(environ, "CS_PLATFORM_ALERT_SMTP_PASSWORD"),
            email_from=settings.value(environ, "CS_PLATFORM_ALERT_EMAIL_FROM"),
        )
        if destinations.email_to and destinations.smtp_security == "none" and destinations.smtp[0] not in LOOPBACK_NAMES:
            raise SettingError(
                f"CS_PLATFORM_ALERT_SMTP_SECURITY=none sends alert e-mails in clear text to {destinations.smtp[0]}, which is not this "
                "machine: set it to starttls (port 587) or smtps (port 465)"
            )
        if destinations.smtp_user and not destinations.smtp_password:
            raise SettingError("CS_PLATFORM_ALERT_SMTP_USER is set and CS_PLATFORM_ALERT_SMTP_PASSWORD is not: set the password (from a secret)")
        return destinations

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
    host, port = destinations.smtp
    message = EmailMessage()
    message["Subject"] = f"[cs_platform] {alert.title}"
    message["From"] = destinations.email_from
    message["To"] = ", ".join(destinations.email_to)
    message.set_content(f"{alert.text}\n\n{alert.link}\n")
    tls = ssl.create_default_context()
    if destinations.smtp_security == "smtps":
        server: smtplib.SMTP = smtplib.SMTP_SSL(host, port, timeout=timeout_s, context=tls)
    else:
        server = smtplib.SMTP(host, port, timeout=timeout_s)
    with server as smtp:
        if destinations.smtp_security == "starttls":
            smtp.starttls(context=tls)
        if destinations.smtp_user:
            smtp.login(destinations.smtp_user, destinations.smtp_password or "")
        smtp.send_message(message)


def _why(error: Exception, timeout_s: float) -> str:
    """What went wrong, in words that quote no URL and no password."""
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP status {error.code}"
    if isinstance(error, urllib.error.URLError):
        error = error.reason if isinstance(error.reason, Exception) else OSError(str(error.reason))
    if isinstance(error, (socket.timeout, TimeoutError)):
        return f"no answer within {timeout_s:.0f} s"
    if isinstance(error, ssl.SSLError):
        return f"TLS failed: {error.reason or type(error).__name__}"
    if isinstance(error, smtplib.SMTPAuthenticationError):
        return f"the SMTP server refused the login (code {error.smtp_code})"
    if isinstance(error, smtplib.SMTPResponseException):
        return f"the SMTP server answered {error.smtp_code}"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return type(error).__name__


@dataclass(frozen=True)
class Delivery:
    delivered: tuple[str, ...]
    failed: dict[str, str]  # destination: why (no URL in it)


def send(alert: Alert, destinations: Destinations, to: tuple[str, ...] | None = None, timeout_s: float | None = None) -> Delivery:
    """Send ``alert`` to the destinations named in ``to`` (default: every configured one), all at
    once: the call takes about ``timeout_s`` (``SEND_TIMEOUT_S``) at most, however many of them
    never answer."""
    timeout_s = SEND_TIMEOUT_S if timeout_s is None else timeout_s
    names = list(to if to is not None else destinations.configured)
    senders: dict[str, Callable[[], None]] = {
        "slack": lambda: _post(destinations.slack_webhook or "", {"text": f"*{alert.title}*\n{alert.text}\n<{alert.link}|Open in Dagster>"}, timeout_s),
        "webhook": lambda: _post(destinations.webhook or "", asdict(alert), timeout_s),
        "email": lambda: _email(alert, destinations, timeout_s),
    }

    def attempt(name: str) -> str | None:
        try:
            senders[name]()
            return None
        except (OSError, smtplib.SMTPException, http.client.HTTPException, ValueError) as e:  # refused, timed out, a status, TLS
            return _why(e, timeout_s)

    with ThreadPoolExecutor(max_workers=len(names) or 1, thread_name_prefix="alert") as pool:
        outcomes = dict(zip(names, pool.map(attempt, names)))
    return Delivery(tuple(n for n, why in outcomes.items() if why is None), {n: why for n, why in outcomes.items() if why is not None})
