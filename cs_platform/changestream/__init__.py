"""Pure reader core for Cloud Spanner change streams (no Dagster, no Spark).

Modelled on Apache Beam's SpannerIO change-stream connector, one module per responsibility:

- ``records``   immutable change records (data, heartbeat, child partitions)
- ``values``    Spanner wire values -> Python values, by column type
- ``mapper``    wire rows (GoogleSQL STRUCT rows, PostgreSQL JSON rows) -> records
- ``query``     the change stream query statement, identifier and argument validation
- ``metadata``  the partition metadata table: states, children, watermarks
- ``reader``    read one partition until a deadline -> a batch with a safe watermark
- ``tail``      how a read follows the live end: one streaming query, or polled past windows
- ``errors``    named errors, transient (retry) vs terminal (stop)
- ``connection`` where the Spanner database is (emulator or Cloud Spanner)
"""
