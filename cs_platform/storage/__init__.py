"""File storage under a root that is a local directory or a ``gs://`` URI, used by landing and the
lake alike: ``location`` (list, read, write atomically, delete; a ``Location`` per root) and
``gcs`` (Cloud Storage clients and credentials, or the GCS emulator at STORAGE_EMULATOR_HOST)."""
