"""One warm Spark for many clients: `sinklab stack up --spark-connect`, the Connect server's driver serving
Spark Connect, two client processes each running a sink of its own on it: one as a connector through the
REST API, one through ``open_sink`` (a ``RemoteSink``, as a notebook on a shared stack runs its sinks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from helpers import produce, produce_raw, run_cli

from sinklab.exceptions import ProcessError
from sinklab.sink import IcebergSink, RecordError, RemoteSinkError, open_sink
from sinklab.stack import Stack, StackInfo, stop_recorded
from sinklab.stack.process import pid_alive

CLIENT = Path(__file__).with_name("spark_connect_client.py")
COUNT = 300
ZONES = {"north": "America/Los_Angeles", "south": "Asia/Tokyo"}
HOW = {"north": "connector", "south": "remote"}


def test_two_clients_of_one_spark_connect_server_each_get_their_own_sink_and_settings(stack: Stack,
                                                                                     tmp_path: Path) -> None:
    # A driver of this process's own, as a kernel that runs a sink has: a client must start beside it.
    assert stack.spark.range(1).count() == 1
    workdir = tmp_path / "stk"
    up = run_cli("stack", "up", "--workdir", str(workdir), "--spark-connect")
    info = StackInfo.model_validate_json((workdir / "stack.json").read_text()) if up.returncode == 0 else None
    try:
        assert up.returncode == 0, up.stderr
        assert info is not None and info.spark_connect_url and info.spark_connect_url.startswith("sc://127.0.0.1:")
        assert info.spark_connect_url in up.stdout
        status = run_cli("stack", "status", "--workdir", str(workdir))
        assert json.loads(status.stdout)["spark_connect_url"] == info.spark_connect_url

        client = Stack.from_file(workdir, spark="connect")
        expected = {}
        for seed, name in enumerate(ZONES, start=1):
            client.create_topic(name, partitions=2)
            expected[name] = produce(client, name, COUNT, seed=seed)
        assert not set(expected["north"]) & set(expected["south"])

        # A sink drives Iceberg's Java API through py4j: a client without a JVM says so, and runs nothing.
        with pytest.raises(ProcessError, match="open_sink"):
            IcebergSink(client, {"name": "here", "config": {"topics": "north", "iceberg.tables": "clients.here",
                                                           "value.converter.schemas.enable": "false"}}).run_once()

        barrier = tmp_path / "barrier"
        barrier.mkdir()
        clients = {name: subprocess.Popen(
            [sys.executable, str(CLIENT), str(workdir / "stack.json"), name, zone, str(barrier), str(COUNT),
             HOW[name]],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name, zone in ZONES.items()}
        seen = {}
        for name, proc in clients.items():
            try:
                out, err = proc.communicate(timeout=300)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            assert proc.returncode == 0, err[-3000:]
            seen[name] = json.loads(out.strip().splitlines()[-1])

        for name, zone in ZONES.items():
            # Each client's table holds its own topic's records, each once: the other's sink never wrote there.
            assert len(seen[name]["ids"]) == COUNT and sorted(seen[name]["ids"]) == sorted(expected[name])
            # Each client's settings stayed its own while the other set its own, and its queries used them.
            assert seen[name]["zone"] == zone and seen[name]["client"] == name
        assert seen["north"]["midnight_utc_shown_as"] == "2025-12-31 16:00:00"
        assert seen["south"]["midnight_utc_shown_as"] == "2026-01-01 09:00:00"
        # Both sinks ran on the one worker whose driver the clients shared: the connector runs still, the
        # client's own sink was stopped by its client once its rows were there.
        state = requests.get(f"{info.connect_url}/connectors/north/status", timeout=10).json()
        assert state["connector"]["state"] == "RUNNING"
        assert state["connector"]["worker_id"] == info.connect_url.removeprefix("http://")
        assert seen["south"]["status"] == "STOPPED" and seen["south"]["cycles"] >= 1
        assert requests.get(f"{info.connect_url}/sinklab/sinks", timeout=10).json() == ["south"]

        # The connector's client read its table fresh while the connector committed each second under a steady
        # stream (spark_connect_client.py): every read held every record up to its watermark, once.
        assert seen["north"]["fresh_reads"] == 3 and seen["north"]["fresh_snapshots"] > 1

        # A record the server's sink cannot convert is raised in the client, as its class, named.
        client.create_topic("garbled", partitions=1)
        produce_raw(client, "garbled", [b'{"order_id": "g-1"}', b"not json"])
        garbled = open_sink(client, {"name": "garbled", "config": {
            "topics": "garbled", "iceberg.tables": "clients.garbled", "iceberg.tables.auto-create-enabled": "true",
            "value.converter.schemas.enable": "false"}})
        with pytest.raises(RecordError) as failed:
            garbled.run_once()
        assert (failed.value.topic, failed.value.partition, failed.value.offset) == ("garbled", 0, 1)
        status = garbled.status()
        assert status.state == "FAILED" and "garbled[0]@1" in (status.trace or "")
        assert not client.spark.catalog.tableExists("sinklab.clients.garbled")  # nothing of the cycle committed
        garbled.delete()
        # A client's sink ends with its client's process, as a sink in a kernel does.
        left = subprocess.run([sys.executable, "-c", (
            "import sys; from sinklab.sink import open_sink; from sinklab.stack import Stack; "
            "open_sink(Stack.from_file(sys.argv[1], spark='connect'), {'name': 'left', 'config': {'topics': 'south', "
            "'iceberg.tables': 'clients.left', 'iceberg.tables.auto-create-enabled': 'true', "
            "'value.converter.schemas.enable': 'false'}}).start()"), str(workdir / "stack.json")],
            capture_output=True, text=True, timeout=120)
        assert left.returncode == 0, left.stderr[-2000:]
        state = requests.get(f"{info.connect_url}/sinklab/sinks/left/status", timeout=10).json()["state"]
        assert state == "STOPPED"
        # The connector's name is its group and transactional id: a client's sink may not take it.
        with pytest.raises(RemoteSinkError, match="connector named north"):
            open_sink(client, {"name": "north", "config": {"topics": "north", "iceberg.tables": "clients.other",
                                                          "value.converter.schemas.enable": "false"}})
        client.stop_spark()

        down = run_cli("stack", "down", "--workdir", str(workdir))
        assert down.returncode == 0, down.stderr
        assert not any(pid_alive(p) for p in info.pids.values())

        # Up again without the flag: Spark Connect comes back with the stack, and the tables with it.
        back = run_cli("stack", "up", "--workdir", str(workdir))
        assert back.returncode == 0, back.stderr
        info = StackInfo.model_validate_json((workdir / "stack.json").read_text())
        assert info.spark_connect_url and info.spark_connect_url in back.stdout
        again = Stack.from_file(workdir, spark="connect")
        assert again.spark.table("sinklab.clients.north").count() == COUNT + seen["north"]["streamed"]
        assert not stack.spark.catalog.tableExists("sinklab.clients.north")  # the driver here: another stack
        again.stop_spark()
        assert run_cli("stack", "down", "--workdir", str(workdir)).returncode == 0
    finally:
        if info is not None:
            stop_recorded(info)
