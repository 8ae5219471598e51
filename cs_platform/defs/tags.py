"""The run tags the instance's run queue and run launcher act on, in a module that imports nothing:
the launcher (``workers.launcher``, loaded by the daemon and the webserver) reads them without
loading the definitions, and ``dagster.yaml``'s limits name the same strings."""

STREAM_TAG = "cs_platform/stream"
READER_TAG = "cs_platform/reader"  # every reader run carries it: cap them with a tag concurrency limit; the launcher sends them to the run workers
LAKE_TAG = "cs_platform/lake"  # every lake run carries it: one lake run per stream (tag concurrency limit)
