"""Landing: what runs read, made durable before a watermark moves (DESIGN invariant 2).

- ``rows``    a chunk of records as landing rows: one gzipped JSON line per mod, every field kept
- ``store``   landing files, ``<stream>/<partition key>/<query start>_<upto>_<rows>.json.gz``, written
              atomically and listed in order; the lake ingests them
- ``source``  which source database a landing root (or lake) belongs to, refused if another

Files live under a local directory or a ``gs://`` URI (``cs_platform.storage``).
"""
