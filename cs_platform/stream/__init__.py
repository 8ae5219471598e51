"""One stream's steps as plain functions, the same wherever they run: a Dagster run or sensor
(``defs/`` wires them and adds nothing to the data's path), ``make demo``, the tests and the
benchmarks. No Dagster here.

- ``source``          a stream's Spanner side (source and metadata databases), from plain values or
                      the settings
- ``state``           where a stream stands, from its metadata table: its low watermark (the cut)
                      and its source's identity
- ``detection``       one sensor tick (Beam's DetectNewPartitions): presumed-dead reads, retention,
                      the launch plan (``launches``)
- ``partition_read``  the body of one read of one partition: take, read chunks, land each, persist
                      its watermark
- ``lake_steps``      one stream's lake steps: ingest, cut, snapshot, rebuild, reset
- ``cleanup``         what a stream leaves behind, removed in a safe order
- ``reporting``       how often a live run writes its progress to Dagster's storage
"""
