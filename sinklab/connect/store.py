"""Where the connectors' configs and target states are kept: a JSON file in the stack's workdir.

Kafka Connect keeps them in a compacted config topic; one file written atomically does the same job
for one server, and a lock on its folder makes sure one server at a time owns it (two servers
running the same connectors would fence each other's sinks on every cycle).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sinklab.exceptions import StoreLocked

STORE_FILE = "connectors.json"
LOCK_FILE = "connect.lock"
TARGET_STATES = ("RUNNING", "PAUSED", "STOPPED")


@dataclass
class StoredConnector:
    config: dict[str, str]
    target_state: str = "RUNNING"
    topics: list[str] = field(default_factory=list)  # active topics (Connect's GET /connectors/x/topics)


class ConnectorStore:
    """The durable part of the herder: written on every change, read once when the server starts."""

    def __init__(self, state_dir: Path | None):
        self.state_dir = state_dir
        self._lock = threading.Lock()
        self._lock_fd: int | None = None

    @property
    def path(self) -> Path | None:
        return self.state_dir / STORE_FILE if self.state_dir else None

    def acquire(self) -> None:
        """Own the folder for this process's lifetime (the lock dies with the process, even on SIGKILL)."""
        if self.state_dir is None:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 64).decode(errors="replace").strip()
            os.close(fd)
            raise StoreLocked(f"another Connect server (pid {owner or '?'}) owns {self.state_dir}; stop it first "
                              "or give this one another --state-dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def release(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None

    def load(self) -> dict[str, StoredConnector]:
        path = self.path
        if path is None or not path.exists():
            return {}
        raw = json.loads(path.read_text())
        return {name: StoredConnector(config=dict(entry["config"]), target_state=entry.get("target_state", "RUNNING"),
                                      topics=list(entry.get("topics", [])))
                for name, entry in raw.get("connectors", {}).items()}

    def save(self, connectors: dict[str, StoredConnector]) -> None:
        path = self.path
        if path is None:
            return
        body: dict[str, Any] = {"connectors": {
            name: {"config": c.config, "target_state": c.target_state, "topics": c.topics}
            for name, c in sorted(connectors.items())}}
        with self._lock:
            # Write-then-rename: a crash leaves the old file or the new one, never half of one.
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(body, fh, indent=2)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
