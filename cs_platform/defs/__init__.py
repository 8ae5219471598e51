"""Dagster definitions: thin wiring of the plain modules into Dagster's types. No SQL here.

- ``change_stream``   one stream's definitions: partitions, the reader asset, its job and partition sensor
- ``reading``         a reader run: ``partition_read`` with Dagster's checks, reports and yield
- ``lake_assets``     changelog, mirrors, history and their checks; the lake job and sensor
- ``mirror_rebuild``, ``lake_maintenance``, ``cleanup``  their assets, jobs and schedules
- ``alerts``          the alerts sensor: failing lake runs, failing reads of a partition, failing checks
- ``resources``       the configurable resources, from the settings (``EnvVar``)
- ``runs``            run statuses, liveness marks, yield and drain on Dagster's run storage
- ``names``, ``tags``, ``schedules``  a stream's Dagster names; the run tags the run queue and launcher act on; one asset's job and schedule
"""
