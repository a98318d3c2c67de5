"""A driver sinklab starts writes its JVM's own console lines to its log, not to the process's stderr
(a notebook's kernel shares that stderr: every line would be a cell's output), and starts with the JVM
options its settings ask for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.spark
def test_the_jvm_launchers_warning_goes_to_the_drivers_log(tmp_path: Path) -> None:
    log = tmp_path / "spark.log"
    code = ("import sys; from pathlib import Path; "
            "from sinklab.stack.spark import SparkSettings, build_spark, stop_spark; "
            f"s = build_spark(SparkSettings(master='local[1]', compiler='c1'), {{}}, log_file=Path({str(log)!r})); "
            "s.range(3).count(); print('after the start', file=sys.stderr); "
            "print(list(s._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())); "
            "stop_spark(s)")
    # Without the suite's own JVM options (tests/spark_jvm.py: C1 too), so that the driver's come from its settings.
    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    # compiler="c1" and the parallel collector beside the log's option, not instead of it.
    for option in ("-XX:TieredStopAtLevel=1", "-XX:+UseParallelGC", "-Dlog4j2.configurationFile="):
        assert option in done.stdout, done.stdout
    # Spark 4.1 runs its driver with jdk.incubator.vector, and the JVM says so on its stderr at start.
    assert "Using incubator modules" in log.read_text()
    assert "incubator" not in done.stderr, done.stderr
    assert "after the start" in done.stderr  # the process's own stderr is back once the driver started


def test_a_collector_chosen_in_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    from sinklab.stack.spark import PARALLEL_GC, SparkSettings, driver_options

    for variable in ("SPARK_SUBMIT_OPTS", "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS"):
        monkeypatch.delenv(variable, raising=False)
    assert PARALLEL_GC in driver_options(SparkSettings()) and "-XX:-UseGCOverheadLimit" in PARALLEL_GC
    # The JVM would refuse to start with two collectors.
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Xmx4g -XX:+UseG1GC")
    assert PARALLEL_GC not in driver_options(SparkSettings())
