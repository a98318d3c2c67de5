"""Stack.warm_spark(): the driver starts in the background, the first use gets that same session, and
a stack stopped while its driver still starts leaves no JVM behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# In a process of its own: a process holds one Spark driver, and the suite's runs already.
SCRIPT = r"""
import json, os, sys, threading, time
from sinklab.stack import Stack

def children():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if int(stat.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                    found.append(int(pid))
        except OSError:
            pass
    return found

def warming():
    return [t for t in threading.enumerate() if t.name == "sinklab-warm-spark"]

stack = Stack.from_file(sys.argv[1])
stack.warm_spark()
deadline = time.monotonic() + 120
while stack._spark is None and time.monotonic() < deadline:
    time.sleep(0.1)
started_unasked = stack._spark is not None
for t in warming():
    t.join(60)
spark = stack.spark
same_session, rows = spark is stack._spark, spark.range(3).count()
stack.stop_spark()
stack.warm_spark()
time.sleep(0.5)
while_starting = children()
stack.stop_spark()  # waits for the driver being started, then stops it
for t in warming():
    t.join(60)
print(json.dumps({"started_unasked": started_unasked, "same_session": same_session, "rows": rows,
                  "while_starting": while_starting, "left": children()}))
"""


@pytest.mark.spark
def test_a_warmed_driver_is_the_one_used_and_stops_even_while_starting(stack_file: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(stack_file)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["started_unasked"] and result["same_session"] and result["rows"] == 3
    assert result["while_starting"], "the second warm_spark() started no driver process"
    assert result["left"] == [], "a driver started by warm_spark() outlived stop_spark()"
