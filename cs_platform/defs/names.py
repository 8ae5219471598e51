"""Every Dagster name derived from one stream's name, in one place: the definitions, the alerts
that watch their runs and the benches cannot disagree on a job's or a sensor's name."""

from __future__ import annotations

from dataclasses import dataclass

from dagster import AssetKey

from cs_platform.defs.resources import change_stream_resource_key, stream_slug


@dataclass(frozen=True)
class ChangeStreamNames:
    """Every Dagster name derived from one stream name."""

    stream: str

    @property
    def slug(self) -> str:
        return stream_slug(self.stream)

    @property
    def resource_key(self) -> str:
        return change_stream_resource_key(self.stream)

    @property
    def partitions(self) -> str:
        return f"{self.slug}_partitions"

    @property
    def asset_key(self) -> AssetKey:
        return AssetKey([self.slug, "landed_changes"])

    @property
    def job(self) -> str:
        return f"{self.slug}_read_partition"

    @property
    def sensor(self) -> str:
        return f"{self.slug}_partition_sensor"

    @property
    def lake_job(self) -> str:
        return f"{self.slug}_lake"

    @property
    def lake_group(self) -> str:
        return f"{self.slug}_lake"

    @property
    def rebuilds(self) -> AssetKey:
        """The asset that rebuilds one mirror (a partition per watched table)."""
        return AssetKey([self.slug, "mirror_rebuild"])

    @property
    def tables(self) -> str:
        """The dynamic partitions of the mirror rebuilds: one per watched table."""
        return f"{self.slug}_tables"
