"""Settings from the environment: a value that does not parse names its variable and what it
takes; an unknown CS_PLATFORM_* variable is warned about with the closest known name."""

import logging
from pathlib import Path

import pytest
from dagster import Definitions

from cs_platform import settings
from cs_platform.definitions import build_definitions

BASE = {"CS_PLATFORM_SPANNER_PROJECT": "p", "CS_PLATFORM_SPANNER_INSTANCE": "i", "CS_PLATFORM_SPANNER_DATABASE": "d"}


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("CS_PLATFORM_HEARTBEAT_MILLIS", "2s", "CS_PLATFORM_HEARTBEAT_MILLIS='2s' is not valid: it takes a whole number"),
        ("CS_PLATFORM_SOFT_TIMEOUT_SECONDS", "a minute", "CS_PLATFORM_SOFT_TIMEOUT_SECONDS='a minute' is not valid: it takes a number of seconds"),
        ("CS_PLATFORM_START_TIMESTAMP", "yesterday", "CS_PLATFORM_START_TIMESTAMP='yesterday' is not valid: it takes an RFC 3339 timestamp"),
        ("CS_PLATFORM_UNTYPED_VALUES", "skip", "CS_PLATFORM_UNTYPED_VALUES='skip' is not valid: it takes one of fail, quarantine"),
        ("CS_PLATFORM_APPEND_INSERTS", "yes", "CS_PLATFORM_APPEND_INSERTS='yes' is not valid: it takes true or false"),
        ("CS_PLATFORM_LAKE_INTERVAL_SECONDS", "5", "CS_PLATFORM_LAKE_INTERVAL_SECONDS=5 is below 10"),
        ("CS_PLATFORM_CUT_INTERVAL_SECONDS", "0", "CS_PLATFORM_CUT_INTERVAL_SECONDS='0' is not valid: it takes a number of seconds above 0"),
        ("CS_PLATFORM_MAX_LAG_SECONDS", "60", "CS_PLATFORM_MAX_LAG_SECONDS=60 is below 120: use 120 or more"),
        ("CS_PLATFORM_CHANGE_STREAMS", "Bank Stream", r"change stream name \(CS_PLATFORM_CHANGE_STREAMS\) 'Bank Stream'"),
    ],
)
def test_a_value_that_does_not_parse_names_its_variable(name, value, words):
    with pytest.raises(ValueError, match=words):
        build_definitions({**BASE, name: value})


def test_plain_python_resources_name_a_missing_required_variable():
    from cs_platform.defs.resources import configured_resources

    with pytest.raises(settings.SettingError, match="CS_PLATFORM_SPANNER_DATABASE is not set: it is required"):
        configured_resources({"CS_PLATFORM_SPANNER_PROJECT": "p", "CS_PLATFORM_SPANNER_INSTANCE": "i"})
    resource = configured_resources({**BASE, "CS_PLATFORM_HEARTBEAT_MILLIS": "750"})["bank_stream_change_stream"]
    assert resource.spanner.database_id == "d" and resource.heartbeat_millis == 750


def test_a_typo_is_warned_about_with_the_closest_known_name(caplog):
    with caplog.at_level(logging.WARNING, logger="cs_platform.settings"):
        build_definitions({**BASE, "CS_PLATFORM_SOFT_TIMEOUT_SECOND": "5", "CS_PLATFORM_NOTHING_LIKE_IT": "x"})
    assert "unknown setting CS_PLATFORM_SOFT_TIMEOUT_SECOND is ignored: did you mean CS_PLATFORM_SOFT_TIMEOUT_SECONDS?" in caplog.text
    assert "unknown setting CS_PLATFORM_NOTHING_LIKE_IT is ignored: known settings: CS_PLATFORM_SPANNER_PROJECT" in caplog.text
    assert settings.unknown(BASE) == {}


def test_the_definitions_load_as_a_code_location_would():
    defs = build_definitions(BASE)
    Definitions.validate_loadable(defs)  # what dagster dev does: names must not collide
    assert {s.name for s in defs.sensors} == {"bank_stream_partition_sensor", "bank_stream_lake_sensor"}


def test_the_settings_page_lists_every_setting():
    page = (Path(__file__).resolve().parents[1] / "docs" / "settings.md").read_text()
    assert [s for s in settings.SETTINGS if f"`{s}`" not in page] == []


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
