"""cs_platform: Cloud Spanner change streams -> Dagster -> transaction-consistent Delta Lake.

Packages, from the ground up (an arrow only points down; docs/design.md has the data flow):

- ``errors``       the project's error families (transient, terminal) and how a setting fixes one
- ``changestream`` the pure reader core: records, metadata table, reader (no Dagster, Spark, settings)
- ``storage``      files under a local directory or ``gs://``
- ``landing``      what runs read, made durable before a watermark moves
- ``lake``         PySpark + Delta: changelog, mirrors, history tables, consistent cuts
- ``stream``       one stream's steps as plain functions (a read, a sensor tick, a cut, a cleanup
                   pass): what the Dagster code wires, and ``make demo``, the tests and the
                   benchmarks call
- ``settings``     every ``CS_PLATFORM_*`` variable: parsed, checked, named in errors
- ``notify``, ``metrics`` alerts' destinations and the Prometheus exporter; ``reset`` starts a stream over
- ``defs``         the Dagster definitions, wiring ``stream``; ``definitions`` the code location
- ``dev``          the embedded default, the Cloud Spanner front (``dev.front``) and the other tools
                   of the demo, the tests and the benchmarks
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
