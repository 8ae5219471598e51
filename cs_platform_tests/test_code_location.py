"""The code location loads where users deploy it: as ``dagster_cloud.yaml`` names it (a package),
with Dagster's own loader, and as ``workspace.yaml`` names it; importing the package's plain modules
still loads no Dagster."""

import os
import subprocess
import sys
from pathlib import Path

import yaml
from dagster import Definitions
from dagster._core.workspace.autodiscovery import loadable_targets_from_python_module, loadable_targets_from_python_package

from cs_platform.dev.code_server import served_location

ROOT = Path(__file__).resolve().parents[1]


def test_the_code_location_loads_as_dagster_cloud_yaml_and_workspace_yaml_name_it(tmp_path, monkeypatch):
    # As a deployment on Cloud Spanner sets it: no emulator, both roots named (settings.check_roots).
    monkeypatch.delenv("SPANNER_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("CS_PLATFORM_LANDING_ROOT", str(tmp_path / "landing"))
    monkeypatch.setenv("CS_PLATFORM_LAKE_ROOT", str(tmp_path / "lake"))
    [location] = yaml.safe_load((ROOT / "dagster_cloud.yaml").read_text())["locations"]
    [target] = loadable_targets_from_python_package(location["code_source"]["package_name"], str(ROOT))
    assert isinstance(target.target_definition, Definitions)
    assert target.target_definition.resolve_job_def("bank_stream_lake") is not None
    module, _location = served_location()
    [from_workspace] = loadable_targets_from_python_module(module, str(ROOT))
    assert from_workspace.target_definition is target.target_definition  # one Definitions, however it is named


def test_dagster_validates_the_code_location_as_dagster_cloud_yaml_names_it_before_anything_is_set():
    """The command a Dagster+ deployment runs first, in an environment that names no database yet."""
    [location] = yaml.safe_load((ROOT / "dagster_cloud.yaml").read_text())["locations"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CS_PLATFORM_") and k != "SPANNER_EMULATOR_HOST"}
    done = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "--package-name", location["code_source"]["package_name"]],
        capture_output=True, text=True, cwd=ROOT, env=clean, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_plain_module_of_the_package_loads_no_dagster():
    code = "import sys, cs_platform.changestream.metadata, cs_platform.stream.partition_read; print('dagster' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip() == "False"
