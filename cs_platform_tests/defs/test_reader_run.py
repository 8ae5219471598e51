"""A reader run loads nothing of PySpark or Delta: every run loads the whole code location, and a
reader run, the most frequent kind, must not pay a JVM client's imports and memory for the lake's
steps (``defs.resources.SparkResource``). Checked in a fresh process, as Dagster's run launcher
starts one, reading a real partition."""

import json
import subprocess
import sys
from datetime import timedelta

from cs_platform.changestream.metadata import utc_now
from cs_platform.definitions import build_definitions
from cs_platform.dev.sensor_loop import evaluate_sensor
from cs_platform_tests.defs.processes import JOB, SENSOR

RUN = """
import json, sys
from dagster import DagsterInstance
from cs_platform.definitions import build_definitions
job = build_definitions().resolve_job_def(sys.argv[1])
with DagsterInstance.get() as instance:
    result = job.execute_in_process(instance=instance, partition_key=sys.argv[2], raise_on_error=False)
loaded = sorted({name.split(".")[0] for name in sys.modules} & {"pyspark", "py4j", "delta", "dagster_pyspark", "dagster_spark"})
print(json.dumps({"success": result.success, "loaded": loaded}))
"""


def test_a_reader_run_loads_neither_pyspark_nor_delta(bank_stream, dagster_instance):
    bank_stream.configure(utc_now(), utc_now() + timedelta(minutes=5))
    definitions = build_definitions()
    [launch] = evaluate_sensor(definitions, dagster_instance, definitions.resolve_sensor_def(SENSOR), None).run_requests
    dagster_instance.add_dynamic_partitions("bank_stream_partitions", [launch.partition_key])
    done = subprocess.run([sys.executable, "-c", RUN, JOB, launch.partition_key], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["success"], done.stderr[-3000:]
    assert report["loaded"] == [], f"a reader run imported {report['loaded']}"
    assert bank_stream.store.get_by_key(launch.partition_key).state.value == "FINISHED"  # it did read its partition
