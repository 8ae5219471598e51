# make test / make demo set up everything they need on a fresh clone: a .venv with the pinned
# packages (PyPI) and a private Spanner emulator process (started and stopped by the code itself).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo dev stack bench setup check-emulator clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

check-emulator: setup
	@$(PY) -c "from cs_platform.dev.emulator import find_emulator_binary as f; print('emulator:', f())"

test: setup check-emulator
	$(PY) -m pytest cs_platform_tests --durations=25

demo: setup check-emulator
	$(PY) -m cs_platform.dev.demo

dev: setup check-emulator
	$(PY) -m cs_platform.dev.serve

# The production shape on this machine: gs:// on a GCS emulator, a Spark standalone cluster,
# Dagster on PostgreSQL with dagster-daemon and dagster-webserver as separate processes.
stack: setup check-emulator
	$(PY) -m cs_platform.dev.stack

bench: setup check-emulator
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
