"""What the sensor reads of the Dagster instance: how many reader runs its run queue starts at once."""

from dagster import DagsterInstance

from cs_platform.defs.runs import queued_runs_allowed
from cs_platform.defs.tags import READER_TAG
from cs_platform.dev.embedded import instance_yaml


def _instance(home, yaml: str) -> DagsterInstance:
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml)
    return DagsterInstance.from_config(str(home))


def test_the_run_queue_caps_reader_runs_at_its_tag_limit_or_its_total(tmp_path):
    """make dev's instance starts as many reader runs as CS_PLATFORM_MAX_PARALLEL_READS; a run queue
    whose reader limit (or total) is lower is what the sensor warns of when partitions wait."""
    with _instance(tmp_path / "a", instance_yaml(16)) as instance:
        assert queued_runs_allowed(instance, READER_TAG) == 16
    lower_total = "run_queue:\n  max_concurrent_runs: 5\n  tag_concurrency_limits:\n    - {key: cs_platform/reader, limit: 6}\n"
    with _instance(tmp_path / "b", lower_total) as instance:
        assert queued_runs_allowed(instance, READER_TAG) == 5
    with _instance(tmp_path / "c", "telemetry:\n  enabled: false\n") as instance:
        assert queued_runs_allowed(instance, READER_TAG) == 10  # Dagster's own run queue, unconfigured
