"""Dagster definitions: thin wiring of the reader core and landing storage. No SQL here."""
