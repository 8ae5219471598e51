"""Warm run workers: reader runs execute in long-lived processes that imported Dagster and the code
location once, not in a new interpreter per run.

- ``launcher`` the instance's run launcher: reader runs to the workers through a broker (Redis), with
               ``dagster-celery``'s launcher; every other run as Dagster's default launcher runs it
- ``worker``   ``cs-platform-run-worker``: the worker processes, forked warm from one parent
- ``connection_budget`` whether PostgreSQL admits the connections the worker processes will hold,
               asked as they start
- ``postgres_storage`` the instance's storage on PostgreSQL, holding its connections between statements

Why: Dagster's default launcher starts each run in a fresh ``spawn`` interpreter of the code server
(3-4 CPU-s a run), and on Kubernetes ``K8sRunLauncher`` makes each run a pod. A stream rotates tens
to hundreds of partitions through its run slots; docs/production.md ("Warm run workers") has the
figures and the deployment.
"""
