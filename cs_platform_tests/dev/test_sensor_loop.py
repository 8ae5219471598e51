"""The sensor loop evaluates the sensor as the daemon does: a tick that fails with a transient error
is logged and evaluated again at the next tick, with its cursor kept; it does not end the loop."""

from datetime import timedelta

from grpc import StatusCode

from cs_platform.changestream import metadata
from cs_platform.changestream.metadata import INITIAL_PARTITION_TOKEN, utc_now
from cs_platform.definitions import build_definitions
from cs_platform.dev.front.server import Fault
from cs_platform.dev.sensor_loop import SensorLoop


def test_a_tick_whose_metadata_transaction_keeps_aborting_fails_alone_and_the_next_tick_initializes(bank_stream, dagster_instance, spanner_front, monkeypatch):
    bank_stream.configure(utc_now(), utc_now() + timedelta(minutes=5))
    retry_seconds = metadata.ABORTED_RETRY_SECONDS
    monkeypatch.setattr(metadata, "ABORTED_RETRY_SECONDS", 0)  # the first ABORTED is past the retry deadline
    # The initial partition's insert is aborted (by this fault, or before it by the emulator's own
    # partition churn, which takes the one transaction the emulator allows).
    spanner_front.inject(Fault(StatusCode.ABORTED, on="commit"))
    with SensorLoop(build_definitions, dagster_instance, bank_stream.sensor) as loop:
        assert loop.tick() is None
        assert loop.stats.failed_ticks == 1 and loop.cursor is None
        monkeypatch.setattr(metadata, "ABORTED_RETRY_SECONDS", retry_seconds)
        assert loop.tick() is not None
        assert loop.stats.failed_ticks == 1
    assert bank_stream.store.get(INITIAL_PARTITION_TOKEN) is not None
