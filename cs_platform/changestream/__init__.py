"""Pure reader core for Cloud Spanner change streams (no Dagster, no Spark, no settings).

Modelled on Apache Beam's SpannerIO change-stream connector, one module per responsibility (the
body of a read, which lands, is ``cs_platform.stream.partition_read``):

- ``records``        immutable change records (data, heartbeat, child partitions, partition events)
- ``values``         Spanner wire values -> Python values, by column type
- ``mapper``         wire rows (GoogleSQL STRUCT rows, PostgreSQL JSON rows) -> records
- ``proto_mapper``   wire rows of MUTABLE_KEY_RANGE streams (``ChangeStreamRecord`` protos) -> records
- ``query``          the change stream query statement, identifier and argument validation
- ``metadata``       the partition metadata table: states, children, watermarks, fencing
- ``reader``         read one partition until a deadline -> chunks with a safe watermark each
- ``tail``           how a read follows the live end: one streaming query, or polled past windows
- ``connection``     where the Spanner database is (emulator or Cloud Spanner)
- ``catalog``        what INFORMATION_SCHEMA says of change streams and their watched tables
- ``retention``      whether unread records are about to expire (the retention watchdog)
- ``table_snapshot`` the watched tables read at one timestamp, in partitions (the lake's start)
- ``source_reads``   the source tables read at a timestamp, to check the lake against them
- ``errors``         the reader's named errors, in the project's two families (``cs_platform.errors``)
"""
