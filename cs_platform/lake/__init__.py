"""PySpark + Delta Lake: changelog from landing files, complete transactions under a cut, mirrors,
and the consistency manifest. Imports neither Dagster nor the reader core."""
