"""The embedded default and the tools of the demo, the tests and the benchmarks (nothing here runs
in production):

- ``make`` targets: ``demo``, ``serve`` (``make dev``), ``stack`` (the production shape)
- servers we start and stop by PID: ``emulator``, ``embedded``, ``gcs_emulator``, ``postgres``,
  ``spark_cluster``, ``spark_connect``, ``dagster_dev``, ``metrics_server``, ``process_group``,
  ``parent_guard``, ``prerequisites``
- ``front``: the Cloud Spanner front over the emulator, a package whose docstring is its map;
  ``chop_boundary_probe``, the emulator's loss the front's streaming avoids
- drivers and oracles: ``workload`` (the bank), ``oracle``, ``sensor_loop`` (a daemon's loop, without
  one), ``local_runner``, ``cutter``, ``deadline``
"""
