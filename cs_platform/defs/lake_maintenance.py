"""Lake maintenance in Dagster: one asset per stream, materialized by its own schedule.

Thin: a pass is ``cs_platform.lake.maintenance.maintain``. Its job carries the lake runs'
concurrency tag, so with the run queue's limit (docs/dagster.md, Concurrency) a pass never runs beside a cut,
and it takes the lake's fence (``lake.fence``): a lake run presumed dead writes nothing after it starts.
The lake's modules load PySpark, so they are imported by the step, not by the code location.
"""

from typing import TYPE_CHECKING

from dagster import (
    AssetExecutionContext,
    AssetKey,
    Definitions,
    MaterializeResult,
    MetadataValue,
    asset,
)

from cs_platform.defs.names import ChangeStreamNames
from cs_platform.defs.resources import LakeResource
from cs_platform.defs.schedules import scheduled_job
from cs_platform.defs.tags import LAKE_TAG

if TYPE_CHECKING:
    from cs_platform.lake.maintenance import MaintenanceResult


def lake_maintenance_definitions(names: ChangeStreamNames, cron: str) -> Definitions:
    """The maintenance asset of one stream's lake, its job and its schedule."""
    slug, stream, mirrors_key = names.slug, names.stream, AssetKey([names.slug, "mirrors"])
    key = AssetKey([slug, "lake_maintenance"])

    @asset(
        key=key,
        deps=[mirrors_key],
        group_name=names.lake_group,
        kinds={"spark", "delta"},
        required_resource_keys={"pyspark", "lake"},
        description=(
            f"Keeps the lake of {stream} small: drops cuts older than CS_PLATFORM_LAKE_KEPT_CUTS_SECONDS (before the latest cut) from the manifest, "
            "purges the mirrors' deletion vectors, compacts (and clusters) every table, and VACUUMs files no "
            "kept cut needs. Every kept cut stays readable with Lake.mirrors_at_cut."
        ),
    )
    def lake_maintenance(context: AssetExecutionContext) -> MaterializeResult:
        from cs_platform.lake.maintenance import maintain

        lake_settings: LakeResource = context.resources.lake
        lake = lake_settings.lake(context.resources.pyspark.spark_session, stream, holder=f"maintenance run {context.run_id}")
        result = maintain(lake, lake_settings.kept_cuts_seconds, lake_settings.vacuum_margin_seconds)
        context.log.info(
            f"kept {result.kept_cuts} cuts (dropped {result.cuts_dropped}); files {result.files_before} -> {result.files_after}"
        )
        return MaterializeResult(metadata=maintenance_metadata(result))

    what = f"One maintenance pass over the lake of {stream} (compaction, purge, VACUUM)"
    job, schedule = scheduled_job(f"{slug}_lake_maintenance", key, cron, "CS_PLATFORM_LAKE_MAINTENANCE_CRON", what, {LAKE_TAG: stream})
    return Definitions(assets=[lake_maintenance], jobs=[job], schedules=[schedule])


def maintenance_metadata(result: "MaintenanceResult") -> dict:
    rows = "\n".join(
        f"| {t.name} | {t.files_before} → {t.files_after} | {t.bytes_before:,} → {t.bytes_after:,} | {t.retention_hours} | "
        f"{'' if t.pinned_version is None else t.pinned_version} |"
        for t in result.tables
    )
    return {
        "kept_cuts": result.kept_cuts,
        "oldest_kept_cut": MetadataValue.timestamp(result.oldest_kept_cut) if result.oldest_kept_cut else "none",
        "cuts_dropped": result.cuts_dropped,
        "files_before": result.files_before,
        "files_after": result.files_after,
        "tables": MetadataValue.md(
            "| table | files | bytes | retention (h) | oldest kept version |\n|---|---|---|---|---|\n" + rows
        ),
    }
