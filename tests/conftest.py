"""Fixtures: one embedded stack (real broker, real REST catalog, real Spark) for the session."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sinklab.stack import Stack

# Every Spark JVM the suite starts (this process's, sinks run as processes, notebook kernels,
# executors) compiles with C1 only: the suite's JVMs are short-lived and carry little data, and
# on 2 cores C2's compiler threads compete with the work. Measured on a first cycle: 43.7 s of CPU
# against 29.4 s, 19.3 s of wall time against 16.3 s. Not sinklab's default: C2 drains a backlog
# 1.8x faster (bench/ingest.py --quick: 50k records/s against 28k). Spark's own mechanism, so
# nothing in sinklab knows: `spark.*.defaultJavaOptions` in a SPARK_CONF_DIR's spark-defaults.conf.
if "SPARK_CONF_DIR" not in os.environ:
    _conf = Path(tempfile.mkdtemp(prefix="sinklab-test-spark-conf-"))
    (_conf / "spark-defaults.conf").write_text("spark.driver.defaultJavaOptions -XX:TieredStopAtLevel=1\n"
                                               "spark.executor.defaultJavaOptions -XX:TieredStopAtLevel=1\n")
    os.environ["SPARK_CONF_DIR"] = str(_conf)
    atexit.register(shutil.rmtree, _conf, True)


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
def schema_registry(stack: Stack) -> str:
    """The shared stack's schema registry (Apicurio Registry, started on first use); its URL."""
    return stack.start_schema_registry()
