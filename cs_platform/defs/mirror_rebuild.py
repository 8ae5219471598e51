"""Mirror rebuilds in Dagster: an asset partitioned by table name, one partition per watched table.

Thin: materializing partition ``T`` is ``cs_platform.stream.lake_steps.rebuild_mirrors`` for ``T``: the
table read at the lake's latest cut replaces its mirror, and the manifest records the new version at
that cut. A backfill over several partitions rebuilds several tables; the lake sensor keeps the
partitions equal to the tables the stream watches, so a table added to the stream
(``ALTER CHANGE STREAM … SET FOR …``) appears here to be given its rows. The
``mirrors_match_source`` check names the tables that need it. Its job carries the lake runs'
concurrency tag: a rebuild never runs beside a cut, and it takes the lake's fence (``lake.fence``): a
lake run presumed dead writes nothing after it starts.
"""

from dagster import (
    AssetExecutionContext,
    Definitions,
    DynamicPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
    asset,
    define_asset_job,
    in_process_executor,
)

from cs_platform.defs.names import ChangeStreamNames
from cs_platform.defs.resources import ChangeStreamResource, LakeResource
from cs_platform.defs.tags import LAKE_TAG
from cs_platform.settings import naming_settings


def mirror_rebuild_definitions(names: ChangeStreamNames, tables: DynamicPartitionsDefinition) -> Definitions:
    """The rebuild asset of one stream's mirrors (partitioned by ``tables``) and its job."""
    slug, stream, resource_key = names.slug, names.stream, names.resource_key
    key = names.rebuilds

    @asset(
        key=key,
        partitions_def=tables,
        group_name=names.lake_group,
        kinds={"spanner", "spark", "delta"},
        required_resource_keys={"pyspark", "lake", resource_key},
        description=(
            f"Rebuilds the mirror of one table of {stream} (the partition) from the table read at the lake's "
            "latest cut, and records it in the manifest at that cut; the next cut carries on from there. "
            "Backfill the partitions the mirrors_match_source check names: a drifted mirror, or a table "
            "added to the stream after its start."
        ),
    )
    def mirror_rebuild(context: AssetExecutionContext) -> MaterializeResult:
        from cs_platform.stream.lake_steps import rebuild_mirrors  # the lake's modules load PySpark: only in this step

        change_stream: ChangeStreamResource = getattr(context.resources, resource_key).validated()
        lake_settings: LakeResource = context.resources.lake
        lake = lake_settings.lake(context.resources.pyspark.spark_session, stream, holder=f"mirror rebuild run {context.run_id}")
        with naming_settings(stream):
            result = rebuild_mirrors(lake, change_stream.spanner.target(), stream, [context.partition_key])
        context.log.info(f"rebuilt {context.partition_key} at cut {result.cut.isoformat()}: {result.rows[context.partition_key]} rows")
        return MaterializeResult(
            metadata={
                "cut": MetadataValue.timestamp(result.cut),
                "rows": result.rows[context.partition_key],
                "mirror_version": result.versions[context.partition_key],
                "read_partitions": result.partitions,
                "seconds": result.seconds,
            }
        )

    job = define_asset_job(
        f"{slug}_mirror_rebuild",
        selection=[key],
        partitions_def=tables,
        executor_def=in_process_executor,
        tags={LAKE_TAG: stream},
        description=f"Rebuild one mirror of {stream} from its table at the latest cut.",
    )
    return Definitions(assets=[mirror_rebuild], jobs=[job])
