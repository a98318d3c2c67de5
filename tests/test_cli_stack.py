"""`sinklab stack up/status/down` as a user runs them: separate processes, nothing left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import requests

from sinklab.sink.wire.registry import RegistryClient
from sinklab.stack import StackInfo
from sinklab.stack.broker import broker_ready
from sinklab.stack.process import free_port, pid_alive


def sinklab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sinklab.cli", *args], capture_output=True, text=True, timeout=120)


def test_stack_up_status_down(tmp_path: Path) -> None:
    workdir = tmp_path / "stk"
    connect_port = free_port()
    up = sinklab("stack", "up", "--workdir", str(workdir), "--connect-port", str(connect_port), "--schema-registry")
    info = None
    try:
        assert up.returncode == 0, up.stderr
        raw = json.loads((workdir / "stack.json").read_text())
        assert {"bootstrap_servers", "catalog_uri", "catalog_name", "warehouse", "connect_url"} <= raw.keys()
        info = StackInfo.model_validate(raw)
        assert set(info.pids) == {"broker", "catalog", "connect", "schema-registry"}
        assert all(pid_alive(p) for p in info.pids.values())
        assert broker_ready(info.bootstrap_servers)
        assert requests.get(info.catalog_uri + "/v1/config", timeout=5).status_code == 200
        # The Kafka Connect REST API, on the pinned port.
        assert info.connect_url == f"http://127.0.0.1:{connect_port}" and info.connect_url in up.stdout
        assert requests.get(info.connect_url + "/connectors", timeout=5).json() == []
        # The schema registry, with Confluent's API.
        assert info.schema_registry_url and info.schema_registry_url in up.stdout
        assert requests.get(info.schema_registry_url + "/subjects", timeout=5).json() == []
        schema = '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'
        schema_id = RegistryClient(info.schema_registry_url).register("r-value", schema)

        again = sinklab("stack", "up", "--workdir", str(workdir))
        assert again.returncode == 1 and "already running" in again.stderr

        status = sinklab("stack", "status", "--workdir", str(workdir))
        assert status.returncode == 0
        assert json.loads(status.stdout)["processes"]["broker"]["state"] == "running"

        down = sinklab("stack", "down", "--workdir", str(workdir))
        assert down.returncode == 0, down.stderr
        assert not any(pid_alive(p) for p in info.pids.values())
        assert sinklab("stack", "status", "--workdir", str(workdir)).returncode == 3

        # Up again without the flag: the registry comes back, its schemas (an H2 file in the workdir) with it.
        back = sinklab("stack", "up", "--workdir", str(workdir))
        assert back.returncode == 0, back.stderr
        info = StackInfo.model_validate_json((workdir / "stack.json").read_text())
        assert "schema-registry" in info.pids and info.schema_registry_url
        assert RegistryClient(info.schema_registry_url).schema(schema_id) == schema
        assert sinklab("stack", "down", "--workdir", str(workdir)).returncode == 0
    finally:
        if info is not None:
            from sinklab.stack import stop_recorded

            stop_recorded(info)


def test_down_without_stack_is_a_clear_error(tmp_path: Path) -> None:
    result = sinklab("stack", "down", "--workdir", str(tmp_path))
    assert result.returncode == 1
    assert "no stack in" in result.stderr


def test_a_terminated_script_stops_the_stack_it_started(tmp_path: Path) -> None:
    # A script (a benchmark under `timeout`, a CI step cancelled) gets SIGTERM while its stack runs: the
    # stack's `with` block still stops the broker, catalog and Connect server, which run in sessions
    # of their own and would otherwise outlive it.
    import signal
    import time

    from sinklab.stack.process import stop_pid

    workdir = tmp_path / "stk"
    script = ("import sys, time\nfrom sinklab.stack import Stack\n"
              f"with Stack.embedded({str(workdir)!r}) as stack:\n"
              f"    stack.write({str(tmp_path / 'stack.json')!r})\n"
              "    print('up', flush=True)\n    time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pids: dict[str, int] = {}
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        pids = StackInfo.model_validate_json((tmp_path / "stack.json").read_text()).pids
        assert pids and all(pid_alive(pid) for pid in pids.values())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 30
        while any(pid_alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [name for name, pid in pids.items() if pid_alive(pid)]
    finally:
        if proc.poll() is None:  # failed before its SIGTERM: that still stops its stack, SIGKILL would not
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in pids.values():
            stop_pid(pid)
