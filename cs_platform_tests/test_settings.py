"""Settings from the environment: a value that does not parse names its variable and what it
takes; an unknown CS_PLATFORM_* variable is warned about with the closest known name."""

import logging
import re
from pathlib import Path

import pytest
from dagster import AssetKey, Definitions

from cs_platform import settings
from cs_platform.definitions import build_definitions
from cs_platform.defs.lake_assets import BLOCKING_CHECK, CHECKS

BASE = {
    "CS_PLATFORM_SPANNER_PROJECT": "p", "CS_PLATFORM_SPANNER_INSTANCE": "i", "CS_PLATFORM_SPANNER_DATABASE": "d",
    "CS_PLATFORM_LANDING_ROOT": "gs://b/landing", "CS_PLATFORM_LAKE_ROOT": "gs://b/lake",
}


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("CS_PLATFORM_HEARTBEAT_MILLIS", "2s", "CS_PLATFORM_HEARTBEAT_MILLIS='2s' is not valid: it takes a whole number"),
        ("CS_PLATFORM_SOFT_TIMEOUT_SECONDS", "a minute", "CS_PLATFORM_SOFT_TIMEOUT_SECONDS='a minute' is not valid: it takes a number of seconds"),
        ("CS_PLATFORM_START_TIMESTAMP", "yesterday", "CS_PLATFORM_START_TIMESTAMP='yesterday' is not valid: it takes an RFC 3339 timestamp"),
        ("CS_PLATFORM_UNTYPED_VALUES", "skip", "CS_PLATFORM_UNTYPED_VALUES='skip' is not valid: it takes one of fail, quarantine"),
        ("CS_PLATFORM_APPEND_INSERTS", "yes", "CS_PLATFORM_APPEND_INSERTS='yes' is not valid: it takes true or false"),
        ("CS_PLATFORM_LAKE_INTERVAL_SECONDS", "5", "CS_PLATFORM_LAKE_INTERVAL_SECONDS='5' is not valid: it takes a whole number of seconds from 10 to 3,600"),
        ("CS_PLATFORM_CUT_INTERVAL_SECONDS", "0", "CS_PLATFORM_CUT_INTERVAL_SECONDS='0' is not valid: it takes a number of seconds above 0 and at most 3,600"),
        ("CS_PLATFORM_MAX_LAG_SECONDS", "60", "CS_PLATFORM_MAX_LAG_SECONDS='60' is not valid: it takes a number of seconds from 120 .*: the mirrors' freshness policy warns at half of it"),
        ("CS_PLATFORM_CLEANUP_CRON", "hourly", r"CS_PLATFORM_CLEANUP_CRON='hourly' is not valid: it takes a cron schedule"),
        ("CS_PLATFORM_LAKE_MAINTENANCE_CRON", "60 * * * *", r"CS_PLATFORM_LAKE_MAINTENANCE_CRON='60 \* \* \* \*' is not valid: it takes a cron"),
        ("CS_PLATFORM_CLEANUP_CRON", "0 0 31 feb *", r"CS_PLATFORM_CLEANUP_CRON='0 0 31 feb \*' is not valid: it takes a cron"),
        ("CS_PLATFORM_CHANGE_STREAMS", "Bank Stream", r"change stream name \(CS_PLATFORM_CHANGE_STREAMS\) 'Bank Stream'"),
    ],
)
def test_a_value_that_does_not_parse_names_its_variable(name, value, words):
    with pytest.raises(ValueError, match=words):
        build_definitions({**BASE, name: value})


NUMBERS = {env: s.parse for env, s in settings.SETTINGS.items() if isinstance(s.parse, settings.Number)}


def outside(number: settings.Number) -> list[str]:
    """What the setting must refuse: NaN, the infinities, and the nearest values past each end."""
    step = 1 if number.whole else 0.001
    return ["nan", "NaN", "inf", "-inf", str(number.low if number.above_low else number.low - step), str(number.high + step)]


@pytest.mark.parametrize("name", sorted(NUMBERS))
def test_every_number_refuses_nan_infinities_and_values_out_of_its_range_by_name(name):
    number = NUMBERS[name]
    for text in outside(number):
        with pytest.raises(settings.SettingError, match=rf"^{name}={text!r} is not valid: it takes .* {number.range} \("):
            build_definitions({**BASE, name: text})
    edges = [number.high] + ([] if number.above_low else [number.low])
    for edge in edges:  # the ends themselves are taken
        build_definitions({**BASE, name: str(int(edge) if number.whole else edge)})


def test_a_number_set_in_dagster_config_is_held_to_the_same_range():
    """A resource configured in code or run config never went through the environment's parser."""
    from cs_platform.defs.resources import configured_resources

    resources = configured_resources(BASE)
    stream, lake, retention = resources["bank_stream_change_stream"], resources["lake"], resources["retention"]
    with pytest.raises(settings.SettingError, match=r"^CS_PLATFORM_SOFT_TIMEOUT_SECONDS=nan is not valid"):
        stream.model_copy(update={"soft_timeout_seconds": float("nan")}).validated()
    with pytest.raises(settings.SettingError, match=r"^CS_PLATFORM_HEARTBEAT_MILLIS=50 is not valid"):
        stream.model_copy(update={"heartbeat_millis": 50}).validated()
    with pytest.raises(settings.SettingError, match=r"^CS_PLATFORM_SPANNER_TIMEOUT_SECONDS=inf is not valid"):
        stream.spanner.model_copy(update={"timeout_seconds": float("inf")}).target()
    with pytest.raises(settings.SettingError, match=r"^CS_PLATFORM_CUT_INTERVAL_SECONDS=-inf is not valid"):
        lake.model_copy(update={"cut_interval_seconds": float("-inf")}).lake(None, "BankStream")
    with pytest.raises(settings.SettingError, match=r"^CS_PLATFORM_RUN_RETENTION_SECONDS=-1 is not valid"):
        retention.model_copy(update={"run_retention_seconds": -1}).validated()
    assert stream.validated() is stream and retention.validated() is retention  # the defaults are in range


def test_plain_python_resources_name_a_missing_required_variable():
    from cs_platform.defs.resources import configured_resources

    with pytest.raises(settings.SettingError, match="CS_PLATFORM_SPANNER_DATABASE is not set: it is required"):
        configured_resources({"CS_PLATFORM_SPANNER_PROJECT": "p", "CS_PLATFORM_SPANNER_INSTANCE": "i"})
    resource = configured_resources({**BASE, "CS_PLATFORM_HEARTBEAT_MILLIS": "750"})["bank_stream_change_stream"]
    assert resource.spanner.database_id == "d" and resource.heartbeat_millis == 750


def test_off_the_emulator_the_roots_must_be_named():
    """The .demo defaults on Cloud Spanner would land on a pod's own disk: the load is refused."""
    cloud = {k: v for k, v in BASE.items() if not k.endswith("_ROOT")}
    with pytest.raises(settings.SettingError, match="^CS_PLATFORM_LANDING_ROOT and CS_PLATFORM_LAKE_ROOT are not set, and SPANNER_EMULATOR_HOST"):
        build_definitions(cloud)
    with pytest.raises(settings.SettingError, match="^CS_PLATFORM_LAKE_ROOT is not set, and .* set both CS_PLATFORM_LANDING_ROOT and CS_PLATFORM_LAKE_ROOT"):
        build_definitions({**cloud, "CS_PLATFORM_LANDING_ROOT": "gs://b/landing"})
    build_definitions({**cloud, "SPANNER_EMULATOR_HOST": "127.0.0.1:9010"})  # the emulator: the .demo defaults serve
    build_definitions(BASE)
    build_definitions({})  # nothing named yet: the code location loads (dagster definitions validate)


def test_a_typo_is_warned_about_with_the_closest_known_name(caplog):
    with caplog.at_level(logging.WARNING, logger="cs_platform.settings"):
        build_definitions({**BASE, "CS_PLATFORM_SOFT_TIMEOUT_SECOND": "5", "CS_PLATFORM_NOTHING_LIKE_IT": "x"})
    assert "unknown setting CS_PLATFORM_SOFT_TIMEOUT_SECOND is ignored: did you mean CS_PLATFORM_SOFT_TIMEOUT_SECONDS?" in caplog.text
    assert "unknown setting CS_PLATFORM_NOTHING_LIKE_IT is ignored: known settings: CS_PLATFORM_SPANNER_PROJECT" in caplog.text
    assert settings.unknown(BASE) == {}


def test_the_definitions_load_as_a_code_location_would():
    """Each stream gets its whole set of definitions, named after it, configured by the settings;
    and two streams load side by side (what dagster dev does: names must not collide)."""
    defs = build_definitions({**BASE, "CS_PLATFORM_CHANGE_STREAMS": "BankStream,Orders", "CS_PLATFORM_LAKE_INTERVAL_SECONDS": "20"})
    Definitions.validate_loadable(defs)
    per_stream = {
        "sensors": {"{}_partition_sensor", "{}_lake_sensor"},
        "jobs": {"{}_read_partition", "{}_lake", "{}_lake_maintenance", "{}_mirror_rebuild", "{}_cleanup"},
        "schedules": {"{}_lake_maintenance_schedule", "{}_cleanup_schedule"},
        "assets": {"{}/landed_changes", "{}/changelog", "{}/mirrors", "{}/lake_maintenance", "{}/mirror_rebuild", "{}/cleanup"},
    }
    found = {
        "sensors": {x.name for x in defs.sensors},
        "jobs": {x.name for x in defs.jobs},
        "schedules": {x.name for x in defs.schedules},
        "assets": {key.to_user_string() for a in defs.assets for key in a.keys},
    }
    for kind, names in per_stream.items():
        expected = {name.format(slug) for name in names for slug in ("bank_stream", "orders")}
        assert expected <= found[kind], f"{kind} missing: {sorted(expected - found[kind])}"
    assert found["sensors"] == {name.format(slug) for name in per_stream["sensors"] for slug in ("bank_stream", "orders")} | {"alerts"}
    # The checks on each stream's mirrors, the blocking one blocking; the settings reach the sensors.
    checks = {(key.asset_key.to_user_string(), key.name) for a in defs.assets for key in a.check_keys}
    for slug in ("bank_stream", "orders"):
        assert {(f"{slug}/mirrors", name) for name in CHECKS} <= checks
        assert defs.get_sensor_def(f"{slug}_lake_sensor").minimum_interval_seconds == 20
        assert defs.get_sensor_def(f"{slug}_partition_sensor").minimum_interval_seconds == settings.default("CS_PLATFORM_SENSOR_INTERVAL_SECONDS")
    [cut] = [a for a in defs.assets if AssetKey(["orders", "mirrors"]) in a.keys]
    blocking = [spec.name for spec in cut.check_specs if spec.blocking]
    assert blocking == [BLOCKING_CHECK]


def test_the_settings_page_lists_every_setting_with_what_it_takes():
    page = (Path(__file__).resolve().parents[1] / "docs" / "settings.md").read_text()
    assert [s for s in settings.SETTINGS if f"`{s}`" not in page] == []
    rows = {line.split("|")[1].strip(" `"): line.split("|")[3].strip() for line in page.splitlines() if line.startswith("| `")}
    assert {env: rows.get(env) for env in settings.SETTINGS} == {env: s.expects for env, s in settings.SETTINGS.items()}


def test_append_inserts_reaches_the_lake_resource_as_a_flag():
    from cs_platform.defs.resources import configured_resources

    assert configured_resources(BASE)["lake"].append_inserts is True  # on by default
    assert configured_resources({**BASE, "CS_PLATFORM_APPEND_INSERTS": "False"})["lake"].append_inserts is False


def test_read_mode_reaches_the_reader_and_a_wrong_one_is_named():
    from cs_platform.changestream.tail import POLLING, STREAMING
    from cs_platform.defs.resources import configured_resources

    on_emulator = {**BASE, "SPANNER_EMULATOR_HOST": "127.0.0.1:9010"}
    assert configured_resources(on_emulator)["bank_stream_change_stream"].spanner.target().live_tail is POLLING
    streaming = configured_resources({**on_emulator, "CS_PLATFORM_READ_MODE": "streaming"})
    assert streaming["bank_stream_change_stream"].spanner.target().live_tail is STREAMING
    assert configured_resources(BASE)["bank_stream_change_stream"].spanner.target().live_tail is STREAMING  # Cloud Spanner
    with pytest.raises(settings.SettingError, match="CS_PLATFORM_READ_MODE='stream' is not valid: it takes one of auto, streaming, polling"):
        configured_resources({**BASE, "CS_PLATFORM_READ_MODE": "stream"})


def test_a_cron_dagster_refuses_is_named_by_its_setting():
    """The schedule is the last word on a cron (the settings' check is plain Python): its refusal
    too names the variable."""
    from dagster import AssetKey

    from cs_platform.defs.schedules import scheduled_job

    with pytest.raises(settings.SettingError, match=r"^CS_PLATFORM_CLEANUP_CRON='every hour' is not valid: Dagster refuses it"):
        scheduled_job("stream_cleanup", AssetKey("cleanup"), "every hour", "CS_PLATFORM_CLEANUP_CRON", "A pass")


# How a page quotes a setting's default: "`CS_PLATFORM_X` (600)", "(3,600 s)", "(a day)", "(3 days)",
# or "(`CS_PLATFORM_X`, 5)" (that form only whole: "`X`, 2 s by default" may be in another unit).
QUOTED_DEFAULT = re.compile(r"`(CS_PLATFORM_[A-Z_]+)`(?: \((a day|[\d,]+(?: days)?)[ ,)]|, (a day|[\d,]+(?: days)?)\))")


def quoted_value(text: str) -> float:
    if text == "a day":
        return settings.DAY
    if text.endswith(" days"):
        return float(text.removesuffix(" days")) * settings.DAY
    return float(text.replace(",", ""))


def test_every_page_quotes_a_setting_default_as_the_setting_has_it():
    root = Path(__file__).resolve().parents[1]
    quoted = [
        (page.name, name, value)
        for page in (root / "README.md", *sorted((root / "docs").glob("*.md")))
        for name, value, value_in_parentheses in QUOTED_DEFAULT.findall(page.read_text())
        for value in [value or value_in_parentheses]
    ]
    assert len(quoted) >= 10  # the pattern still finds how the pages quote defaults
    wrong = [(page, name, value, settings.SETTINGS[name].default) for page, name, value in quoted if quoted_value(value) != float(settings.SETTINGS[name].default)]
    assert wrong == []
