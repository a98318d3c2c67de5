"""A Spark standalone cluster on this machine: a master and N workers, from PySpark's own launcher.

For trying scale-out (and testing it) without a real cluster: the sink's driver connects with
``--master spark://...`` exactly as it would to a cluster elsewhere, and its executors run in the
workers' own JVMs (and Python workers, for the base64 decimals of Connect's envelope), not in the driver.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path
from types import TracebackType

from sinklab.exceptions import ProcessError
from sinklab.stack.process import LOOPBACK, ManagedProcess, free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class StandaloneCluster:
    """``with StandaloneCluster(workdir, workers=2) as cluster: ... cluster.master_url``"""

    def __init__(self, workdir: Path, workers: int = 2, cores_per_worker: int = 1, worker_memory: str = "1536m"):
        self.workdir = Path(workdir)
        self.port = free_port()
        self.webui_port = free_port()
        self.cores_per_worker = cores_per_worker
        self.worker_memory = worker_memory
        logs = self.workdir / "logs"
        self.master = ManagedProcess("spark master", self._argv(MASTER_CLASS, "--port", str(self.port),
                                                                "--webui-port", str(self.webui_port)),
                                     logs / "spark-master.log", self._env())
        self.workers = [
            ManagedProcess(f"spark worker {i}", self._argv(
                WORKER_CLASS, self.master_url, "--cores", str(cores_per_worker), "--memory", worker_memory,
                "--webui-port", str(free_port()), "--work-dir", str(self.workdir / f"worker-{i}")),
                logs / f"spark-worker-{i}.log", self._env())
            for i in range(workers)
        ]

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def cores(self) -> int:
        return self.cores_per_worker * len(self.workers)

    def _argv(self, main_class: str, *args: str) -> list[str]:
        return [str(spark_home() / "bin" / "spark-class"), main_class, "--host", LOOPBACK, *args]

    def _env(self) -> dict[str, str]:
        return {
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": LOOPBACK,
            # Executors' Python workers run this interpreter, which has sinklab and its dependencies.
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "SPARK_LOG_DIR": str(self.workdir / "logs"),
        }

    def alive_workers(self) -> int:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.webui_port}/json/", timeout=2) as response:
            state = json.load(response)
        return int(state.get("aliveworkers", 0))

    def start(self, timeout: float = 60) -> StandaloneCluster:
        self.master.start()
        try:
            self.master.wait_ready(lambda: self.alive_workers() >= 0, timeout)
            for worker in self.workers:
                worker.start()
            self.master.wait_ready(lambda: self.alive_workers() == len(self.workers), timeout)
        except ProcessError:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for process in [*self.workers, self.master]:
            process.stop(timeout=15)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
