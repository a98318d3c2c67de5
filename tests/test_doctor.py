"""`sinklab doctor`: each part a machine can lack is reported with its fix. No stack; the Java, the jar cache,
the sockets and the disk are this machine's (the notebooks extra missing: tests/test_pythons.py, in a fresh
clone's venv)."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sinklab import doctor
from sinklab.stack import jars, registry_build

SINKLAB = str(Path(sys.executable).parent / "sinklab")


def test_python_outside_3_11_to_3_13_is_named_with_its_fix() -> None:
    for version in ((3, 10, 13), (3, 14, 0)):
        found = doctor.check_python(version)
        assert found.level == "fail" and ".".join(map(str, version)) in found.detail
        assert "3.13" in found.fix and "python3.13" in found.fix
    assert doctor.check_python((3, 12, 1)).level == doctor.check_python((3, 11, 0)).level == "ok"


def test_java_versions_are_read_as_java_prints_them() -> None:
    assert doctor.java_version('openjdk version "17.0.15" 2025-04-15') == 17
    assert doctor.java_version('java version "1.8.0_292"') == 8
    assert doctor.java_version('openjdk version "21" 2023-09-19') == 21
    assert doctor.java_version("no java here") is None


def test_a_machine_without_java_or_chromium_is_told_how_to_get_them(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "BROWSER_PATH")}
    env["PATH"] = str(tmp_path)  # nothing on it: no java, no chromium
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = str(free.getsockname()[1])  # not JupyterLab's 8888, which a test's JupyterLab may hold
    run = subprocess.run([SINKLAB, "doctor", "--port", port], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    java = next(i for i, line in enumerate(lines) if line.startswith("FAIL  java"))
    assert "not found on PATH or in JAVA_HOME" in lines[java]
    assert "fix: install a Java 17" in lines[java + 1] and "openjdk-17-jre-headless" in lines[java + 1]
    chromium = next(i for i, line in enumerate(lines) if line.startswith("WARN  chromium"))
    assert "fix: apt-get install chromium" in lines[chromium + 1] and "BROWSER_PATH" in lines[chromium + 1]
    assert lines[-1] == "1 to fix, 1 to know"
    # The same machine with this one's Java and browser: both found.
    found = json.loads(subprocess.run([SINKLAB, "doctor", "--json"], capture_output=True, text=True,
                                      timeout=120).stdout)
    assert {f["name"]: f["level"] for f in found}["java"] == "ok"
    assert {f["name"]: f["level"] for f in found}["chromium"] == "ok"


def test_a_missing_notebook_module_is_named() -> None:
    found = doctor.check_notebooks(("plotly", "sinklab_no_such_module"))
    assert found.level == "warn" and "(sinklab_no_such_module missing)" in found.detail
    assert "sinklab[notebooks]" in found.fix and "make setup-notebooks" in found.fix
    assert doctor.check_notebooks().level == "ok"  # this venv has the extra


def test_a_taken_port_is_named() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        found = doctor.check_ports([port])
        assert found.level == "warn" and str(port) in found.detail and "jupyter server list" in found.fix
    assert doctor.check_ports([port]).level == "ok"
    assert doctor.check_loopback().level == "ok"


def test_too_little_disk_is_named_with_where_to_put_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = doctor.check_disk(tmp_path, need_mb=10**9)
    assert found.level == "fail" and str(tmp_path) in found.detail and jars.CACHE_ENV in found.fix
    # What is needed counts the jars still to fetch: an empty cache needs them all beside the headroom.
    monkeypatch.setenv(jars.CACHE_ENV, str(tmp_path / "cache"))
    needed = doctor.HEADROOM_MB + sum(doctor.PART_MB.values())
    assert doctor.check_disk().detail.endswith(f"(needs {needed / 1024:.1f} GB)")


@pytest.fixture
def maven() -> Iterator[str]:
    """A web server that answers (any answer: the doctor asks only whether the repository can be reached)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_jars_not_here_are_named_with_when_they_come_and_how_to_fetch_them_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, maven: str) -> None:
    assert doctor.check_jars().level == "ok"  # make test fetched them all
    monkeypatch.setenv(jars.CACHE_ENV, str(tmp_path / "empty"))
    monkeypatch.setenv(jars.REPO_ENV, maven)
    found = doctor.check_jars()
    assert found.level == "warn" and found.fix == doctor.FETCH_ALL
    for name in (*jars.PARTS, *jars.BENCH_PARTS, registry_build.PART):
        assert name in found.detail
    assert "notebook 10" in found.detail and "notebook 11" in found.detail
    assert f"~{sum(doctor.PART_MB.values())} MB" in found.detail
    # Offline with nothing here: a fail, and the way round it.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        monkeypatch.setenv(jars.REPO_ENV, f"http://127.0.0.1:{closed.getsockname()[1]}/")
        found = doctor.check_jars()
    assert found.level == "fail" and "cannot be reached" in found.detail
    assert "sinklab jars export --all DIR" in found.fix and jars.JARS_DIR_ENV in found.fix
    # A user's own folder that lacks parts names them.
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "own"))
    found = doctor.check_jars()
    assert found.level == "fail" and "lacks kafka" in found.detail
