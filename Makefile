# make test / make demo set up everything they need on a fresh clone: a .venv with the pinned
# packages (PyPI), the system programs they run (the Spanner emulator, and for the tests Chromium
# and PostgreSQL: installed with apt-get when missing, or the exact commands are printed), and a
# private Spanner emulator process (started and stopped by the code itself).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo dev stack bench setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

NEEDS := $(PY) -m cs_platform.dev.prerequisites

# --max-worker-restart=0: a worker that crashes is not replaced. pytest-xdist 3.8's loadgroup
# scheduler can hang for good after replacing one (pytest-dev/pytest-xdist#1323, #1327, #1378);
# without a replacement the other worker runs what is left and the session fails at once.
test: setup
	$(NEEDS) emulator chromium postgresql
	$(PY) -m pytest cs_platform_tests -n 2 --dist loadgroup --max-worker-restart=0 --durations=25

demo: setup
	$(NEEDS) emulator
	$(PY) -m cs_platform.dev.demo

dev: setup
	$(NEEDS) emulator
	$(PY) -m cs_platform.dev.serve

# The production shape on this machine: gs:// on a GCS emulator, a Spark standalone cluster,
# Dagster on PostgreSQL with dagster-daemon and dagster-webserver as separate processes.
stack: setup
	$(NEEDS) emulator postgresql
	$(PY) -m cs_platform.dev.stack

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
	$(PY) bench/lake_storage.py
	$(PY) bench/freshness.py

clean:
	rm -rf $(VENV) .demo .dev .stack .pytest_cache
