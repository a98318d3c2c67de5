"""The embedded schema registry: Apicurio Registry, on loopback, with the Confluent-compatible API.

Apicurio Registry serves Confluent's Schema Registry API under ``/apis/ccompat/v6``, which is what
Kafka Connect's ``AvroConverter`` and every Confluent client speak; sinklab's own client
(``sinklab.sink.registry``) uses nothing else. Schemas live in an H2 database file in
``<workdir>/schema-registry``, so ids and versions survive ``stack down``/``up``. The jar is built
from Maven Central on first use (``registry_build.py``).
"""

from __future__ import annotations

from pathlib import Path

import requests

from sinklab.stack import jars
from sinklab.stack.process import LOOPBACK, ManagedProcess, free_port
from sinklab.stack.registry_build import runner_jar

CCOMPAT_PATH = "/apis/ccompat/v6"
# Quarkus starts in ~5 s on two cores with these; the registry holds a workshop's schemas, not a company's.
JVM_OPTS = ["-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]


def probe(registry_url: str, timeout: float = 2) -> bool:
    """Whether a schema registry answers at ``registry_url`` (its Confluent-compatible base URL);
    raises when nothing listens there (readiness waits report the last such error)."""
    return requests.get(f"{registry_url}/subjects", timeout=timeout).status_code == 200


def answers(registry_url: str) -> bool:
    try:
        return probe(registry_url)
    except requests.RequestException:
        return False


class EmbeddedRegistry:
    def __init__(self, workdir: Path, port: int | None = None):
        self.workdir = workdir
        self.port = port or free_port()
        self.home = workdir / "schema-registry"
        self.process = ManagedProcess("schema registry (Apicurio Registry)", [],
                                      workdir / "logs" / "schema-registry.log")

    @property
    def url(self) -> str:
        """The Confluent-compatible base URL (``schema.registry.url`` in a converter's config)."""
        return f"http://{LOOPBACK}:{self.port}{CCOMPAT_PATH}"

    def ready(self) -> bool:
        return probe(self.url)

    def start(self, timeout: float = 120) -> None:
        jar = runner_jar()  # built here, so that a failure names what could not be fetched
        self.home.mkdir(parents=True, exist_ok=True)
        # The workdir in the command line: `stack down` checks that a recorded PID is still this stack's.
        self.process.argv = [jars.java(), *JVM_OPTS, f"-Dsinklab.stack={self.workdir}", "-jar", str(jar)]
        self.process.env = {
            "HTTP_PORT": str(self.port),
            "QUARKUS_HTTP_HOST": LOOPBACK,
            "REGISTRY_DATASOURCE_URL": f"jdbc:h2:file:{self.home / 'registry'}",
        }
        self.process.start()
        self.process.wait_ready(self.ready, timeout)

    def stop(self) -> None:
        self.process.stop(timeout=10)
