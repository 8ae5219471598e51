"""The lake assets of one change stream: changelog (bronze) and mirrors (+ manifest), with checks.

Thin: the Delta logic is in ``cs_platform.lake``; SQL against Spanner stays in the metadata store.
The mirrors asset reads the low watermark *before* ingesting landing files, then cuts at it: every
record at or below the cut is then in the changelog (DESIGN invariant 2), so a transaction is
applied whole or not at all (invariant 4).
"""

from datetime import datetime

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    ConfigurableResource,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
)

from pyspark.sql import functions as F

from cs_platform.changestream.metadata import PartitionMetadataStore, utc_now
from cs_platform.changestream.snapshot import SourceSnapshot
from cs_platform.changestream.query import validate_identifier
from cs_platform.defs.resources import ChangeStreamResource
from cs_platform.lake.cuts import IncompleteTransactionsError, Lake
from cs_platform.lake.mirrors import primary_key


class LakeResource(ConfigurableResource):
    """Where the Delta tables live: a local directory or gs:// URI; one sub-directory per stream."""

    root: str
    max_lag_seconds: float = 600.0  # the watermark_lag check warns beyond this

    def lake(self, spark, stream: str) -> Lake:
        return Lake(spark, f"{self.root.rstrip('/')}/{validate_identifier(stream, 'change stream name')}")


def stream_cut(store: PartitionMetadataStore) -> datetime | None:
    """The low watermark; once every partition is FINISHED, the highest watermark (the end).
    None before the sensor's first tick created the metadata table."""
    if not store.table_exists():
        return None
    low = store.low_watermark()
    return low if low is not None else max((p.watermark for p in store.all()), default=None)


def lake_assets(slug: str, stream: str, landed_changes: AssetKey, resource_key: str) -> list:
    changelog_key = AssetKey([slug, "changelog"])
    mirrors_key = AssetKey([slug, "mirrors"])

    @asset(
        key=changelog_key,
        deps=[landed_changes],
        group_name=f"{slug}_lake",
        required_resource_keys={"pyspark", "lake", "landing"},
        kinds={"spark", "delta"},
        description=f"Every mod of stream {stream}, one Delta row each, ingested from landing files exactly once.",
    )
    def changelog(context: AssetExecutionContext) -> MaterializeResult:
        lake = context.resources.lake.lake(context.resources.pyspark.spark_session, stream)
        new_files = lake.changelog.ingest(context.resources.landing.store().files(stream))
        return MaterializeResult(metadata={"new_files": new_files, "rows": lake.changelog.table().count()})

    @asset(
        key=mirrors_key,
        deps=[changelog_key],
        group_name=f"{slug}_lake",
        required_resource_keys={"pyspark", "lake", "landing", resource_key},
        kinds={"spark", "delta"},
        check_specs=[
            AssetCheckSpec("complete_transactions_below_low_watermark", asset=mirrors_key),
            AssetCheckSpec("watermark_lag", asset=mirrors_key),
            AssetCheckSpec("mirrors_match_source", asset=mirrors_key),
        ],
        description=(
            f"One Delta table per source table of {stream}, brought to the low watermark by complete "
            "transactions only; the manifest records each cut's table versions."
        ),
    )
    def mirrors(context: AssetExecutionContext):
        change_stream: ChangeStreamResource = getattr(context.resources, resource_key).validated()
        lake = context.resources.lake.lake(context.resources.pyspark.spark_session, stream)
        cut = stream_cut(change_stream.metadata_store())  # first the watermark, then the files
        if cut is None:
            raise Failure(description=f"stream {stream} has no partitions yet: turn on its partition sensor first")
        lake.changelog.ingest(context.resources.landing.store().files(stream))
        lag = (utc_now() - cut).total_seconds()
        yield AssetCheckResult(
            check_name="watermark_lag",
            passed=lag <= context.resources.lake.max_lag_seconds,
            severity=AssetCheckSeverity.WARN,
            metadata={"lag_seconds": round(lag, 3), "low_watermark": MetadataValue.timestamp(cut)},
        )
        try:
            result = lake.apply_cut(cut)  # checks completeness itself: the check reports its finding
        except IncompleteTransactionsError as e:
            yield complete_transactions_check(e.missing)
            raise Failure(description=str(e), allow_retries=False) from e
        yield complete_transactions_check([])
        context.log.info(
            f"cut {cut.isoformat()}: {'applied' if result.applied else 'already applied'}, "
            f"{result.transactions} transactions, {result.mods} mods, versions {result.versions}"
        )
        yield mirrors_match_source(lake, SourceSnapshot(change_stream.source_database(), cut), cut)
        yield MaterializeResult(
            metadata={
                "cut": MetadataValue.timestamp(cut),
                "applied": result.applied,
                "previous_cut": MetadataValue.timestamp(result.previous) if result.previous else "none",
                "transactions": result.transactions,
                "mods": result.mods,
                "mirror_versions": result.versions,
                "lag_seconds": round(lag, 3),
            }
        )

    return [changelog, mirrors]


def complete_transactions_check(missing: list[tuple[str, int, int]]) -> AssetCheckResult:
    return AssetCheckResult(
        check_name="complete_transactions_below_low_watermark",
        passed=not missing,
        metadata={"incomplete": len(missing), "sample": str(missing[:5])},
    )


SAMPLE_KEYS = 100


def mirrors_match_source(lake: Lake, source: SourceSnapshot, cut: datetime) -> AssetCheckResult:
    """At the cut, each mirror has the source's row count, and a random sample of its primary keys
    exists in the source read at the cut timestamp (values are compared by the tests, not here)."""
    problems, checked = [], {}
    for table, mirror in lake.mirrors_at_cut(cut).items():
        keys = primary_key(lake.spark, lake.mirror_path(table))
        sample = [tuple(r) for r in mirror.select(*keys).orderBy(F.rand(seed=7)).limit(SAMPLE_KEYS).collect()]
        rows, expected = mirror.count(), source.row_count(table)
        missing = len(sample) - len(source.existing_keys(table, keys, sample))
        checked[table] = {"mirror_rows": rows, "source_rows": expected, "sampled_keys": len(sample), "missing": missing}
        if rows != expected or missing:
            problems.append(table)
    return AssetCheckResult(
        check_name="mirrors_match_source",
        passed=not problems,
        metadata={"tables": checked, "mismatched": ", ".join(problems) or "none"},
    )
