"""Shared fixtures: one real Spanner emulator per test session, fresh databases per test.

The emulator churns partitions every 3-6 s (``--override_change_stream_partition_token_alive_seconds=3``)
so tests cross real splits and merges quickly. If emulator_main is missing the session fails with
install instructions: nothing is skipped.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Callable

import pytest
from google.cloud import spanner
from google.cloud.spanner_v1.database import Database
from google.cloud.spanner_v1.instance import Instance

from cs_platform.changestream.connection import SpannerTarget
from cs_platform.dev.emulator import SpannerEmulator
from cs_platform.dev.workload import create_database, create_instance

PROJECT = "cs-platform-test"
INSTANCE = "test-instance"

_names = itertools.count(1)


@pytest.fixture(scope="session")
def emulator(tmp_path_factory) -> SpannerEmulator:
    log_path = Path(tmp_path_factory.mktemp("emulator")) / "emulator.log"
    emu = SpannerEmulator(partition_alive_seconds=3, log_path=log_path)
    emu.start()  # raises EmulatorNotInstalledError with install instructions if missing
    yield emu
    emu.stop()


@pytest.fixture(scope="session")
def spanner_client(emulator) -> spanner.Client:
    return SpannerTarget(PROJECT, INSTANCE, "unused", emulator.host).client()


@pytest.fixture(scope="session")
def instance(spanner_client) -> Instance:
    return create_instance(spanner_client, INSTANCE)


@pytest.fixture(scope="session")
def make_database(instance) -> Callable[..., Database]:
    """Create a fresh database (GoogleSQL or PostgreSQL) with the given DDL; unique name per call."""

    def make(ddl: list[str], postgres: bool = False) -> Database:
        return create_database(instance, f"db-{next(_names)}", ddl, postgres=postgres)

    return make


@pytest.fixture
def metadata_database(make_database) -> Database:
    """A separate GoogleSQL database for partition metadata, as production should use."""
    return make_database([])


@pytest.fixture(autouse=True)
def _quiet_grpc_logs():
    logging.getLogger("google").setLevel(logging.WARNING)
