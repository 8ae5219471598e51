"""The embedded default and the tools of the demo, the tests and the benchmarks (nothing here runs
in production):

- ``make`` targets: ``demo``, ``serve`` (``make dev``), ``stack`` (the production shape)
- servers we start and stop by PID: ``emulator``, ``embedded``, ``gcs_emulator``, ``postgres``,
  ``spark_cluster``, ``spark_connect``, ``dagster_dev``, ``metrics_server``, ``process_group``,
  ``parent_guard``, ``prerequisites``
- the Cloud Spanner front over the emulator: ``spanner_front`` and the behaviours it imitates
  (``key_ranges``, ``mutable_key_range``, ``immutable_rows``, ``proto_columns``, ``partial_results``),
  ``chop_boundary_probe``
- drivers and oracles: ``workload`` (the bank), ``oracle``, ``sensor_loop`` (a daemon's loop, without
  one), ``local_runner``, ``cutter``, ``deadline``
"""
