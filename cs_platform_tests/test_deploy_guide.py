"""docs/deploy.md is followed as a stranger would, on this machine's stand-ins: every block marked
``<!-- run by the tests: NAME -->`` runs as the page has it. ``gcloud spanner`` talks to the Spanner
emulator's REST gateway (``gateway_main``), ``gcloud storage`` to the GCS emulator, Dagster to a
private PostgreSQL; the project's commands are the installed ones. What the stand-ins need (an
endpoint, no credentials) comes from the environment, and a free port replaces the services' own.
The validation block runs after the alerts' settings too, so they are checked at load as well."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from dagster import DagsterInstance
from google.cloud import spanner

from cs_platform import settings
from cs_platform.dev.code_server import served_location
from cs_platform.dev.deadline import wait_until
from cs_platform.dev.emulator import find_emulator_binary, free_loopback_port
from cs_platform.dev.gcs_emulator import gcs_emulator
from cs_platform.dev.postgres import postgres_server
from cs_platform.dev.process_group import launch, start_server, stop_process_group
from cs_platform.dev.run_workers import BROKER_SETTING
from cs_platform.dev.workload import BANK_TABLES_DDL, create_database, create_instance

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "deploy.md"
SECRETS = {name for name, s in settings.SETTINGS.items() if s.secret}
BLOCK = re.compile(r"<!-- run by the tests: (?P<name>[^>]+?) -->\n```(?P<kind>\w+)\n(?P<text>.*?)```", re.DOTALL)


def blocks() -> dict[str, str]:
    """The page's runnable blocks by name, in the page's order."""
    return {m["name"]: m["text"] for m in BLOCK.finditer(GUIDE.read_text())}


def bash(script: str, env: dict[str, str], timeout_s: float = 600) -> str:
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout_s)
    assert done.returncode == 0, f"docs/deploy.md's commands failed ({done.returncode}):\n{script}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def exported(script: str, env: dict[str, str]) -> dict[str, str]:
    """The environment after ``script`` ran (its exports)."""
    out = bash(script + "\nenv -0", env)
    return dict(line.split("=", 1) for line in out.split("\0") if "=" in line)


@pytest.fixture
def spanner_gateway(tmp_path):
    """The Spanner emulator behind its REST gateway, which ``gcloud spanner`` speaks: gRPC and HTTP
    ports of its own, stopped with the emulator it starts (one process group)."""
    emulator = find_emulator_binary()
    grpc_port, http_port = free_loopback_port(), free_loopback_port()
    command = [str(emulator.parent / "gateway_main"), "--hostname", "127.0.0.1", "--grpc_port", str(grpc_port), "--http_port", str(http_port), "--grpc_binary", str(emulator)]
    gateway = start_server(command, http_port, tmp_path / "gateway.log", "the Spanner emulator's REST gateway")
    try:
        yield f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}/"
    finally:
        stop_process_group(gateway, grace_s=10)


@pytest.mark.heavy
def test_the_deploy_guide_runs_as_written_on_the_local_stand_ins(spanner_gateway, tmp_path, monkeypatch):
    grpc_host, rest_endpoint = spanner_gateway
    guide = blocks()
    assert list(guide) == ["names", "spanner", "bucket", "settings", "validate", "dagster.yaml", "services", "helm values", "alerts", "exporter"]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CS_PLATFORM_", "CLOUDSDK_", "DAGSTER_"))}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base['PATH']}"  # the installed commands
    names = exported(guide["names"], base)
    # The database the user already has: the page's names, on the emulator.
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", grpc_host)
    instance = create_instance(spanner.Client(project=names["PROJECT"]), names["INSTANCE"])
    create_database(instance, names["DATABASE"], BANK_TABLES_DDL)

    home = tmp_path / "dagster_home"
    home.mkdir()
    with gcs_emulator(tmp_path / "gcs", buckets=()) as gcs, postgres_server(tmp_path, "dagster") as postgres:
        server = urlsplit(postgres)
        env = {
            **base, **names,
            # gcloud against the stand-ins, without credentials
            "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1", "CLOUDSDK_AUTH_DISABLE_CREDENTIALS": "true",
            "CLOUDSDK_API_ENDPOINT_OVERRIDES_SPANNER": rest_endpoint, "CLOUDSDK_API_ENDPOINT_OVERRIDES_STORAGE": f"{gcs}/storage/v1/",
            # the project's clients against the same stand-ins
            "SPANNER_EMULATOR_HOST": grpc_host, "STORAGE_EMULATOR_HOST": gcs,
            "DAGSTER_HOME": str(home), "DAGSTER_PG_HOST": server.hostname, "DAGSTER_PG_PORT": str(server.port),
            "DAGSTER_PG_USER": server.username, "DAGSTER_PG_PASSWORD": "", "DAGSTER_PG_DB": server.path.lstrip("/"),
        }
        bash(guide["spanner"] + guide["bucket"], env)
        stream = names["STREAM"]
        source = instance.database(names["DATABASE"])
        with source.snapshot() as snapshot:
            options = dict(snapshot.execute_sql(
                "SELECT OPTION_NAME, OPTION_VALUE FROM INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS WHERE CHANGE_STREAM_NAME = @s",
                params={"s": stream}, param_types={"s": spanner.param_types.STRING},
            ))
        assert options["retention_period"] == "7d" and options["value_capture_type"] == "OLD_AND_NEW_VALUES", options
        # The emulator takes the option into the database's DDL but does not report it in
        # INFORMATION_SCHEMA.DATABASE_OPTIONS, where Cloud Spanner does (and the first tick reads it).
        source.reload()
        assert any("version_retention_period = '7d'" in statement for statement in source.ddl_statements), source.ddl_statements
        assert instance.database(names["METADATA_DATABASE"]).exists()
        assert f"gs://{names['BUCKET']}/" in bash('gcloud storage ls --project="$PROJECT"', env).split()

        # The settings of step 5 and the alerts' of step 8, loaded as Dagster loads the code location.
        env = exported(guide["settings"] + guide["alerts"], env)
        assert not SECRETS & set(env), "a secret in the ConfigMap's settings"
        bash(guide["validate"], env)

        (home / "dagster.yaml").write_text(guide["dagster.yaml"])
        for key in [k for k in env if k.startswith("DAGSTER_")]:
            monkeypatch.setenv(key, env[key])  # this process reads the instance too
        _services_start(guide["services"], env, tmp_path)

        # Step 8: the Secret holds exactly the secret settings but the broker's (a Secret of the
        # daemon, the webserver and the run workers, which the guide names), and the code location is the workspace's.
        [deployment] = yaml.safe_load(guide["helm values"])["dagster-user-deployments"]["deployments"]
        [secret] = [s["name"] for s in deployment["envSecrets"]]
        text = GUIDE.read_text()
        held = set(re.findall(r"CS_PLATFORM_[A-Z_]+", text[text.index(f"the Secret `{secret}` holds") :].split("\n\n")[0]))
        assert held == SECRETS - {BROKER_SETTING}
        assert f"`{BROKER_SETTING}` holds Redis's password: a Secret of its own" in text
        assert deployment["dagsterApiGrpcArgs"] == ["--module-name", served_location()[0]]

        # Step 9: the exporter serves the stream's metrics (no metadata table yet: scrape_error says so).
        port = free_loopback_port()
        [command] = guide["exporter"].strip().splitlines()
        exporter = start_server(re.sub(r"--port \d+", f"--port {port}", command).split(), port, tmp_path / "exporter.log", "cs-platform-metrics", env=env)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as response:
                body = response.read().decode()
        finally:
            stop_process_group(exporter, grace_s=10)
        assert f'cs_platform_scrape_error{{stream="{stream}"}}' in body, body[-2000:]


def _services_start(block: str, env: dict[str, str], tmp_path: Path) -> None:
    """Step 7's two services, as the page starts them (the webserver on a free port): the webserver
    answers on loopback and the daemon heartbeats into the page's PostgreSQL storage."""
    daemon_command, webserver_command = block.strip().splitlines()
    port = free_loopback_port()
    daemon = launch(daemon_command.split(), tmp_path / "daemon.log", env=env)
    try:
        webserver = start_server(re.sub(r"-p \d+", f"-p {port}", webserver_command).split(), port, tmp_path / "webserver.log", "dagster-webserver", timeout_s=300, env=env)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=60) as response:
                assert response.status == 200
            with DagsterInstance.get() as instance:
                wait_until(lambda: bool(instance.get_daemon_heartbeats()), 120, "the daemon's first heartbeat in PostgreSQL", poll_s=1)
        finally:
            stop_process_group(webserver, grace_s=10)
    finally:
        stop_process_group(daemon, grace_s=10)
