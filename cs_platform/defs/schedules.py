"""One asset's own job, in-process, and the schedule that runs it (maintenance, cleanup)."""

from dagster import (
    AssetKey,
    DagsterInvalidDefinitionError,
    DefaultScheduleStatus,
    ScheduleDefinition,
    define_asset_job,
    in_process_executor,
)

from cs_platform.settings import SettingError


def scheduled_job(name: str, key: AssetKey, cron: str, setting: str, description: str, tags: dict | None = None) -> tuple:
    """A job materializing ``key`` alone (one step: no step subprocess) and its schedule on
    ``cron``, named ``<name>`` and ``<name>_schedule``; ``setting`` is the variable that sets it."""
    job = define_asset_job(name, selection=[key], executor_def=in_process_executor, tags=tags, description=f"{description}.")
    try:
        schedule = ScheduleDefinition(
            name=f"{name}_schedule",
            job=job,
            cron_schedule=cron,
            default_status=DefaultScheduleStatus.RUNNING,
            description=f"{description} ({setting}).",
        )
    except DagsterInvalidDefinitionError as e:  # what the settings' own check let through
        raise SettingError(f"{setting}={cron!r} is not valid: Dagster refuses it as a cron schedule ({e})") from e
    return job, schedule
