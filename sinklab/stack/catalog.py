"""The embedded REST catalog server as a managed process."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import requests

from sinklab.stack.process import LOOPBACK, ManagedProcess, free_port


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, with no moment where it is readable by others."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


class EmbeddedCatalog:
    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        token: str | None = None,
        warehouse: str | None = None,
        table_config: dict[str, str] | None = None,
        io_properties: dict[str, str] | None = None,
        db: Path | None = None,
    ):
        self.workdir = workdir
        self.port = port or free_port()
        self.token = token
        self.warehouse = warehouse or (workdir / "warehouse").resolve().as_uri()
        self.db = db or workdir / "catalog.db"
        argv = [
            sys.executable,
            "-m",
            "sinklab.catalog.server",
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
            "--db",
            str(self.db),
            "--warehouse",
            self.warehouse,
            "--table-config",
            json.dumps(table_config or {}),
        ]
        if token:
            # A file, not an argument: arguments are visible to every user in `ps`.
            token_file = workdir / "catalog.token"
            write_private(token_file, token)
            argv += ["--token-file", str(token_file)]
        if io_properties:
            # Credentials go in a file for the same reason as the token.
            io_file = workdir / "catalog-io.json"
            write_private(io_file, json.dumps(io_properties))
            argv += ["--io-properties-file", str(io_file)]
        self.process = ManagedProcess("REST catalog", argv, workdir / "logs" / "catalog.log")

    @property
    def uri(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def ready(self) -> bool:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return requests.get(f"{self.uri}/v1/config", headers=headers, timeout=2).status_code == 200

    def start(self, timeout: float = 60) -> None:
        if self.warehouse.startswith("file:"):
            Path(self.warehouse.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
        self.process.start()
        self.process.wait_ready(self.ready, timeout)

    def stop(self) -> None:
        self.process.stop(timeout=10)
