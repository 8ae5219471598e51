"""The Kubernetes files under deploy/ agree with the code and with each other: the Helm values make
an instance (Dagster's own loader, from the dagster.yaml the chart renders of them) that sends
reader runs to the workers with the run queue's limits of the embedded instance; the workers'
Deployment fills the reader slots the queue allows; each Secret reaches only the processes that
use it; the image serves the code location the workspace names, as the user the pods run as.

The image itself is built and checked with no network by ``make image`` (deploy/image/build),
outside the suite: a build takes minutes and root (docs/benchmarks.md, "The image")."""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path

import yaml
from dagster import DagsterInstance
from dagster._config import process_config
from dagster_k8s import K8sRunLauncher

from cs_platform.defs.tags import READER_TAG
from cs_platform.dev.code_server import served_location
from cs_platform.dev.embedded import instance_yaml
from cs_platform.dev.run_workers import BROKER_SETTING
from cs_platform.workers.launcher import ReaderRunLauncher

ROOT = Path(__file__).resolve().parents[1]
VALUES = yaml.safe_load((ROOT / "deploy" / "helm" / "values.yaml").read_text())
[WORKERS] = [d for d in yaml.safe_load_all((ROOT / "deploy" / "k8s" / "run-workers.yaml").read_text()) if d]
CONTAINERFILE = (ROOT / "deploy" / "image" / "Containerfile").read_text()
[USER_DEPLOYMENT] = VALUES["dagster-user-deployments"]["deployments"]
[WORKER] = WORKERS["spec"]["template"]["spec"]["containers"]


def rendered_instance(values: dict) -> dict:
    """The run launcher, run coordinator and run monitoring parts of the dagster.yaml the chart
    renders from ``values`` (its templates/configmap-instance.yaml: customRunLauncher and
    queuedRunCoordinator as ConfigurableClass blocks, runMonitoring as run_monitoring)."""
    queued = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    monitoring = values["dagsterDaemon"]["runMonitoring"]
    return copy.deepcopy({
        "run_launcher": values["runLauncher"]["config"]["customRunLauncher"],
        "run_coordinator": {
            "module": "dagster.core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {
                "max_concurrent_runs": queued["maxConcurrentRuns"], "tag_concurrency_limits": queued["tagConcurrencyLimits"],
                "dequeue_interval_seconds": queued["dequeueIntervalSeconds"],
            },
        },
        "run_monitoring": {"enabled": monitoring["enabled"], "poll_interval_seconds": monitoring["pollIntervalSeconds"]},
    })


def limits(tag_concurrency_limits: list[dict]) -> dict[str, tuple]:
    return {limit["key"]: (limit.get("value"), limit["limit"]) for limit in tag_concurrency_limits}


def test_the_helm_values_make_an_instance_that_sends_reader_runs_to_the_workers_within_the_queues_limits(tmp_path, monkeypatch):
    monkeypatch.setenv(BROKER_SETTING, "redis://127.0.0.1:1/0")  # read at load, not reached
    rendered = rendered_instance(VALUES)
    # The other runs' launcher, K8sRunLauncher, reads the cluster's configuration as it is built:
    # here its config is checked as Dagster checks it at load, and Dagster's default stands in.
    others = rendered["run_launcher"]["config"].pop("others")
    assert (others["module"], others["class"]) == ("dagster_k8s", "K8sRunLauncher")
    checked = process_config(K8sRunLauncher.config_type(), others["config"])
    assert checked.success, checked.errors
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(rendered))
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert isinstance(instance.run_launcher, ReaderRunLauncher)
        assert instance.run_launcher.readers.broker == "redis://127.0.0.1:1/0"
        deployed = limits(instance.run_coordinator.get_run_queue_config().tag_concurrency_limits)
        dequeue_interval = instance.run_coordinator.dequeue_interval_seconds
    embedded_queue = yaml.safe_load(instance_yaml(8))["run_queue"]
    embedded = limits(embedded_queue["tag_concurrency_limits"])
    assert dequeue_interval == embedded_queue["dequeue_interval_seconds"]  # a freed slot taken as fast as in make dev
    assert deployed.keys() == embedded.keys()
    assert {k: v for k, v in deployed.items() if k != READER_TAG} == {k: v for k, v in embedded.items() if k != READER_TAG}
    # Every reader slot the queue allows has a worker process to run in, and no more.
    concurrency = int(WORKER["command"][WORKER["command"].index("--concurrency") + 1])
    assert deployed[READER_TAG][1] == WORKERS["spec"]["replicas"] * concurrency


def test_each_secret_reaches_only_the_processes_that_use_it():
    def secrets(part: dict) -> set[str]:
        return {s["name"] for s in part.get("envSecrets", [])}

    # The broker's URL (Redis's password): the daemon and the webserver load the launcher, the workers
    # take runs; the code location never reaches the broker. The alert URLs: the code location alone
    # (it evaluates the alerts sensor).
    assert secrets(VALUES["dagsterDaemon"]) == secrets(VALUES["dagsterWebserver"]) == {"cs-platform-broker"}
    assert {s["secretRef"]["name"] for s in WORKER["envFrom"] if "secretRef" in s} == {"cs-platform-broker"}
    assert secrets(USER_DEPLOYMENT) == {"cs-platform-alerts"}
    assert VALUES["runLauncher"]["config"]["customRunLauncher"]["config"]["broker"] == {"env": BROKER_SETTING}
    # One image for every process: the daemon and the webserver import the launcher from it.
    images = [VALUES[p]["image"] for p in ("dagsterWebserver", "dagsterDaemon")] + [USER_DEPLOYMENT["image"]]
    assert all((i["repository"], i["tag"]) == ("REGISTRY/cs-platform", "TAG") for i in images)
    assert WORKER["image"] == "REGISTRY/cs-platform:TAG"


def test_the_image_serves_the_workspaces_code_location_as_the_pods_user():
    module, _location = served_location()
    assert USER_DEPLOYMENT["dagsterApiGrpcArgs"] == ["--module-name", module]
    assert f'"--module-name", "{module}"' in CONTAINERFILE
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert WORKER["command"][0] in scripts
    assert re.search(r"^RUN cs-platform-fetch-jars$", CONTAINERFILE, re.MULTILINE) and "cs-platform-fetch-jars" in scripts
    # The workers read the release's dagster.yaml where the image's DAGSTER_HOME says.
    [home] = re.findall(r"DAGSTER_HOME=(\S+)", CONTAINERFILE)
    [mount] = WORKER["volumeMounts"]
    assert mount["mountPath"] == f"{home}/dagster.yaml"
    jobs = VALUES["runLauncher"]["config"]["customRunLauncher"]["config"]["others"]["config"]
    assert jobs["dagster_home"] == home
    [volume] = WORKERS["spec"]["template"]["spec"]["volumes"]
    assert volume["configMap"]["name"] == jobs["instance_config_map"]
    [user] = re.findall(r"^USER (\d+)$", CONTAINERFILE, re.MULTILINE)
    for pod in (WORKERS["spec"]["template"]["spec"], USER_DEPLOYMENT):
        context = pod.get("securityContext") or pod["podSecurityContext"]
        assert context["runAsNonRoot"] and str(context["runAsUser"]) == user
