"""Where the services of ``compose.yaml`` are: from the host (published on loopback) or from a
container of the stack (service names). The tests check ``compose.yaml`` against these values."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import requests

from sinklab.stack import registry
from sinklab.stack.registry import CCOMPAT_PATH

COMPOSE_FILE = "compose.yaml"
# Set to 1 in the JupyterLab container, so that Stack.compose() there uses the service names.
IN_COMPOSE_ENV = "SINKLAB_IN_COMPOSE"

WAREHOUSE = "s3://warehouse/"
BUCKET = "warehouse"
S3_ACCESS_KEY = "admin"
S3_SECRET_KEY = "password"
S3_REGION = "us-east-1"

# Service -> port published on the host's 127.0.0.1.
HOST_PORTS = {"kafka": 9092, "minio": 9000, "rest": 8181, "spark-master": 8080, "jupyter": 8888,
              "schema-registry": 8081}


@dataclass(frozen=True)
class ComposeEndpoints:
    bootstrap_servers: str
    catalog_uri: str
    s3_endpoint: str
    spark_master: str
    schema_registry_url: str


ON_HOST = ComposeEndpoints(
    bootstrap_servers=f"127.0.0.1:{HOST_PORTS['kafka']}",
    catalog_uri=f"http://127.0.0.1:{HOST_PORTS['rest']}",
    s3_endpoint=f"http://127.0.0.1:{HOST_PORTS['minio']}",
    # The cluster's executors could not reach a driver on the host; the host runs Spark itself.
    spark_master="local[*]",
    schema_registry_url=f"http://127.0.0.1:{HOST_PORTS['schema-registry']}{CCOMPAT_PATH}",
)
INSIDE = ComposeEndpoints(
    bootstrap_servers="kafka:19092",
    catalog_uri="http://rest:8181",
    s3_endpoint="http://minio:9000",
    spark_master="spark://spark-master:7077",
    schema_registry_url=f"http://schema-registry:8080{CCOMPAT_PATH}",
)


def in_compose() -> bool:
    """Whether this process runs in one of compose.yaml's containers (its JupyterLab sets the variable)."""
    return os.environ.get(IN_COMPOSE_ENV) == "1"


def compose_endpoints(inside: bool | None = None) -> ComposeEndpoints:
    return INSIDE if (in_compose() if inside is None else inside) else ON_HOST


def driver_conf(endpoints: ComposeEndpoints) -> dict[str, str]:
    """Spark settings for a driver inside the stack: the workers must reach it by its name, so it
    cannot advertise loopback (sinklab's default for a local driver)."""
    if endpoints.spark_master.startswith("local"):
        return {}
    return {"spark.driver.host": socket.gethostname(), "spark.driver.bindAddress": "0.0.0.0"}


def unreachable(endpoints: ComposeEndpoints, timeout: float = 3) -> list[str]:
    """The services that do not answer, each with the reason; empty when the stack is up."""
    from sinklab.stack.broker import broker_ready

    probes = {
        f"kafka at {endpoints.bootstrap_servers}": (
            endpoints.bootstrap_servers, lambda: broker_ready(endpoints.bootstrap_servers)),
        f"Iceberg REST catalog at {endpoints.catalog_uri}": (
            endpoints.catalog_uri, lambda: requests.get(endpoints.catalog_uri + "/v1/config", timeout=timeout).ok),
        f"MinIO at {endpoints.s3_endpoint}": (
            endpoints.s3_endpoint,
            lambda: requests.get(endpoints.s3_endpoint + "/minio/health/live", timeout=timeout).ok),
        f"schema registry at {endpoints.schema_registry_url}": (
            endpoints.schema_registry_url,
            lambda: registry.probe(endpoints.schema_registry_url, timeout)),
    }
    problems = []
    for name, (address, probe) in probes.items():
        # A plain connect first: it names the common case (nothing listens) in a few words, and
        # spares a Kafka client that would log every refused reconnect to stderr.
        host, _, port = address.rpartition("//")[2].partition("/")[0].rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
        except OSError as exc:
            problems.append(f"{name}: {exc.strerror or type(exc).__name__}")
            continue
        try:
            if not probe():
                problems.append(f"{name}: not ready")
        except Exception as exc:  # noqa: BLE001 - any failure to answer is the message
            problems.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
    return problems
