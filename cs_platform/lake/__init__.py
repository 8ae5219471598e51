"""PySpark + Delta Lake: one stream's lake (``stream_lake.Lake``, under ``layout.stream_root``):
the changelog from landing files (``changelog``), complete transactions under a cut, the mirrors
(``mirrors``), history tables (``history``) and the manifest of consistent cuts; the snapshot at a
stream's start (``snapshot``), the checks' computations (``verify``), maintenance, and readers on
other engines (``published``, ``delta_log``, ``engines``, ``cli`` need no Spark; ``layout`` needs
nothing).

Imports no Dagster. From the reader core it imports only what reading the source needs: the
snapshot at a stream's start (``snapshot``: ``changestream.catalog.WatchedTable``,
``changestream.connection.SpannerTarget``, ``changestream.table_snapshot``) and the check of the
mirrors against the source (``verify``: ``changestream.catalog.watched_table_names``,
``changestream.source_reads``); from landing its rows, store and source; files through
``cs_platform.storage``.
"""
