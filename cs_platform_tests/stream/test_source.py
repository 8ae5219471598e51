"""A stream's Spanner side built from the settings, without Dagster, is the one the resource builds."""

import os

import pytest

from cs_platform.defs.resources import configured_resources
from cs_platform.settings import SettingError
from cs_platform.stream.source import StreamSource


def test_a_script_builds_the_stream_the_resource_builds_from_the_same_settings(bank_stream):
    source = StreamSource.from_settings(os.environ, "BankStream")
    resource = configured_resources(os.environ)["bank_stream_change_stream"]
    assert source.target == resource.spanner.target()
    assert (source.metadata_table, source.metadata_database) == (resource.metadata_table_name, bank_stream.metadata.database_id)
    source.require_stream()  # the database answers and has the stream
    assert source.metadata_store().table == resource.metadata_store().table == "BankStreamMetadata"
    assert source.source_database() is source.source_database()  # connected once


def test_a_missing_required_setting_and_a_bad_stream_name_are_named():
    with pytest.raises(SettingError, match=r"^CS_PLATFORM_SPANNER_PROJECT is not set"):
        StreamSource.from_settings({}, "BankStream")
    with pytest.raises(ValueError, match=r"change stream name \(CS_PLATFORM_CHANGE_STREAMS\) 'Bank`Stream'"):
        StreamSource.from_settings({}, "Bank`Stream")
