"""The Kafka Connect REST API (issue #17).

Unit tests drive the herder and the routes with fake sinks (no stack). The integration tests share
ONE embedded stack, whose Connect server is its own process, and use the real ``curl`` (and ``jq``)
with the seed's commands; they build on each other in file order (the seed's connector is created
by the first one), as a user's session would.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from helpers import produce, run_cli

from sinklab.connect.apply import plan, read_folder
from sinklab.connect.herder import Herder
from sinklab.connect.server import ConnectApi, ConnectServer
from sinklab.connect.store import ConnectorStore
from sinklab.demo import SEED_CONFIG
from sinklab.exceptions import EXIT_CHANGES, ApplyError, BadRequest, Conflict, NotFound, StoreLocked
from sinklab.generators import PaymentGenerator, produce_json
from sinklab.sink.config.sink_config import SinkConfig
from sinklab.sink.sink import SinkStatus
from sinklab.sink.wire.offsets import TopicPartition
from sinklab.stack import Stack, jars
from sinklab.stack.process import stop_leader_first

PLUGIN = "io.tabular.iceberg.connect.IcebergSinkConnector"

# The integration tests build on each other in file order (the docstring): one worker runs them all,
# or a test whose connector another worker created finds none (`--dist loadgroup`, Makefile).
pytestmark = pytest.mark.xdist_group("connect")


def wait_for(check: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# ---------------------------------------------------------------- unit: herder, routes, apply planning

class FakeSink:
    """Records what the herder makes it do; ``fail`` makes it report FAILED like a crashed cycle."""

    built: list[FakeSink] = []

    def __init__(self, config: SinkConfig):
        self.config = config
        self.state = "UNASSIGNED"
        self.starts = 0
        self.halted = False
        self.stopping = 0.0  # how long stop() takes, like a cycle finishing
        FakeSink.built.append(self)

    def start(self) -> FakeSink:
        self.state, self.starts = "RUNNING", self.starts + 1
        return self

    def halt(self) -> None:
        self.halted = True

    def stop(self, timeout: float = 120) -> None:
        time.sleep(self.stopping)
        if self.state != "FAILED":
            self.state = "STOPPED"

    def status(self) -> SinkStatus:
        trace = "RecordError: topic t partition 0 offset 7: not JSON" if self.state == "FAILED" else None
        return SinkStatus(self.config.name, self.state, lag={TopicPartition("t", 0): 0}, trace=trace)


class FakeOffsets:
    def __init__(self) -> None:
        self.groups: dict[str, dict[tuple[str, int], int]] = {}

    def get(self, group: str) -> dict[tuple[str, int], int]:
        return dict(self.groups.get(group, {}))

    def alter(self, group: str, offsets: dict[tuple[str, int], int | None]) -> None:
        slot = self.groups.setdefault(group, {})
        for tp, offset in offsets.items():
            slot.pop(tp, None) if offset is None else slot.__setitem__(tp, offset)

    def reset(self, group: str) -> None:
        self.groups.pop(group, None)


def connector_config(topic: str = "t", **extra: str) -> dict[str, Any]:
    return {"connector.class": PLUGIN, "tasks.max": 2, "topics": topic, "iceberg.tables": "ns.t",
            "iceberg.control.commit.interval-ms": 500, **extra}


def settle(herder: Herder) -> None:
    wait_for(lambda: all(herder.get(n).settled for n in herder.names()), 10, "the connectors to settle")


def test_herder_states_offsets_and_durability(tmp_path: Path) -> None:
    FakeSink.built = []
    offsets = FakeOffsets()
    herder = Herder(FakeSink, ConnectorStore(tmp_path), offsets, "127.0.0.1:8083")
    with pytest.raises(Conflict):  # not started yet: Connect's rebalance answer
        herder.put_config("a", connector_config())
    herder.start()
    assert herder.put_config("a", connector_config()) is True
    assert herder.put_config("a", connector_config()) is False  # same config: an update, nothing restarts
    settle(herder)
    status = herder.status("a")
    assert status["connector"]["state"] == "RUNNING" and [t["id"] for t in status["tasks"]] == [0, 1]
    assert len(FakeSink.built) == 1 and FakeSink.built[0].starts == 1

    herder.set_target("a", "PAUSED")
    settle(herder)
    assert herder.status("a")["connector"]["state"] == "PAUSED" and FakeSink.built[0].state == "STOPPED"
    herder.set_target("a", "RUNNING")
    settle(herder)
    assert herder.status("a")["tasks"][1]["state"] == "RUNNING" and FakeSink.built[0].starts == 2

    FakeSink.built[0].state = "FAILED"
    failed = herder.status("a")
    assert failed["connector"]["state"] == "FAILED" and "offset 7" in failed["tasks"][0]["trace"]
    assert herder.restart("a", only_failed=True) is True
    settle(herder)
    assert herder.status("a")["connector"]["state"] == "RUNNING" and FakeSink.built[0].starts == 3
    assert herder.restart("a", only_failed=True) is False  # nothing failed

    herder.put_config("a", connector_config(**{"iceberg.control.commit.interval-ms": "1000"}))
    settle(herder)  # an update rebuilds the sink on the new config
    assert len(FakeSink.built) == 2 and FakeSink.built[1].config.commit_interval_ms == 1000
    assert FakeSink.built[0].state == "STOPPED" and FakeSink.built[1].state == "RUNNING"

    # KIP-875: offsets change only while STOPPED; a stopped connector has no tasks.
    offsets.groups["connect-a"] = {("t", 0): 5, ("t", 1): 9}
    body = {"offsets": [{"partition": {"kafka_topic": "t", "kafka_partition": 0}, "offset": {"kafka_offset": 2}},
                        {"partition": {"kafka_topic": "t", "kafka_partition": 1}, "offset": None}]}
    with pytest.raises(BadRequest, match="STOPPED"):
        herder.alter_offsets("a", body)
    herder.set_target("a", "STOPPED")
    settle(herder)
    assert herder.status("a")["connector"]["state"] == "STOPPED" and herder.status("a")["tasks"] == []
    herder.alter_offsets("a", body)
    assert herder.offsets("a")["offsets"] == [
        {"partition": {"kafka_topic": "t", "kafka_partition": 0}, "offset": {"kafka_offset": 2}}]
    herder.reset_offsets("a")
    assert herder.offsets("a") == {"offsets": []}

    herder.put_config("b", connector_config("u"))
    herder.set_target("b", "PAUSED")
    settle(herder)
    herder.close()
    # Durable: a new herder on the same folder has both, in their target states, and starts only RUNNING ones.
    FakeSink.built = []
    again = Herder(FakeSink, ConnectorStore(tmp_path), FakeOffsets(), "w")
    again.start()
    settle(again)
    assert again.names() == ["a", "b"]
    assert again.get("a").config["iceberg.control.commit.interval-ms"] == "1000"
    assert [again.status(n)["connector"]["state"] for n in ("a", "b")] == ["STOPPED", "PAUSED"]
    assert FakeSink.built == []
    again.set_target("b", "RUNNING")
    settle(again)
    assert again.status("b")["connector"]["state"] == "RUNNING" and len(FakeSink.built) == 1
    FakeSink.built[0].stopping = 0.5
    again.delete("b")
    # DELETE answers once the sink has stopped, its running cycle finished.
    assert FakeSink.built[0].halted and FakeSink.built[0].state == "STOPPED"
    with pytest.raises(NotFound):
        again.status("b")
    again.close()


def test_store_is_owned_by_one_server(tmp_path: Path) -> None:
    first = ConnectorStore(tmp_path)
    first.acquire()
    try:
        with pytest.raises(StoreLocked, match="another Connect server"):
            ConnectorStore(tmp_path).acquire()
    finally:
        first.release()
    ConnectorStore(tmp_path).acquire()  # free again once the owner lets go


def test_routes_shapes_and_errors(tmp_path: Path) -> None:
    herder = Herder(FakeSink, ConnectorStore(None), FakeOffsets(), "w:1")
    herder.start()
    api = ConnectApi(herder, lambda: "cluster-1")
    try:
        assert api.handle("GET", "/", None) == (200, {"version": jars.KAFKA_VERSION, "commit": "sinklab-0.1.0",
                                                      "kafka_cluster_id": "cluster-1"})
        classes = [p["class"] for p in api.handle("GET", "/connector-plugins", None)[1]]
        assert classes == [PLUGIN, "org.apache.iceberg.connect.IcebergSinkConnector"]
        # An invalid config is a 400 in Connect's body, naming the key.
        status, body = api.handle("PUT", "/connectors/x/config", connector_config(**{"tasks.max": "many"}))
        assert status == 400 and body["error_code"] == 400 and "tasks.max" in body["message"]
        status, body = api.handle("PUT", "/connectors/x/config", {"topics": "t", "iceberg.tables": "ns.t"})
        assert status == 400 and "connector.class" in body["message"]
        status, body = api.handle("PUT", "/connectors/x/config", connector_config(**{"errors.tolerance": "some"}))
        assert status == 400 and "errors.tolerance" in body["message"]
        assert api.handle("GET", "/connectors/nope/status", None) == (
            404, {"error_code": 404, "message": "Connector nope not found"})
        status, info = api.handle("POST", "/connectors", {"name": "x", "config": connector_config()})
        assert status == 201 and info["type"] == "sink" and info["config"]["tasks.max"] == "2"
        assert api.handle("POST", "/connectors", {"name": "x", "config": connector_config()})[0] == 409
        assert api.handle("PUT", "/connectors/x/config", connector_config())[0] == 200
        # KIP-477: a PATCH changes the keys it names; a null removes one.
        status, info = api.handle("PATCH", "/connectors/x/config", {"tasks.max": 1, "errors.log.enable": "true"})
        assert status == 200 and info["config"]["tasks.max"] == "1" and info["config"]["topics"] == "t"
        status, info = api.handle("PATCH", "/connectors/x/config", {"errors.log.enable": None})
        assert status == 200 and "errors.log.enable" not in info["config"] and info["config"]["tasks.max"] == "1"
        assert api.handle("GET", "/connectors/x/config", None)[1] == info["config"]
        assert api.handle("PATCH", "/connectors/x/config", {"errors.tolerance": "some"})[0] == 400
        assert api.handle("PATCH", "/connectors/x/config", ["tasks.max"])[0] == 400
        assert api.handle("PATCH", "/connectors/nope/config", {"tasks.max": 1})[0] == 404
        assert api.handle("PUT", "/connectors/x/config", connector_config())[0] == 200
        # KIP-1017's health probe.
        assert api.handle("GET", "/health", None) == (200, {
            "status": "healthy", "message": "Worker has completed startup and is ready to handle requests."})
        assert api.handle("PATCH", "/connectors/x/status", None)[0] == 405
        assert api.handle("GET", "/connectors/x/tasks/2/status", None)[0] == 404
        assert api.handle("GET", "/connectors/x/tasks", None)[1][1]["id"] == {"connector": "x", "task": 1}
        settle(herder)
        assert api.handle("GET", "/connectors/x/topics", None) == (200, {"x": {"topics": ["t"]}})
        expanded = api.handle("GET", "/connectors?expand=status&expand=info", None)[1]
        assert expanded["x"]["status"]["connector"]["state"] == "RUNNING" and expanded["x"]["info"]["name"] == "x"
        status, body = api.handle("POST", "/connectors/x/restart?includeTasks=true&onlyFailed=false", None)
        assert status == 202 and {t["state"] for t in body["tasks"]} == {"RESTARTING"}
        assert api.handle("POST", "/connectors/x/restart", None) == (204, None)
        assert api.handle("PATCH", "/connectors/x/offsets", {"offsets": []})[0] == 400
        # The validate endpoint answers 200 and counts errors, attributing each to its key.
        status, body = api.handle("PUT", f"/connector-plugins/{PLUGIN}/config/validate", {"topics": "t"})
        assert status == 200 and body["error_count"] == 1
        assert [c["value"]["errors"] for c in body["configs"] if c["value"]["name"] == "iceberg.tables"][0]
        assert api.handle("PUT", "/connector-plugins/Foo/config/validate", {})[0] == 404
        assert api.handle("DELETE", "/connectors/x", None) == (204, None)
        assert api.handle("GET", "/connectors", None) == (200, [])
    finally:
        herder.close()
    status, body = api.handle("GET", "/health", None)
    assert status == 503 and body["status"] == "starting"  # a closed worker serves no requests


def test_an_answer_that_cannot_be_sent_is_a_500_not_a_dropped_connection() -> None:
    class Unsendable:
        def handle(self, method: str, path: str, body: object) -> tuple[int, object]:
            return 200, {"table": object()}

    server = ConnectServer(Unsendable(), port=0).start()  # type: ignore[arg-type]
    try:
        answer = requests.get(f"{server.url}/connectors", timeout=10)
    finally:
        server.close()
    assert answer.status_code == 500 and "TypeError" in answer.json()["message"]


def test_basic_authentication_and_secrets_as_shown(tmp_path: Path) -> None:
    """A secure stack's Connect server asks for its login (401 otherwise, as Kafka Connect's basic-auth
    extension answers), and shows a literal secret as [hidden] and a reference as written, never resolved;
    ``connect diff`` takes a hidden literal as no change."""
    FakeSink.built = []
    herder = Herder(FakeSink, ConnectorStore(tmp_path), FakeOffsets(), "127.0.0.1:8083")
    herder.start()
    server = ConnectServer(ConnectApi(herder), port=0, basic_auth=("admin", "pw-81723")).start()
    secret_ref = "${file:/secrets/kafka.properties:password}"
    config = connector_config(**{"consumer.override.sasl.password": "literal-secret-4471",
                                 "consumer.override.ssl.key.password": secret_ref,
                                 "consumer.override.sasl.username": "sink"})
    try:
        for auth in (None, ("admin", "wrong"), ("someone", "pw-81723")):
            refused = requests.get(f"{server.url}/connectors", timeout=10, auth=auth)
            assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Basic")
        login = ("admin", "pw-81723")
        assert requests.put(f"{server.url}/connectors/a/config", json=config, timeout=10, auth=login).ok
        settle(herder)
        for answer in (requests.get(f"{server.url}/connectors/a/config", timeout=10, auth=login).json(),
                       requests.get(f"{server.url}/connectors/a", timeout=10, auth=login).json()["config"],
                       requests.get(f"{server.url}/connectors?expand=info", timeout=10,
                                    auth=login).json()["a"]["info"]["config"]):
            assert answer["consumer.override.sasl.password"] == "[hidden]"
            assert answer["consumer.override.ssl.key.password"] == secret_ref
            assert answer["consumer.override.sasl.username"] == "sink"
        assert FakeSink.built[-1].config.kafka_properties["sasl.password"] == "literal-secret-4471"  # kept, used
    finally:
        server.close()
        herder.close()
    folder = tmp_path / "connectors"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps({"name": "a", "config": config}))
    desired = read_folder(folder)
    shown = {**desired["a"][0], "consumer.override.sasl.password": "[hidden]"}
    assert plan(desired, {"a": shown})[0].action == "unchanged"


def test_apply_plan_from_a_folder(tmp_path: Path) -> None:
    (tmp_path / "pizzas_on_ice.json").write_text(json.dumps(connector_config("pizzas")))  # flat: named by its file
    (tmp_path / "pay.json").write_text(json.dumps({"name": "payments", "config": connector_config("payments")}))
    desired = read_folder(tmp_path)
    assert sorted(desired) == ["payments", "pizzas-on-ice"]
    # Compared as Connect stores configs: strings, with the name.
    assert desired["payments"][0]["iceberg.control.commit.interval-ms"] == "500"
    current = {"pizzas-on-ice": {**desired["pizzas-on-ice"][0]},
               "payments": {**desired["payments"][0], "tasks.max": "1"}, "old": {"name": "old"}}
    changes = {c.name: c for c in plan(desired, current)}
    assert changes["pizzas-on-ice"].action == "unchanged" and not changes["pizzas-on-ice"].changes
    assert changes["payments"].action == "update" and changes["payments"].keys == [("tasks.max", "1", "2")]
    assert changes["old"].action == "keep" and not changes["old"].changes
    assert {c.name: c.action for c in plan(desired, {}, prune=True)} == {"payments": "create",
                                                                          "pizzas-on-ice": "create"}
    assert plan(desired, current, prune=True)[-1].action == "delete"
    (tmp_path / "bad.json").write_text(json.dumps({"name": "bad", "config": {"connector.class": PLUGIN}}))
    with pytest.raises(ApplyError, match="bad.json: topics"):
        read_folder(tmp_path)


# ---------------------------------------------------------------- integration: the real server, curl, jq

@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The module's own embedded stack, with its Connect server (a process of its own)."""
    with Stack.embedded(tmp_path_factory.mktemp("connect-stack")) as s:
        yield s


@pytest.fixture(scope="module")
def url(stack: Stack) -> str:
    assert stack.info.connect_url and "connect" in stack.info.pids
    return stack.info.connect_url


def curl(*args: str, cwd: Path | None = None) -> str:
    result = subprocess.run(["curl", "-sS", *args], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


def status(url: str, name: str) -> dict[str, Any]:
    return requests.get(f"{url}/connectors/{name}/status", timeout=10).json()


def wait_state(url: str, name: str, state: str, timeout: float = 60) -> dict[str, Any]:
    return wait_for(lambda: (s := status(url, name)).get("connector", {}).get("state") == state and s, timeout,
                    f"{name} to be {state} (last: {status(url, name)})")


def rows(stack: Stack, table: str, column: str) -> list[str]:
    try:
        t = stack.catalog.load_table(tuple(table.split(".")))
    except Exception:  # noqa: BLE001 - not created yet
        return []
    return t.scan(selected_fields=(column,)).to_arrow().column(column).to_pylist() if t.current_snapshot() else []


def snapshots(stack: Stack, table: str) -> int:
    return len(stack.catalog.load_table(tuple(table.split("."))).metadata.snapshots)


def wait_rows(stack: Stack, table: str, column: str, expected: list[str], timeout: float = 90) -> None:
    wait_for(lambda: len(rows(stack, table, column)) >= len(expected), timeout, f"{len(expected)} rows in {table}")
    assert sorted(rows(stack, table, column)) == sorted(expected)  # every one, exactly once


def group_offsets(stack: Stack, group: str) -> dict[tuple[str, int], int]:
    """Straight from the broker, not through the server."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(stack.kafka_config(**{"group.id": group}))
    try:
        parts = consumer.list_topics("completed-pizzas", timeout=10).topics["completed-pizzas"].partitions
        committed = consumer.committed([TopicPartition("completed-pizzas", p) for p in parts], timeout=10)
        return {(tp.topic, tp.partition): tp.offset for tp in committed if tp.offset >= 0}
    finally:
        consumer.close()


ORDERS: list[str] = []


@pytest.mark.spark
def test_seed_curl_commands(stack: Stack, url: str, tmp_path: Path) -> None:
    """The issue's "done when": the seed's two commands, unchanged but for host and port."""
    stack.create_topic("completed-pizzas", partitions=6)
    ORDERS.extend(produce(stack, "completed-pizzas", 300, seed=1))
    shutil.copy(SEED_CONFIG, tmp_path / "pizzas_on_ice.json")
    put = subprocess.run(
        f'curl -X PUT {url}/connectors/pizzas-on-ice/config -i -H "Content-Type: application/json" '
        "-d @pizzas_on_ice.json", shell=True, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert put.returncode == 0 and put.stdout.startswith("HTTP/1.1 201 Created"), put.stdout + put.stderr
    created = json.loads(put.stdout.split("\n\n", 1)[1])  # text mode: CRLF read as LF
    assert created["name"] == "pizzas-on-ice" and created["config"]["topics"] == "completed-pizzas"
    # The seed pipes the status to jq; where jq is not installed, the same JSON unformatted.
    jq = " | jq" if shutil.which("jq") else ""
    shown = subprocess.run(f"curl -s {url}/connectors/pizzas-on-ice/status{jq}", shell=True, capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0 and shown.stdout.startswith("{\n  \"name\": \"pizzas-on-ice\"" if jq else "{")
    state = json.loads(shown.stdout)
    worker = url.removeprefix("http://")
    assert state["type"] == "sink" and state["connector"] == {"state": "RUNNING", "worker_id": worker}
    assert state["tasks"] == [{"id": i, "state": "RUNNING", "worker_id": worker} for i in range(6)]  # tasks.max
    wait_rows(stack, "rpc.pizzas", "order_id", ORDERS)
    assert status(url, "pizzas-on-ice")["connector"]["state"] == "RUNNING"
    assert json.loads(curl(f"{url}/connectors/pizzas-on-ice/topics")) == {
        "pizzas-on-ice": {"topics": ["completed-pizzas"]}}


@pytest.mark.spark
def test_update_pause_resume_exactly_once(stack: Stack, url: str) -> None:
    # The seed commits every 180 s; an update (200) restarts the sink on a 500 ms interval.
    config = json.loads(curl(f"{url}/connectors/pizzas-on-ice/config"))
    config["iceberg.control.commit.interval-ms"] = "500"
    put = curl("-X", "PUT", f"{url}/connectors/pizzas-on-ice/config", "-o", "/dev/null", "-w", "%{http_code}",
               "-H", "Content-Type: application/json", "-d", json.dumps(config))
    assert put == "200"
    more = produce(stack, "completed-pizzas", 100, seed=2)
    ORDERS.extend(more)
    wait_rows(stack, "rpc.pizzas", "order_id", ORDERS, timeout=60)  # long before 180 s: the new config runs

    assert curl("-X", "PUT", f"{url}/connectors/pizzas-on-ice/pause", "-o", "/dev/null", "-w", "%{http_code}") \
        == "202"
    paused = wait_state(url, "pizzas-on-ice", "PAUSED")
    assert {t["state"] for t in paused["tasks"]} == {"PAUSED"}
    before = snapshots(stack, "rpc.pizzas")
    held = produce(stack, "completed-pizzas", 100, seed=3)
    time.sleep(3)  # six commit intervals
    assert snapshots(stack, "rpc.pizzas") == before and len(rows(stack, "rpc.pizzas", "order_id")) == len(ORDERS)

    assert curl("-X", "PUT", f"{url}/connectors/pizzas-on-ice/resume", "-o", "/dev/null", "-w", "%{http_code}") \
        == "202"
    wait_state(url, "pizzas-on-ice", "RUNNING")
    ORDERS.extend(held)
    wait_rows(stack, "rpc.pizzas", "order_id", ORDERS)
    assert snapshots(stack, "rpc.pizzas") > before


@pytest.mark.spark
def test_failure_trace_restart_and_fix(stack: Stack, url: str, tmp_path: Path) -> None:
    config = {"connector.class": "org.apache.iceberg.connect.IcebergSinkConnector", "topics": "late",
              "iceberg.tables": "late.events", "iceberg.tables.auto-create-enabled": "true",
              "iceberg.control.commit.interval-ms": "500", "value.converter.schemas.enable": "false"}
    assert requests.put(f"{url}/connectors/late/config", json=config, timeout=10).status_code == 201
    failed = wait_state(url, "late", "FAILED")
    assert "late" in failed["connector"]["trace"] and "not found" in failed["tasks"][0]["trace"]

    # The topic appears with a bad record; a restart runs again and now stops at that record.
    stack.create_topic("late")
    produce_json(stack.bootstrap_servers, "late", [{"id": "1"}, [1, 2], {"id": "2"}])
    restart = requests.post(f"{url}/connectors/late/restart?includeTasks=true&onlyFailed=true", timeout=10)
    assert restart.status_code == 202 and restart.json()["connector"]["state"] == "RESTARTING"
    trace = wait_for(lambda: "late[0]@1" in (t := status(url, "late")["connector"].get("trace") or "") and t, 60,
                     "the restarted connector to stop at the bad record (topic late, partition 0, offset 1)")
    assert "RecordError" in trace and "not-an-object" in trace

    # The fix is a config update: dead-letter bad records, to a topic and a table. The good ones land.
    config.update({"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "late-dlq",
                   "errors.deadletterqueue.table.name": "late.dead_letters"})
    assert requests.put(f"{url}/connectors/late/config", json=config, timeout=10).status_code == 200
    wait_rows(stack, "late.events", "id", ["1", "2"])
    assert status(url, "late")["connector"]["state"] == "RUNNING"
    # Published in the same cycle as the rows, after them: a moment later, maybe.
    wait_for(lambda: rows(stack, "late.dead_letters", "source_offset") == [1], 30, "the dead letter")
    [letter] = stack.catalog.load_table(("late", "dead_letters")).scan().to_arrow().to_pylist()
    assert (letter["source_topic"], letter["error_class"], letter["sink"]) == ("late", "not-an-object", "late")
    report = run_cli("sink", "status", "late", "--stack", str(stack.write(tmp_path / "stack.json")))
    assert "late.dead_letters@main" in report.stdout and "dead letters: 1 wait for replay" in report.stdout


@pytest.mark.spark
def test_offsets_are_the_consumer_groups(stack: Stack, url: str) -> None:
    name = "pizzas-on-ice"
    shown = json.loads(curl(f"{url}/connectors/{name}/offsets"))["offsets"]
    group = group_offsets(stack, f"connect-{name}")
    assert {(o["partition"]["kafka_topic"], o["partition"]["kafka_partition"]): o["offset"]["kafka_offset"]
            for o in shown} == group
    assert sum(group.values()) == len(ORDERS)  # one record per offset: everything committed

    patch = {"offsets": [{"partition": {"kafka_topic": "completed-pizzas", "kafka_partition": 0},
                          "offset": {"kafka_offset": 0}}]}
    refused = requests.patch(f"{url}/connectors/{name}/offsets", json=patch, timeout=10)
    assert refused.status_code == 400 and "STOPPED" in refused.json()["message"]

    stopped = requests.put(f"{url}/connectors/{name}/stop", timeout=10)
    assert stopped.status_code == 204
    assert wait_state(url, name, "STOPPED")["tasks"] == []
    altered = requests.patch(f"{url}/connectors/{name}/offsets", json=patch, timeout=10)
    assert altered.status_code == 200, altered.text
    assert group_offsets(stack, f"connect-{name}")[("completed-pizzas", 0)] == 0
    # Moved back, partition 0 is read again on resume: the table drops what it already holds.
    requests.put(f"{url}/connectors/{name}/resume", timeout=10)
    wait_for(lambda: group_offsets(stack, f"connect-{name}").get(("completed-pizzas", 0), 0) > 0, 60,
             "partition 0 to be read again")
    assert sorted(rows(stack, "rpc.pizzas", "order_id")) == sorted(ORDERS)

    requests.put(f"{url}/connectors/{name}/stop", timeout=10)
    wait_state(url, name, "STOPPED")
    reset = requests.delete(f"{url}/connectors/{name}/offsets", timeout=10)
    assert reset.status_code == 200 and json.loads(curl(f"{url}/connectors/{name}/offsets")) == {"offsets": []}
    assert group_offsets(stack, f"connect-{name}") == {}
    requests.put(f"{url}/connectors/{name}/resume", timeout=10)
    # Without group offsets the sink resumes from what the table recorded: nothing twice, and its
    # next commit writes the group's offsets again.
    ORDERS.extend(produce(stack, "completed-pizzas", 20, seed=8))
    wait_for(lambda: sum(group_offsets(stack, f"connect-{name}").values()) == len(ORDERS), 60, "offsets again")
    assert sorted(rows(stack, "rpc.pizzas", "order_id")) == sorted(ORDERS)


@pytest.mark.spark
def test_apply_diff_several_connectors_delete(stack: Stack, url: str, tmp_path: Path) -> None:
    stack_file = stack.write(tmp_path / "stack.json")
    folder = tmp_path / "connectors"
    folder.mkdir()
    pizzas = json.loads(curl(f"{url}/connectors/pizzas-on-ice/config"))
    (folder / "pizzas_on_ice.json").write_text(json.dumps({k: v for k, v in pizzas.items() if k != "name"}))
    payments = {"name": "payments", "config": {
        "connector.class": PLUGIN, "topics": "payments", "iceberg.tables": "rpc.payments", "iceberg.catalog": "demo",
        "iceberg.tables.auto-create-enabled": "true", "iceberg.control.commit.interval-ms": 500,
        "value.converter.schemas.enable": False}}
    (folder / "payments.json").write_text(json.dumps(payments))
    stack.create_topic("payments", partitions=2)
    paid = [e["id"] for e in PaymentGenerator(seed=5).events(200)]
    produce_json(stack.bootstrap_servers, "payments", PaymentGenerator(seed=5).events(200), key_field="id")

    diff = run_cli("connect", "diff", str(folder), "--stack", str(stack_file))
    assert diff.returncode == EXIT_CHANGES, diff.stderr
    assert "+ payments" in diff.stdout and "= pizzas-on-ice" in diff.stdout and "  late" in diff.stdout
    applied = run_cli("connect", "apply", str(folder), "--url", url)
    assert applied.returncode == 0, applied.stderr
    assert "created    payments" in applied.stdout and "unchanged  pizzas-on-ice" in applied.stdout
    assert "kept       late" in applied.stdout
    assert run_cli("connect", "diff", str(folder), "--url", url).returncode == 0

    # Both sinks run at once in the server's one Spark.
    wait_rows(stack, "rpc.payments", "id", paid)
    more = produce(stack, "completed-pizzas", 50, seed=4)
    ORDERS.extend(more)
    wait_rows(stack, "rpc.pizzas", "order_id", ORDERS)
    listed = json.loads(curl(f"{url}/connectors?expand=status"))
    assert {n: s["status"]["connector"]["state"] for n, s in listed.items()} == {
        "late": "RUNNING", "payments": "RUNNING", "pizzas-on-ice": "RUNNING"}

    payments["config"]["iceberg.control.commit.interval-ms"] = 1000
    (folder / "payments.json").write_text(json.dumps(payments))
    changed = run_cli("connect", "diff", str(folder), "--url", url, "--prune")
    assert changed.returncode == EXIT_CHANGES
    assert "~ iceberg.control.commit.interval-ms: '500' -> '1000'" in changed.stdout
    assert "- late" in changed.stdout
    pruned = run_cli("connect", "apply", str(folder), "--url", url, "--prune")
    assert pruned.returncode == 0 and "deleted    late" in pruned.stdout and "updated    payments" in pruned.stdout
    assert requests.get(f"{url}/connectors/late", timeout=10).json() == {
        "error_code": 404, "message": "Connector late not found"}

    # DELETE stops the sink: new payments stay in Kafka.
    assert curl("-X", "DELETE", f"{url}/connectors/payments", "-o", "/dev/null", "-w", "%{http_code}") == "204"
    before = snapshots(stack, "rpc.payments")
    produce_json(stack.bootstrap_servers, "payments", PaymentGenerator(seed=6).events(20), key_field="id")
    time.sleep(3)
    assert snapshots(stack, "rpc.payments") == before and len(rows(stack, "rpc.payments", "id")) == len(paid)


@pytest.mark.spark
def test_connectors_survive_a_server_restart(stack: Stack, url: str) -> None:
    # KIP-980: created PAUSED, it never runs a cycle.
    assert requests.post(f"{url}/connectors", json={"name": "late", "initial_state": "PAUSED", "config": {
        "connector.class": PLUGIN, "topics": "late", "iceberg.tables": "late.other",
        "iceberg.tables.auto-create-enabled": "true", "value.converter.schemas.enable": "false"}},
        timeout=10).status_code == 201
    wait_state(url, "late", "PAUSED")
    before = requests.get(f"{url}/connectors?expand=info", timeout=10).json()

    # The harder restart: a crash. Pizzas arrive just before (the sink, committing every 500 ms, may
    # be mid-cycle) and while the server is down. (`stack down`'s SIGTERM is every teardown's stop.)
    old_pid = stack.info.pids["connect"]
    held = produce(stack, "completed-pizzas", 100, seed=9)
    os.killpg(old_pid, signal.SIGKILL)  # the server and its Spark JVM
    assert stack.connect_server is not None
    stack.connect_server.stop()  # reaps it
    held += produce(stack, "completed-pizzas", 100, seed=10)
    # The production path: `stack up` on the workdir starts the missing process on its old port.
    again = Stack.embedded(stack.workdir, resume=stack.info)
    try:
        assert again.info.connect_url == url and again.info.pids["connect"] != old_pid
        assert again.info.pids["broker"] == stack.info.pids["broker"]  # the rest kept running
        assert requests.get(f"{url}/connectors?expand=info", timeout=10).json() == before
        assert status(url, "late")["connector"]["state"] == "PAUSED"
        wait_state(url, "pizzas-on-ice", "RUNNING")
        ORDERS.extend(held)
        wait_rows(stack, "rpc.pizzas", "order_id", ORDERS)  # resumed from the committed offsets, exactly once
        assert not stack.catalog.table_exists(("late", "other"))  # PAUSED all along
    finally:
        again.close()


def test_cli_serves_a_stack_and_one_server_per_state_dir(stack: Stack, tmp_path: Path) -> None:
    """`sinklab connect --stack` against a running stack; a second server on the same state is refused."""
    from sinklab.stack.process import free_port

    stack_file = stack.write(tmp_path / "stack.json")
    state = tmp_path / "state"
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sinklab.cli", "connect", "--stack", str(stack_file), "--port",
                             str(port), "--state-dir", str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: _answers(f"http://127.0.0.1:{port}/"), 30, "sinklab connect to answer")
        assert requests.get(f"http://127.0.0.1:{port}/connectors", timeout=5).json() == []
        clash = run_cli("connect", "--stack", str(stack_file), "--port", str(free_port()), "--state-dir", str(state))
        assert clash.returncode == 1 and "another Connect server" in clash.stderr
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        assert proc.returncode == 0  # a clean stop on SIGTERM
    finally:
        if proc.poll() is None:
            stop_leader_first(proc.pid, grace=10)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False

