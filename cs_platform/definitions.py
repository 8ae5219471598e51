"""The code location loaded by ``dagster dev -w workspace.yaml``, ``[tool.dagster]`` and Dagster+.

Configuration comes from the environment (the table is ``cs_platform.settings.SETTINGS``, also in
docs/settings.md), so the same code reads the emulator or Cloud Spanner. The required settings are
``EnvVar``s, read when a run or tick needs them, so the UI loads even before they are set (a tick
then fails naming the missing variable). A value that does not parse fails the load, naming its
variable; an unknown ``CS_PLATFORM_*`` variable is warned about with the closest known name. Once a
Cloud Spanner database is named (no emulator), the load also fails until the landing and lake roots
are set (``settings.check_roots``).
"""

from __future__ import annotations

import os
from functools import cache
from typing import Mapping

from dagster import Definitions

from cs_platform import settings
from cs_platform.defs.alerts import alerts_sensor
from cs_platform.defs.change_stream import change_stream_definitions
from cs_platform.defs.names import ChangeStreamNames
from cs_platform.defs.resources import configured_resources
from cs_platform.lake.history_schema import HistoryPolicy


def build_definitions(environ: Mapping[str, str] = os.environ) -> Definitions:
    settings.warn_unknown(environ)
    settings.check_all(environ)
    resources = configured_resources(environ, lazy=True)
    per_stream = [
        change_stream_definitions(
            stream,
            resources[ChangeStreamNames(stream).resource_key],
            sensor_interval_seconds=settings.value(environ, "CS_PLATFORM_SENSOR_INTERVAL_SECONDS"),
            lake_interval_seconds=settings.value(environ, "CS_PLATFORM_LAKE_INTERVAL_SECONDS"),
            max_lag_seconds=settings.value(environ, "CS_PLATFORM_MAX_LAG_SECONDS"),
            maintenance_cron=settings.value(environ, "CS_PLATFORM_LAKE_MAINTENANCE_CRON"),
            cleanup_cron=settings.value(environ, "CS_PLATFORM_CLEANUP_CRON"),
            bounded=settings.value(environ, "CS_PLATFORM_END_TIMESTAMP") is not None,
            history=HistoryPolicy.parse(settings.value(environ, "CS_PLATFORM_HISTORY_TABLES")) != HistoryPolicy(),
        )
        for stream in settings.value(environ, "CS_PLATFORM_CHANGE_STREAMS")
    ]
    streams = [ChangeStreamNames(stream) for stream in settings.value(environ, "CS_PLATFORM_CHANGE_STREAMS")]
    return Definitions.merge(*per_stream, Definitions(resources=resources, sensors=[alerts_sensor(streams)]))


@cache
def _defs() -> Definitions:
    return build_definitions()


def __getattr__(name: str) -> Definitions:
    """``defs``, the code location, built from the environment on first use (PEP 562), not on
    import: a module that imports ``build_definitions`` (the tests, ``make demo``) builds its own
    from its own settings, and is not refused for settings it never uses (``settings.check_roots``)."""
    if name == "defs":
        return _defs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "defs"])  # Dagster's module loader finds the code location by listing the module
