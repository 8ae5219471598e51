# make test / make demo set up everything they need on a fresh clone: a .venv with the pinned
# packages (PyPI), the system programs they run (the Spanner emulator, and for the tests Chromium,
# PostgreSQL and Redis: installed with apt-get when missing, or the exact commands are printed), and a
# private Spanner emulator process (started and stopped by the code itself).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo dev stack image bench setup clean

setup: $(STAMP)

# pip compiles every module to bytecode as it installs (about 20 s of the 42 s a set-up takes with
# pip's cache full). Not --no-compile: where PYTHONDONTWRITEBYTECODE is set (this machine and CI), no
# process would ever write a .pyc, and each would compile all it imports anew: two fresh clones'
# suites without it used ~190 CPU-s more in their run processes alone (docs/benchmarks.md, 2026-12-01).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

NEEDS := $(PY) -m cs_platform.dev.prerequisites

# --max-worker-restart=0: a worker that crashes is not replaced. pytest-xdist 3.8's loadgroup
# scheduler can hang for good after replacing one (pytest-dev/pytest-xdist#1323, #1327, #1378);
# without a replacement the other workers run what is left and the session fails at once.
# Three workers on two cores: a third of a test's time is waiting (on a window of writes, the
# emulator's churn, a sensor tick, a run presumed dead), which a third worker fills. Fresh clones
# on 2026-11-27, same machine and code: two workers 22:09 of pytest (2,467 CPU-s of the machine),
# three 19:06 (2,281); and three with three busy-looping processes beside them (load average
# 11-19, 32:02 of pytest) passed all 291 tests too (docs/tests.md, "Running them").
# Not four: a fourth fills the idle time three leave on a fast hour of the machine, and on a slow
# hour, with none to fill, costs more CPU and time (docs/benchmarks.md, "Four workers against three").
TEST_WORKERS ?= 3
# ruff first: a lint failure (pyproject.toml, [tool.ruff]) fails in a second or two, not after the suite.
test: setup
	$(PY) -m ruff check cs_platform cs_platform_tests bench
	$(NEEDS) emulator chromium postgresql redis
	$(PY) -m pytest cs_platform_tests -n $(TEST_WORKERS) --dist loadgroup --max-worker-restart=0 --durations=25

demo: setup
	$(NEEDS) emulator
	$(PY) -m cs_platform.dev.demo

dev: setup
	$(NEEDS) emulator redis
	$(PY) -m cs_platform.dev.serve

# The production shape on this machine: gs:// on a GCS emulator, a Spark standalone cluster,
# Dagster on PostgreSQL with dagster-daemon and dagster-webserver as separate processes.
stack: setup
	$(NEEDS) emulator postgresql redis
	$(PY) -m cs_platform.dev.stack

# The image of docs/production.md (deploy/image/Containerfile), built with buildah from Debian's
# packages and checked with no network. Not part of make test: a build takes minutes and root.
image:
	deploy/image/build

bench: setup
	$(NEEDS) emulator
	$(PY) bench/reader_throughput.py
	$(PY) bench/live_tail_latency.py
	$(PY) bench/orchestration_latency.py
	$(PY) bench/lake_apply.py
	$(PY) bench/lake_cost.py
	$(PY) bench/sensor_scale.py
	$(PY) bench/reader_memory.py
	$(PY) bench/snapshot_throughput.py
	$(PY) bench/add_column.py
	$(PY) bench/lake_storage.py
	$(PY) bench/freshness.py
	$(PY) bench/metrics_scrape.py

clean:
	rm -rf $(VENV) .demo .dev .stack .pytest_cache
