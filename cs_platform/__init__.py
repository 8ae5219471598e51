"""cs_platform: Cloud Spanner change streams -> Dagster -> transaction-consistent Delta Lake."""
