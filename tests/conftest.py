"""Fixtures: one embedded stack (real broker, real REST catalog, real Spark) for the session."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import spark_jvm

from sinklab.stack import Stack
from sinklab.stack.apache_sink import ConnectWorker, scratch_dir

spark_jvm.configure()  # before any Spark starts: see spark_jvm's docstring


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with Stack.embedded(tmp_path_factory.mktemp("stack")) as s:
        yield s


@pytest.fixture()
def unique() -> str:
    """A fresh name, so tests on the shared stack never see each other's topics or tables."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture()
def stack_file(stack: Stack, tmp_path: Path) -> Path:
    """The shared stack's stack.json, for sinks run as processes (``sinklab sink run --stack``)."""
    return stack.write(tmp_path / "stack.json")


@pytest.fixture(scope="session")
def connect_worker(stack: Stack) -> Iterator[ConnectWorker]:
    """Apache's sink in a standalone Connect worker on the shared stack (started on first use), with Kafka's,
    Iceberg's and Apicurio's classes on its classpath: what sinklab's reading is compared with."""
    with ConnectWorker(stack, scratch_dir(stack)) as worker:
        yield worker


@pytest.fixture(scope="session")
def schema_registry(stack: Stack) -> str:
    """The shared stack's schema registry (Apicurio Registry, started on first use); its URL."""
    return stack.start_schema_registry()
