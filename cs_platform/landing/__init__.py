"""Landing storage: each partition read becomes one immutable Parquet file, written atomically."""
