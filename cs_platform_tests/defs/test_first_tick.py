"""The partition sensor's first tick checks what every run will need, so a wrong setting fails the
tick within seconds, naming the setting and the fix, instead of hanging or failing in a run later."""

import time
from datetime import timedelta

import pytest

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.changestream.errors import SnapshotTooOldError, SpannerUnreachableError
from cs_platform.changestream.metadata import utc_now
from cs_platform.definitions import build_definitions
from cs_platform.dev.emulator import free_loopback_port
from cs_platform.dev.sensor_loop import SensorLoop


def first_tick(bank_stream, dagster_instance):
    bank_stream.configure(utc_now(), utc_now() + timedelta(minutes=5))
    with SensorLoop(build_definitions, dagster_instance, bank_stream.sensor) as loop:
        loop.tick()
        return loop


def test_a_dead_emulator_host_fails_within_30_seconds_naming_the_setting(bank_stream, dagster_instance, monkeypatch):
    dead = f"127.0.0.1:{free_loopback_port()}"  # nothing listens there
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", dead)
    began = time.monotonic()
    with pytest.raises(Exception, match=rf"nothing answers at SPANNER_EMULATOR_HOST='{dead}'"):
        first_tick(bank_stream, dagster_instance)
    with pytest.raises(SpannerUnreachableError, match="SPANNER_EMULATOR_HOST"):
        SpannerTarget("p", "i", "d", dead).connect()
    assert time.monotonic() - began < 30  # a hang is what this guards against, not speed


def test_a_stream_that_does_not_exist_fails_the_first_tick(bank_stream, dagster_instance, monkeypatch):
    monkeypatch.setenv("CS_PLATFORM_CHANGE_STREAMS", "NoSuchStream")
    bank_stream.stream = "NoSuchStream"
    with pytest.raises(Exception, match=r"change stream 'NoSuchStream' does not exist in database .*it has: BankStream.*Settings: CS_PLATFORM_CHANGE_STREAMS"):
        first_tick(bank_stream, dagster_instance)
    assert not bank_stream.store.table_exists()  # nothing was initialized for it


def test_a_start_and_end_that_changed_since_the_stream_began_name_their_settings_and_the_reset(bank_stream, dagster_instance):
    first_tick(bank_stream, dagster_instance)  # initializes the stream with this start and end
    with pytest.raises(
        Exception,
        match=r"another time range: start .* but metadata table BankStreamMetadata has .*; end .*\. Settings: "
        r"CS_PLATFORM_START_TIMESTAMP, CS_PLATFORM_END_TIMESTAMP \(docs/settings.md\)\. To start over: python -m cs_platform.reset BankStream",
    ):
        first_tick(bank_stream, dagster_instance)  # a later start and end, on the same table


def test_an_unwritable_landing_root_fails_the_first_tick(bank_stream, dagster_instance, monkeypatch, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("a landing root cannot live under a file")
    monkeypatch.setenv("CS_PLATFORM_LANDING_ROOT", str(blocker / "landing"))
    with pytest.raises(Exception, match=r"CS_PLATFORM_LANDING_ROOT=.*a_file/landing' is not writable"):
        first_tick(bank_stream, dagster_instance)


def test_a_start_older_than_the_sources_version_retention_fails_the_first_tick_naming_the_fix(bank_stream, dagster_instance):
    # The emulator, like Cloud Spanner by default, keeps versions for an hour: the snapshot at T0 could not be read.
    bank_stream.configure(utc_now() - timedelta(hours=2), utc_now() + timedelta(minutes=5))
    with pytest.raises(SnapshotTooOldError, match=r"keeps versions for only 3600 s.*ALTER DATABASE.*Settings: CS_PLATFORM_START_TIMESTAMP"):
        with SensorLoop(build_definitions, dagster_instance, bank_stream.sensor) as loop:
            loop.tick()
    assert not bank_stream.store.initialized()  # nothing was started
