"""cs_platform: Cloud Spanner change streams -> Dagster -> transaction-consistent Delta Lake.

Packages, from the ground up (an arrow only points down; docs/design.md has the data flow):

- ``errors``       the project's error families (transient, terminal) and how a setting fixes one
- ``changestream`` the pure reader core: records, metadata table, reader (no Dagster, Spark, settings)
- ``storage``      files under a local directory or ``gs://``
- ``landing``      what runs read, made durable before a watermark moves
- ``lake``         PySpark + Delta: changelog, mirrors, history tables, consistent cuts
- ``defs``         the Dagster definitions, wiring the plain modules below; ``definitions`` the code location
- ``dev``          the embedded default and the tools of the demo, the tests and the benchmarks

Plain modules the Dagster code wires, each also called by ``make demo``, the tests and the benchmarks:

- ``partition_read``      the body of one read: take, read chunks, land each, persist its watermark
- ``partition_detection`` one sensor tick: presumed-dead reads, retention, launches (``launches``)
- ``pipeline``            one stream's lake steps: ingest, cut, snapshot, rebuild, reset
- ``stream_state``        where a stream stands: its low watermark and its source's identity
- ``stream_source``       a stream's Spanner side, from plain values or the settings
- ``cleanup``             what a stream leaves behind, removed in a safe order
- ``reporting``           how often a live run writes its progress to Dagster
- ``settings``            every ``CS_PLATFORM_*`` variable: parsed, checked, named in errors
- ``notify``, ``metrics`` alerts' destinations and the Prometheus exporter; ``reset`` starts a stream over
"""


def __getattr__(name: str):
    """``cs_platform.code_location``: ``definitions.defs``, the code location, where Dagster's package
    loader looks for it (``dagster_cloud.yaml``: ``package_name: cs_platform``), built on first use
    only: a plain module of the package (a reader run's, the metrics exporter's, ``reset``) imports
    neither Dagster nor the settings through this package. Not ``defs``: that name is the Dagster
    subpackage's, which replaces any such attribute once it is imported."""
    if name == "code_location":
        from cs_platform.definitions import defs

        return defs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "code_location"])  # Dagster's package loader finds the code location by listing the package
