"""How the suite's Spark driver JVMs start: faster, with the same behaviour.

Every Spark driver the suite starts (its own session, sinks run as processes, notebook kernels,
JupyterLab's kernel) reads ``SPARK_SUBMIT_OPTS``, the JVM options pyspark's launcher adds to a
client-mode driver. Two things, measured on a fresh JVM's first sink cycle (2 cores,
Stack.embedded, 1,000 pizzas):

- ``-XX:TieredStopAtLevel=1``, C1 only: the suite's JVMs are short-lived and carry little data, and
  on 2 cores C2's compiler threads compete with the work. 43.7 s of CPU against 29.4 s; the first
  cycle 19.3 s against 16.3 s. Not sinklab's default: C2 drains a backlog 1.8x faster
  (``bench/ingest.py --quick``: 50k records/s against 28k).
- sinklab's class archive (``sinklab.stack.jvm_archive``), off by default for users and on here
  (short-lived drivers, little data), trained before the first test when the installation has
  none, rather than in the background by the first stack: every driver of the suite starts warm.
"""

from __future__ import annotations

import os
import sys

from sinklab.stack import jvm_archive
from sinklab.stack.spark import C1_ONLY


def configure() -> None:
    """Set ``SPARK_SUBMIT_OPTS`` for this process and every process it starts, and train the class
    archive if the installation has none. A user's own ``SPARK_SUBMIT_OPTS`` is left alone."""
    if "SPARK_SUBMIT_OPTS" in os.environ:
        return
    os.environ["SPARK_SUBMIT_OPTS"] = C1_ONLY
    os.environ.setdefault(jvm_archive.ENV, "on")
    try:
        archive = jvm_archive.path()
    except Exception as exc:  # noqa: BLE001 - no Java or jars yet: the tests that need them say so
        print(f"\nsinklab tests: no class archive ({exc})", file=sys.stderr)
        return
    if archive.exists():
        return
    print(f"\nsinklab tests: training the Spark driver's class archive -> {archive}", file=sys.stderr)
    try:
        jvm_archive.train()
    except RuntimeError as exc:
        print(f"sinklab tests: no class archive ({exc}); Spark starts without one", file=sys.stderr)
