"""Every setting the product reads from the environment, parsed in one place.

Each setting is an environment variable with a parser, a default and a line of documentation (the
table in docs/settings.md is this table). A value that does not parse is an error naming the
variable and what it takes; an unknown ``CS_PLATFORM_*`` variable (a typo) is warned about with
the closest known name, since a misspelt setting otherwise silently keeps its default.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import urlsplit

from cs_platform.changestream.errors import MalformedRecordError
from cs_platform.changestream.query import MAX_HEARTBEAT_MILLIS, MIN_HEARTBEAT_MILLIS
from cs_platform.changestream.reader import DEFAULT_CHUNK_INTERVAL, DEFAULT_CHUNK_MODS
from cs_platform.changestream.values import parse_timestamp
from cs_platform.errors import CsPlatformError, InvalidArgumentError
from cs_platform.lake.history_schema import HistoryPolicy

log = logging.getLogger(__name__)

PREFIX = "CS_PLATFORM_"


class SettingError(InvalidArgumentError):
    """Raised when an environment variable holds a value its setting cannot take."""


DAY = 86_400


@dataclass(frozen=True)
class Number:
    """A finite number within a range: NaN and the infinities never are (``float`` takes them), and
    a value out of range (milliseconds written for seconds, a sign slipped in) fails here, naming its
    variable, instead of making a run that never ends or a sensor that never ticks."""

    low: float
    high: float
    unit: str = "seconds"
    whole: bool = False
    above_low: bool = False  # ``low`` itself is refused: a duration that must pass

    def __call__(self, text: str) -> float:
        return self.check(int(text) if self.whole else float(text))

    def check(self, number: float) -> float:
        """``number`` if it is in range; ValueError otherwise (for a value that did not come as text)."""
        if isinstance(number, bool) or not math.isfinite(number):
            raise ValueError("not a finite number")
        if self.whole and number != int(number):
            raise ValueError("not a whole number")
        if number < self.low or (self.above_low and number == self.low) or number > self.high:
            raise ValueError(f"not {self.range}")
        return number

    @property
    def range(self) -> str:
        low, high = _plain(self.low), _plain(self.high)
        return f"above {low} and at most {high}" if self.above_low else f"from {low} to {high}"

    @property
    def expects(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        return f"{kind} of {self.unit} {self.range}" if self.unit else f"{kind} {self.range}"


def _plain(number: float) -> str:
    return f"{int(number):,}" if number == int(number) else f"{number:g}"


def _timestamp(text: str) -> datetime:
    return parse_timestamp(text)


def _names(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


# A cron schedule as Dagster's schedules take it: five fields (no seconds), each a list of ``*``, a
# value or a range, with an optional ``/step``; months and weekdays also by name; or an ``@`` alias.
# Checked here, without Dagster, so a typo fails the load naming its variable; the schedule built
# from it (``defs/schedules.py``) names it too if Dagster refuses what passes this.
_CRON_FIELDS = ((0, 59, ()), (0, 23, ()), (1, 31, ()), (1, 12, tuple("jan feb mar apr may jun jul aug sep oct nov dec".split())),
                (0, 7, tuple("sun mon tue wed thu fri sat".split())))
_CRON_ALIASES = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
_CRON_ITEM = re.compile(r"(?:\*|(\w+)(?:-(\w+))?)(?:/(\d+))?")


def _cron(text: str) -> str:
    if text.strip().lower() in _CRON_ALIASES:
        return text
    fields = text.split()
    if len(fields) != len(_CRON_FIELDS):
        raise ValueError("a cron schedule")
    for field, (low, high, names) in zip(fields, _CRON_FIELDS):
        for item in field.split(","):
            match = _CRON_ITEM.fullmatch(item.lower())
            if match is None or match.group(3) == "0":
                raise ValueError("a cron schedule")
            ends = [names.index(v) + low if v in names else int(v) if v.isdigit() else -1 for v in match.group(1, 2) if v]
            if any(not low <= v <= high for v in ends) or (len(ends) == 2 and ends[0] > ends[1]):
                raise ValueError("a cron schedule")
    day, month = fields[2], fields[3]
    if month in ("2", "feb") and day in ("30", "31"):
        raise ValueError("a cron schedule")  # never fires: Dagster refuses it
    return text


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"one of {', '.join(choices)}")
        return text

    parse.expects = f"one of {', '.join(choices)}"  # type: ignore[attr-defined]
    return parse


_FLAGS = {"true": True, "false": False}


def _flag(text: str) -> bool:
    if text.lower() not in _FLAGS:
        raise ValueError("true or false")
    return _FLAGS[text.lower()]


def _history_tables(text: str) -> str:
    HistoryPolicy.parse(text)  # refuse a mix of all/none and names now, naming the setting
    return text


_history_tables.expects = "none, all, or comma-separated table names"  # type: ignore[attr-defined]


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def _alert_url(text: str) -> str:
    """An address alerts are POSTed to: https, or http only to this machine (a URL such as a Slack
    incoming webhook's is its own credential, so it never crosses a network in clear text)."""
    url = urlsplit(text)
    secure = url.scheme == "https" or (url.scheme == "http" and url.hostname in LOOPBACK_NAMES)
    if any(c.isspace() for c in text) or not url.hostname or not secure:
        raise ValueError("an https:// URL")
    return text


_alert_url.expects = "an https:// URL (http:// only to 127.0.0.1, localhost or ::1)"  # type: ignore[attr-defined]


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or any(c.isspace() for c in text) or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("host:port")
    return host.strip("[]"), int(port)


_host_port.expects = "host:port, e.g. smtp.example.com:587"  # type: ignore[attr-defined]


_EXPECTS = {
    _timestamp: "an RFC 3339 timestamp, e.g. 2026-01-31T12:00:00Z",
    _names: "comma-separated names",
    _cron: "a cron schedule, e.g. 17 * * * * (hourly at :17)",
    _flag: "true or false",
    str: "text",
}


@dataclass(frozen=True)
class Setting:
    env: str
    parse: Callable[[str], Any]
    default: str | None
    doc: str
    field: str | None = None  # the resource field it configures, if any
    secret: bool = False  # its value is a credential: never shown in an error, a log or a tag

    @property
    def expects(self) -> str:
        return getattr(self.parse, "expects", None) or _EXPECTS[self.parse]


SETTINGS = {
    s.env: s
    for s in [
        Setting("CS_PLATFORM_SPANNER_PROJECT", str, None, "Google Cloud project of the source database (required)", "project_id"),
        Setting("CS_PLATFORM_SPANNER_INSTANCE", str, None, "Spanner instance (required)", "instance_id"),
        Setting("CS_PLATFORM_SPANNER_DATABASE", str, None, "source database (required)", "database_id"),
        Setting("SPANNER_EMULATOR_HOST", str, None, "host:port of a Spanner emulator; unset for Cloud Spanner (ADC)", "emulator_host"),
        Setting("CS_PLATFORM_CHANGE_STREAMS", _names, "BankStream", "comma-separated change stream names"),
        Setting("CS_PLATFORM_METADATA_DATABASE", str, None, "database of the partition metadata tables (default: the source)", "metadata_database_id"),
        Setting("CS_PLATFORM_START_TIMESTAMP", _timestamp, None, "RFC 3339 start (default: the first sensor tick)", "start_timestamp"),
        Setting("CS_PLATFORM_END_TIMESTAMP", _timestamp, None, "RFC 3339 end (default: none, read forever)", "end_timestamp"),
        Setting("CS_PLATFORM_HEARTBEAT_MILLIS", Number(MIN_HEARTBEAT_MILLIS, MAX_HEARTBEAT_MILLIS, "milliseconds", whole=True), "2000", "heartbeat interval of the change stream query (Spanner's range)", "heartbeat_millis"),
        Setting("CS_PLATFORM_SOFT_TIMEOUT_SECONDS", Number(0, DAY, above_low=True), "3600", "how long one run reads (landing as it goes) before it ends and the sensor launches the next: about one run per live partition an hour (a run start costs seconds and Dagster storage; a deploy or a stop drains runs at once, docs/operations.md)", "soft_timeout_seconds"),
        Setting("CS_PLATFORM_LANDING_CHUNK_MODS", Number(1, 1_000_000, "mods", whole=True), str(DEFAULT_CHUNK_MODS), "a run lands a file and persists its watermark every this many mods: its memory holds one chunk, not its whole read", "landing_chunk_mods"),
        Setting("CS_PLATFORM_LANDING_INTERVAL_SECONDS", Number(0, 3600, above_low=True), f"{DEFAULT_CHUNK_INTERVAL.total_seconds():g}", "a run also lands what it read and persists its watermark at least this often while the watermark moves (heartbeats alone move it, every 2 s by default): the lake sees a run's reads while it runs, and the low watermark trails by about this much", "landing_interval_seconds"),
        Setting("CS_PLATFORM_MAX_PARALLEL_READS", Number(1, 1000, "runs", whole=True), "8", "reader runs in flight per stream", "max_parallel_reads"),
        Setting("CS_PLATFORM_YIELD_AFTER_SECONDS", Number(0, DAY), "10", "when partitions wait for a run slot, the sensor asks live runs to yield theirs: each lands, persists its watermark and ends once it has read this long, so reads rotate", "yield_after_seconds"),
        Setting("CS_PLATFORM_STALE_RUN_SECONDS", Number(0, DAY, above_low=True), "120", "a reader run that has not landed for this long (since its start or its last landing) is presumed dead, and its partition re-launched from its watermark; more than twice the landing interval. A lake run whose process has not marked it alive (every few seconds) for this long is presumed dead too, and a new one launched", "stale_run_seconds"),
        Setting("CS_PLATFORM_REPORT_INTERVAL_SECONDS", Number(0, 3600), "120", "a live run writes its progress to Dagster at most this often, one report covering all since the last: a reader run's landings as one observation and a log line, a lake run's cuts as one materialization and its checks (a run's first landing or cut, a check whose outcome changed and a table joining or leaving are reported at once; 0: every landing and cut). Keeps Dagster's storage growing with time, not with landings", "report_interval_seconds"),
        Setting("CS_PLATFORM_SENSOR_INTERVAL_SECONDS", Number(1, 3600, whole=True), "5", "seconds between partition sensor ticks: a new child partition, and a partition whose run ended or yielded its slot, waits up to this long for its run (a tick is one metadata query)"),
        Setting("CS_PLATFORM_READ_MODE", _choice("auto", "streaming", "polling"), "auto", "how a read follows the live end: streaming (one query per read, records as they commit: Cloud Spanner), polling (queries of windows already past: the emulator, which loses commits on its scan boundaries when it streams), or auto (polling on SPANNER_EMULATOR_HOST, else streaming)", "read_mode"),
        Setting("CS_PLATFORM_RPC_PRIORITY", _choice("LOW", "MEDIUM", "HIGH"), "HIGH", "priority of the change stream and metadata requests: LOW lets a busy database serve its own traffic first", "rpc_priority"),
        Setting("CS_PLATFORM_SPANNER_TIMEOUT_SECONDS", Number(0, 3600, above_low=True), "20", "deadline of one Spanner call (connect, metadata query)", "timeout_seconds"),
        Setting("CS_PLATFORM_LANDING_ROOT", str, ".demo/landing", "local directory or gs:// URI for landing files; required off the emulator (SPANNER_EMULATOR_HOST unset), with the lake root: the default is the emulator's", "root"),
        Setting("CS_PLATFORM_LAKE_ROOT", str, ".demo/lake", "local directory or gs:// URI for the Delta tables; required off the emulator, with the landing root"),
        Setting("STORAGE_EMULATOR_HOST", str, None, "http://host:port of a GCS emulator for gs:// roots; unset for Cloud Storage (ADC)"),
        Setting("CS_PLATFORM_SPARK_MASTER", str, "local[*]", "Spark master of the lake runs' driver: local[*], or a cluster (spark://host:port, make stack starts one)"),
        Setting("CS_PLATFORM_SPARK_REMOTE", str, None, "sc://host:port of a Spark Connect server with Delta (make dev starts one): lake runs start no JVM"),
        Setting("CS_PLATFORM_LAKE_INTERVAL_SECONDS", Number(10, 3600, whole=True), "10", "seconds between lake sensor ticks: a lake run is launched when none is in flight and the low watermark moved"),
        Setting("CS_PLATFORM_CUT_INTERVAL_SECONDS", Number(0, 3600, above_low=True), "3", "a lake run applies a cut at most this often, whenever the low watermark moved", "cut_interval_seconds"),
        Setting("CS_PLATFORM_LAKE_SOFT_TIMEOUT_SECONDS", Number(0, 7 * DAY), "1800", "how long one sensor-launched lake run keeps cutting with its Spark session before it ends and the lake sensor launches the next (a hand-over of about 45 s without cuts) (a materialization from the UI or a backfill takes one cut)", "lake_soft_timeout_seconds"),
        Setting("CS_PLATFORM_LAKE_KEPT_CUTS_SECONDS", Number(0, 366 * DAY), "86400", "consistent cuts this recent (before the latest cut) stay readable (mirrors_at_cut); maintenance drops older ones and the files and Delta log only they needed", "kept_cuts_seconds"),
        Setting("CS_PLATFORM_LAKE_MAINTENANCE_CRON", _cron, "17 * * * *", "when lake maintenance runs (compaction, purge of deletion vectors, VACUUM)"),
        Setting("CS_PLATFORM_LAKE_VACUUM_MARGIN_SECONDS", Number(0, 30 * DAY), "3600", "VACUUM spares files removed this long before the oldest kept cut, and any younger file: keep it above your longest cut (docs/lake.md, Maintenance)", "vacuum_margin_seconds"),
        Setting("CS_PLATFORM_CLEANUP_CRON", _cron, "43 * * * *", "when cleanup runs (finished partitions and their keys, old reader runs, ingested landing files)"),
        Setting("CS_PLATFORM_METADATA_RETENTION_SECONDS", Number(0, 366 * DAY), "86400", "cleanup removes FINISHED partitions (metadata rows and dynamic partition keys) finished longer ago than this", "metadata_retention_seconds"),
        Setting("CS_PLATFORM_RUN_RETENTION_SECONDS", Number(0, 366 * DAY), "259200", "cleanup deletes reader and lake runs (and their event logs) that ended longer ago than this", "run_retention_seconds"),
        Setting("CS_PLATFORM_LANDING_RETENTION_SECONDS", Number(0, 366 * DAY), "86400", "cleanup removes landing files the changelog ingested once their watermark is older than this", "landing_retention_seconds"),
        Setting("CS_PLATFORM_MAX_LAG_SECONDS", Number(120, 7 * DAY), "600", "the lake is late (freshness, lag check) beyond this; 120 at least: the mirrors' freshness policy warns at half of it, and Dagster's least freshness window is a minute", "max_lag_seconds"),
        Setting("CS_PLATFORM_ALERT_SLACK_WEBHOOK", _alert_url, None, "a Slack incoming webhook URL the alerts sensor posts to (none: no Slack alerts); a secret", secret=True),
        Setting("CS_PLATFORM_ALERT_WEBHOOK", _alert_url, None, "a URL the alerts sensor POSTs each alert to as JSON (kind, stream, title, text, link); a secret", secret=True),
        Setting("CS_PLATFORM_ALERT_EMAIL_TO", _names, None, "comma-separated e-mail addresses the alerts sensor mails (through CS_PLATFORM_ALERT_SMTP)"),
        Setting("CS_PLATFORM_ALERT_SMTP", _host_port, "127.0.0.1:25", "host:port of the SMTP server alert e-mails go through"),
        Setting("CS_PLATFORM_ALERT_SMTP_SECURITY", _choice("starttls", "smtps", "none"), "starttls", "how alert e-mails reach the SMTP server: STARTTLS on a plain port (587), TLS from the first byte (smtps, 465), or in clear text (none: only to 127.0.0.1, localhost or ::1)"),
        Setting("CS_PLATFORM_ALERT_SMTP_USER", str, None, "the login for CS_PLATFORM_ALERT_SMTP (none: no login)"),
        Setting("CS_PLATFORM_ALERT_SMTP_PASSWORD", str, None, "the password of CS_PLATFORM_ALERT_SMTP_USER; a secret", secret=True),
        Setting("CS_PLATFORM_ALERT_EMAIL_FROM", str, "cs-platform@localhost", "the From address of alert e-mails"),
        Setting("CS_PLATFORM_DAGSTER_URL", str, "http://127.0.0.1:3000", "the Dagster UI's address, for the links in alerts"),
        Setting("CS_PLATFORM_METRICS_REFRESH_SECONDS", Number(1, 3600), "15", "the metrics exporter reads a stream's state at most this often; scrapes in between are answered from what it read (the ages still move)"),
        Setting("CS_PLATFORM_METRICS_PORT", Number(1, 65535, "", whole=True), "9464", "port of the Prometheus exporter (cs-platform-metrics; make dev and make stack start it on loopback)"),
        Setting("CS_PLATFORM_RUN_BROKER", str, None, "the Redis URL of the warm run workers' broker, which dagster.yaml's ReaderRunLauncher and cs-platform-run-worker read (make dev and make stack start a private one); with a password: a secret", secret=True),
        Setting("CS_PLATFORM_EMULATOR_BIN", str, None, "path of emulator_main for make demo/dev/test (default: the Debian package's)"),
        Setting("CS_PLATFORM_HISTORY_TABLES", _history_tables, "none", "which watched tables also keep a history table (every version of every row, valid_from/valid_to): none, all, or a list", "history_tables"),
        Setting("CS_PLATFORM_UNTYPED_VALUES", _choice("fail", "quarantine"), "fail", "a value that cannot be typed stops the cut (fail) or sets its transaction aside (quarantine)"),
        Setting("CS_PLATFORM_APPEND_INSERTS", _flag, "true", "a cut appends to a mirror whose changes only insert rows instead of MERGEing them (~4x cheaper); set false for a stream that leaves deletes out (exclude_delete, exclude_ttl_deletes, allow_txn_exclusion): a key deleted unseen can then be inserted again", "append_inserts"),
    ]
}
ENV_OF_FIELD = {s.field: s.env for s in SETTINGS.values() if s.field}


def value(environ: Mapping[str, str], env: str) -> Any:
    """The parsed value of setting ``env`` (its default when unset or empty; None if it has none)."""
    setting = SETTINGS[env]
    text = environ.get(env) or setting.default
    if text is None:
        return None
    try:
        return setting.parse(text)
    except (ValueError, MalformedRecordError) as e:
        raise _invalid(env, "<its value, not shown: a secret>" if setting.secret else repr(text)) from None if setting.secret else e


def default(env: str) -> Any:
    """The parsed default of setting ``env``: what the resource field it configures defaults to, so
    that each default is written once, in the table above."""
    return value({}, env)


ROOTS = ("CS_PLATFORM_LANDING_ROOT", "CS_PLATFORM_LAKE_ROOT")


def check_all(environ: Mapping[str, str]) -> None:
    """Parse every setting set in ``environ``: a bad value fails here, naming its variable, even one
    only a command outside the definitions reads (``cs-platform-metrics``' port). Off the emulator
    the landing and lake roots must be set (``check_roots``)."""
    for env in SETTINGS:
        value(environ, env)
    check_roots(environ)


def check_roots(environ: Mapping[str, str]) -> None:
    """The roots' defaults (``.demo/...``, relative to the working directory) are for the emulator
    only. Against Cloud Spanner an unset landing root writes to whatever disk the process has (a
    pod's own, gone with the pod), the watermark moves once a file is there, and the lake never sees
    the file: a transaction missing whole, which no check can see. So once a Cloud Spanner database
    is named, both roots are named too or nothing loads; an environment that names no database yet
    loads (the UI of a deployment being set up, ``dagster definitions validate``), as the required
    settings' own ``EnvVar``s do, and its first tick names what is missing."""
    if environ.get("SPANNER_EMULATOR_HOST") or not environ.get("CS_PLATFORM_SPANNER_DATABASE"):
        return
    unset = [env for env in ROOTS if not environ.get(env)]
    if unset:
        raise SettingError(
            f"{' and '.join(unset)} {'is' if len(unset) == 1 else 'are'} not set, and SPANNER_EMULATOR_HOST is not set either: "
            f"reading Cloud Spanner, set both {' and '.join(ROOTS)} to durable storage (gs://<bucket>/landing and "
            "gs://<bucket>/lake, or a volume that outlives the process; docs/production.md). The .demo defaults are for the emulator"
        )


def _invalid(env: str, shown: str) -> SettingError:
    setting = SETTINGS[env]
    return SettingError(f"{env}={shown} is not valid: it takes {setting.expects} ({setting.doc})")


def check_numbers(resource: object) -> None:
    """Every numeric field of ``resource`` within its setting's range. A value set in Dagster's run
    config or in code, not in the environment, never went through the setting's parser; the error
    names the variable all the same, as the documentation lists the settings by it."""
    for field, env in ENV_OF_FIELD.items():
        number = SETTINGS[env].parse
        if isinstance(number, Number) and hasattr(resource, field):
            try:
                number.check(getattr(resource, field))
            except ValueError as e:
                raise _invalid(env, f"{getattr(resource, field):g}") from e


def required(environ: Mapping[str, str], env: str) -> Any:
    found = value(environ, env)
    if found is None:
        raise SettingError(f"{env} is not set: it is required ({SETTINGS[env].doc})")
    return found


def closest(name: str) -> str | None:
    """The known setting ``name`` most likely misspells (compared without the shared prefix)."""
    known = {env.removeprefix(PREFIX): env for env in SETTINGS}
    found = difflib.get_close_matches(name.removeprefix(PREFIX), list(known), n=1, cutoff=0.75)
    return known[found[0]] if found else None


def unknown(environ: Mapping[str, str]) -> dict[str, str | None]:
    """Unknown ``CS_PLATFORM_*`` variables, each with the closest known name (None if nothing is close)."""
    return {name: closest(name) for name in sorted(environ) if name.startswith(PREFIX) and name not in SETTINGS}


def warn_unknown(environ: Mapping[str, str]) -> dict[str, str | None]:
    found = unknown(environ)
    for name, near in found.items():
        hint = f"did you mean {near}?" if near else f"known settings: {', '.join(s for s in SETTINGS if s.startswith(PREFIX))}"
        log.warning("unknown setting %s is ignored: %s", name, hint)
    return found


def env_name(field: str) -> str:
    """The environment variable that sets a resource field (the field name if none does)."""
    return ENV_OF_FIELD.get(field, field)


# What the code below the settings calls its arguments (``CsPlatformError.fixed_by``) -> the setting
# that gives each.
SETTING_OF_ARGUMENT = {
    "stream": "CS_PLATFORM_CHANGE_STREAMS",
    "start": "CS_PLATFORM_START_TIMESTAMP",
    "end": "CS_PLATFORM_END_TIMESTAMP",
    "timeout": "CS_PLATFORM_SPANNER_TIMEOUT_SECONDS",
}


def start_over(stream: str) -> str:
    """The command that starts ``stream`` over, with where it is documented."""
    return f"python -m cs_platform.reset {stream}, see docs/settings.md, Start, end and reset"


def remedy(fixed_by: tuple[str, ...], stream: str) -> str:
    """The settings and the command that fix an error whose ``fixed_by`` is this."""
    named = [SETTING_OF_ARGUMENT[argument] for argument in fixed_by if argument in SETTING_OF_ARGUMENT]
    parts = [f"Settings: {', '.join(named)} (docs/settings.md)."] if named else []
    if "start_over" in fixed_by:
        parts.append(f"To start over: {start_over(stream)}.")
    return " ".join(parts)


@contextmanager
def naming_settings(stream: str) -> Iterator[None]:
    """Around code that runs on the settings of ``stream``: an error raised below it that a setting
    fixes gets that setting's name (and the command, if the stream must start over) added to its
    message; the same error, re-raised."""
    try:
        yield
    except CsPlatformError as e:
        if e.fixed_by and e.args and isinstance(e.args[0], str):
            e.args = (f"{e.args[0]} {remedy(e.fixed_by, stream)}", *e.args[1:])
            e.fixed_by = ()  # named once, however many layers wrap it
        raise
