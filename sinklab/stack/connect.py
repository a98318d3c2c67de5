"""The embedded stack's Kafka Connect REST server (``sinklab/connect/``), as a managed process.

It is its own process, not a thread of the user's kernel: it runs the sinks on its own Spark driver,
which starts with the first connector (a stack without connectors pays for no second JVM), and it
outlives a notebook's kernel under ``sinklab stack up``. It reaches the stack through a copy of the
stack's description in ``<workdir>/connect/stack.json`` and keeps the connectors' configs and
target states beside it, so that a server started again on the same workdir resumes them.

With a Spark Connect port its driver starts at once and serves Spark Connect too: notebooks query the
stack's tables as its clients, in seconds, and start sinks through the REST API, where they run on
that one warm driver.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import requests

from sinklab.stack.process import LOOPBACK, ManagedProcess, free_port, stop_leader_first

if TYPE_CHECKING:
    from sinklab.stack.info import StackInfo

CONNECT_DIR = "connect"
# Long enough for the running sinks to finish their cycle and Spark to stop; the sink's protocol
# makes a kill mid-cycle safe, so the escalation after it loses nothing.
STOP_GRACE_S = 30


class EmbeddedConnect:
    def __init__(self, workdir: Path, port: int | None = None, spark_connect_port: int | None = None):
        self.state_dir = workdir / CONNECT_DIR
        self.port = port or free_port()
        self.spark_connect_port = spark_connect_port
        self.stack_file = self.state_dir / "stack.json"
        argv = [sys.executable, "-m", "sinklab.connect", "--stack", str(self.stack_file), "--port", str(self.port),
                "--state-dir", str(self.state_dir)]
        if spark_connect_port is not None:
            argv += ["--spark-connect-port", str(spark_connect_port)]
        self.process = ManagedProcess("Kafka Connect REST server (sinklab.connect)", argv,
                                      workdir / "logs" / "connect.log")
        self.auth: tuple[str, str] | None = None  # the stack's login to it (StackInfo.connect_auth)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def spark_connect_url(self) -> str | None:
        from sinklab.stack.spark import spark_connect_url

        return spark_connect_url(self.spark_connect_port) if self.spark_connect_port is not None else None

    def ready(self) -> bool:
        # The worker answers only once its driver serves Spark Connect, when it does.
        return requests.get(f"{self.url}/", timeout=2, auth=self.auth).status_code == 200

    def start(self, info: StackInfo, timeout: float = 120) -> None:
        from sinklab.stack.tls import write_private

        self.auth = info.connect_auth()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # Private: an external or S3 stack's description carries credentials.
        write_private(self.stack_file, info.model_copy(update={"pids": {}}).model_dump_json(indent=2))
        self.process.start()
        self.process.wait_ready(self.ready, timeout)

    def stop(self) -> None:
        if self.process.popen is not None:
            stop_leader_first(self.process.popen.pid, STOP_GRACE_S)
        self.process.stop()
