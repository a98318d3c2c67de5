"""sinklab on the Pythons people have: a fresh clone of this repository runs `make demo` on Python 3.12 and
3.13 (the Makefile finding 3.13 by itself), the lean install has no notebooks extra (`sinklab doctor` says so),
and a short run of the suite on 3.13 proves the sink, its config and its transforms there; the whole suite
runs on 3.11 (make test). The clones are of HEAD: commit before running this by hand.

The interpreters are the machine's: ``python3.X`` on PATH, else pyenv's (this machine kind has 3.12 and 3.13
in pyenv beside Debian's 3.11), else ``SINKLAB_TEST_PYTHON_3_X``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT

from sinklab.stack import jvm_archive
from sinklab.stack.spark import C1_ONLY

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("pythons"), pytest.mark.timeout(1500)]

# The short run on 3.13: the config's reading, the transforms, and the sink's exactly-once on the stack.
SHORT_RUN = ["tests/test_config.py", "tests/test_transforms.py",
             "tests/test_sink.py::test_seed_config_verbatim_on_the_stack",
             "tests/test_sink.py::test_two_instances_zombie_is_fenced",
             "tests/test_sink.py::test_crash_at_every_step_then_restart",
             "tests/test_cdc.py::test_upsert_mode_across_cycles"]


def interpreter(minor: int) -> str:
    """A working Python 3.<minor> of this machine, or the test fails saying how to give one."""
    given = os.environ.get(f"SINKLAB_TEST_PYTHON_3_{minor}")
    candidates = [given] if given else []
    candidates.append(shutil.which(f"python3.{minor}"))
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        versions = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True).stdout.split()
        candidates += [f"{root}/versions/{v}/bin/python3.{minor}" for v in versions if v.startswith(f"3.{minor}.")]
    for candidate in filter(None, candidates):
        check = subprocess.run([candidate, "-c", f"import sys; assert sys.version_info[:2] == (3, {minor})"],
                               capture_output=True)
        if check.returncode == 0:
            return candidate
    pytest.fail(f"no Python 3.{minor} on this machine (python3.{minor} on PATH, pyenv): install one, or set "
                f"SINKLAB_TEST_PYTHON_3_{minor}=/path/to/python3.{minor}")


# What this process's Spark and the suite set in its environment (sinklab.stack.spark, tests/spark_jvm.py):
# inherited, PYSPARK_PYTHON would have a 3.13 driver start Python workers on this venv's 3.11.
SUITE_ENV = ("PYTHON", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP",
             "SPARK_CONNECT_MODE_ENABLED", "SPARK_SUBMIT_OPTS", jvm_archive.ENV)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without the suite's own settings, which a user's shell would not have."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV")) and k not in SUITE_ENV}
    return {**env, **extra}


def make_demo(clone: Path, env: dict[str, str], *args: str) -> str:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    run = subprocess.run(["make", "demo", *args], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert "make demo:" in out and "setup included" in out, out[-2000:]
    return out


def test_a_fresh_clone_runs_the_demo_on_python_3_12(tmp_path: Path) -> None:
    python = interpreter(12)
    out = make_demo(tmp_path / "clone", clean_env(), f"PYTHON={python}")
    assert "setup: Python 3.12." in out  # the Makefile says which Python it took
    version = subprocess.run([str(tmp_path / "clone/.venv/bin/python"), "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("Python 3.12.")


def test_a_fresh_clone_finds_python_3_13_runs_the_demo_lean_and_a_short_run_of_the_suite(tmp_path: Path) -> None:
    # A machine whose python3 is 3.13 (Debian 13, Fedora): no PYTHON given, the Makefile takes it.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(interpreter(13))
    env = clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    clone = tmp_path / "clone"
    out = make_demo(clone, env)
    assert "setup: Python 3.13." in out and "(PYTHON=python3)" in out

    # make demo installed what the demo needs, not the notebooks extra; the doctor names it, with its fix.
    doctor = subprocess.run([str(clone / ".venv/bin/sinklab"), "doctor", "--json"], capture_output=True, text=True,
                            env=env, timeout=120)
    found = {f["name"]: f for f in json.loads(doctor.stdout)}
    assert found["python"]["level"] == "ok" and found["python"]["detail"].startswith("3.13.")
    assert found["notebooks"]["level"] == "warn" and "make setup-notebooks" in found["notebooks"]["fix"]
    assert not (clone / ".venv/lib/python3.13/site-packages/plotly").exists()

    # The rest of the extras (make test's), then the short run on 3.13's own stack.
    setup = subprocess.run(["make", "setup-all"], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert setup.returncode == 0, (setup.stdout + setup.stderr)[-4000:]
    run = subprocess.run([str(clone / ".venv/bin/pytest"), "-q", "-p", "no:cacheprovider", "--durations=0",
                          *SHORT_RUN], cwd=clone, capture_output=True, text=True, timeout=1200,
                         env={**env, "SPARK_SUBMIT_OPTS": C1_ONLY, jvm_archive.ENV: "off"})
    tail = (run.stdout + run.stderr)[-6000:]
    assert run.returncode == 0, tail
    # pytest's last line: only passed tests (none skipped, none deselected by a marker), all of SHORT_RUN's.
    summary = re.findall(r"^=*\s*(\d+ passed.*) in [\d.]+s", run.stdout, re.MULTILINE)
    assert summary and re.fullmatch(r"\d+ passed", summary[-1]), tail
    assert int(summary[-1].split()[0]) >= len(SHORT_RUN), tail
