"""The embedded Kafka-protocol broker: noida-db, one node, on loopback."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from sinklab.stack.process import LOOPBACK, ManagedProcess, ProcessError, free_port


def noida_binary() -> Path:
    # The package's Python wrapper runs the binary as a child; starting the binary itself keeps the
    # PID we record the PID of the broker.
    path = Path(str(files("noida_db").joinpath("noida-db")))
    if not path.is_file():
        raise ProcessError(f"noida-db binary not found at {path}; is noida-db==0.2.3 installed?")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def broker_ready(bootstrap: str) -> bool:
    """Ready means a real metadata request is answered, not merely that the port is open."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000})
    metadata = admin.list_topics(timeout=2)
    return bool(metadata.brokers)


class EmbeddedBroker:
    def __init__(self, workdir: Path, port: int | None = None):
        self.workdir = workdir
        self.port = port or free_port()
        self.data_dir = workdir / "broker"
        self.process = ManagedProcess(
            "broker (noida-db)",
            [
                str(noida_binary()),
                "start",
                "--only",
                "kafka",
                "--host",
                LOOPBACK,
                "--kafka-port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
            ],
            workdir / "logs" / "broker.log",
        )

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 60) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process.start()
        self.process.wait_ready(lambda: broker_ready(self.bootstrap_servers), timeout)

    def stop(self) -> None:
        # SIGTERM makes noida-db save its state; it can take several seconds under load.
        self.process.stop(timeout=15)
