"""The fault matrix: one sink in its own process, on one shared stack of three Kafka brokers and an S3
warehouse, with the REST catalog and the S3 server behind a fault injector (tests/faults.py). Each case
streams pizzas at a steady rate into a topic of its own, which the sink's `topics.regex` picks up, and
injects one fault; then it stops its stream and checks that the sink carried on by itself (its process
never exited, it committed again) and that every record of its stream is in both tables exactly once.
Maintenance runs between the sink's cycles throughout. The one sink process lives through every case,
as a sink does through the faults of its cluster (and the suite saves a process start per case); when
the module ends, no record is in a table twice.

Each case prints one line: what the sink did (cycles it retried), how long after the fault it
committed again, duplicates and lost records (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from faults import FaultProxy, Request, injected, kill, leader, publishes, writes
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import StartsWith

from sinklab.generators import pizza_events
from sinklab.sink import read_control_log
from sinklab.stack import Stack
from sinklab.stack.process import pid_alive, stop_pid

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("faults")]  # one three-broker stack, one sink

RATE = 200  # events per second, in batches every 0.2 s
TABLES = ["faults.a", "faults.b"]
CONTROL_TOPIC = "control-faults"
SINK = "sink-faults"


@dataclass
class Matrix:
    stack: Stack
    catalog: FaultProxy
    s3: FaultProxy
    stack_file: Path
    killed_at: float = 0.0

    def kill(self, name: str) -> None:
        self.killed_at = kill(self.stack, name)

    def leader(self, topic: str, partition: int = 0) -> str:
        return leader(self.stack, topic, partition)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    workdir = tmp_path_factory.mktemp("faults")
    with Stack.embedded(workdir / "stack", brokers=3, storage="s3", connect=False) as stack, \
            injected(stack, workdir / "sink-stack.json") as (catalog, s3):
        yield Matrix(stack, catalog, s3, workdir / "sink-stack.json")


@dataclass
class Sink:
    """The matrix's one sink process: every topic named ``faults-*`` into both tables."""

    matrix: Matrix
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.log = self.workdir / "sink.log"
        self.config = self.workdir / "sink.json"
        self.config.write_text(json.dumps({"name": SINK, "config": {
            "topics.regex": "faults-.*", "iceberg.tables": ",".join(TABLES), "iceberg.catalog": "sinklab",
            "iceberg.tables.auto-create-enabled": "true", "iceberg.control.commit.interval-ms": "1000",
            "iceberg.control.commit.timeout-ms": "30000", "value.converter.schemas.enable": "false",
            "iceberg.control.topic": CONTROL_TOPIC,
            "sinklab.maintenance.compact.every-commits": "5", "sinklab.maintenance.expire.older-than": "1m"}}))

    def running(self) -> Sink:
        """This sink, started again if a case before left it dead (that case failed saying so)."""
        if self.proc is None or self.proc.poll() is not None:
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "sinklab.cli", "sink", "run", "--config", str(self.config), "--stack",
                     str(self.matrix.stack_file)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def alive(self) -> None:
        assert self.proc is not None
        assert self.proc.poll() is None, f"the sink exited ({self.proc.returncode}):\n{self.tail()}"

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def stacks(self) -> str:
        """Where a stalled sink waits: its Python threads (``sink run`` dumps them on SIGUSR1) and the
        busy threads of its Spark JVM (jstack)."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            return ""
        os.kill(self.proc.pid, signal.SIGUSR1)
        time.sleep(1)
        python = self.text().split("Thread 0x")
        out = ["Python threads:", *("Thread 0x" + t.strip()[:2500] for t in python[-12:])]
        for pid in children(self.proc.pid):
            try:
                dump = subprocess.run(["jstack", str(pid)], capture_output=True, text=True, timeout=30).stdout
            except (OSError, subprocess.TimeoutExpired) as exc:
                out.append(f"jstack {pid}: {exc}")
                continue
            (self.workdir / f"jstack-{pid}.txt").write_text(dump)
            out.append(f"JVM {pid}, threads in sinklab's, Kafka's or Iceberg's code:")
            out += [t[:3000] for t in dump.split("\n\n") if re.search(r"kafka|iceberg|py4j\.Gateway", t)]
        return "\n".join(out)

    def commits(self) -> list[float]:
        """When each of the sink's cycles committed (epoch s), from its control log."""
        log = read_control_log(self.matrix.stack.bootstrap_servers, CONTROL_TOPIC, sink=SINK)
        done = log[log["type"] == "commit-complete"] if not log.empty else log
        return sorted(ts.timestamp() for ts in done["ts"]) if not done.empty else []

    def rows(self, table: str, prefix: str = "") -> list[str]:
        try:
            table_ = self.matrix.stack.catalog.load_table(tuple(table.split(".")))
        except NoSuchTableError:  # the first case's first cycle creates them
            return []
        scan = table_.scan(row_filter=StartsWith("order_id", prefix), selected_fields=("order_id",)) if prefix \
            else table_.scan(selected_fields=("order_id",))
        return scan.to_arrow().column("order_id").to_pylist()

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid, timeout=60)


@pytest.fixture(scope="module")
def sink(matrix: Matrix, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sink]:
    one = Sink(matrix, tmp_path_factory.mktemp("sink"))
    yield one
    alive = one.proc is not None and one.proc.poll() is None
    one.stop()
    if alive:  # a record written twice after its case had checked shows here, named by its case's prefix
        for table in TABLES:
            twice = [k for k, n in Counter(one.rows(table)).items() if n > 1]
            assert not twice, f"{table}: {len(twice)} records written twice, e.g. {twice[:3]}"


@dataclass
class Run:
    """One case's stream of pizzas, into a topic of its own, that the matrix's sink carries."""

    sink: Sink
    name: str
    acked: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.topic = f"faults-{self.name}"
        self.prefix = f"{self.name}/"
        self.tables = TABLES
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, daemon=True)
        self._log_from = 0

    def start(self) -> Run:
        self.sink.matrix.stack.create_topic(self.topic, partitions=3)
        self._log_from = len(self.sink.text())
        self._thread.start()
        self.sink.running()
        # The sink picked the topic up and committed its first records: the fault may come.
        deadline = time.monotonic() + 120
        while not self.rows(self.tables[0]):
            self.sink.alive()
            assert time.monotonic() < deadline, f"no record of {self.topic} landed in 120s:\n{self.sink.tail()}"
            time.sleep(1)
        return self

    def _produce(self) -> None:
        producer = Producer({**self.sink.matrix.stack.kafka_config(), "enable.idempotence": True, "acks": "all",
                             "linger.ms": 20})
        seed = 0

        def acked(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.append(json.loads(msg.value())["order_id"])

        while not self._stop.is_set():
            for event in pizza_events(RATE // 5, seed=seed):
                event["order_id"] = self.prefix + event["order_id"]  # this case's records, among every case's
                producer.produce(self.topic, json.dumps(event, default=str).encode(), event["order_id"].encode(),
                                 on_delivery=acked)
            seed += 1
            producer.poll(0)
            self._stop.wait(0.2)
        assert producer.flush(120) == 0, "records the cluster never acknowledged"

    def wait_commits(self, count: int, timeout: float, after: float = 0.0) -> float:
        """Until ``count`` cycles committed after ``after`` (epoch s); returns when the first of them did."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sink.alive()
            try:
                later = [t for t in self.sink.commits() if t > after]
            except KafkaException:  # this reader met the broker that just died; the next read will not
                time.sleep(1)
                continue
            if len(later) >= count:
                return later[0]
            time.sleep(1)
        raise AssertionError(f"the sink committed fewer than {count} cycles in {timeout:.0f}s; log:\n"
                             f"{self.sink.tail()}\n{self.sink.stacks()}")

    def retries(self) -> int:
        return len(re.findall(r"cycle failed .* trying again", self.sink.text()[self._log_from:]))

    def rows(self, table: str) -> list[str]:
        return self.sink.rows(table, self.prefix)

    def finish(self, fault: str, ended: float, timeout: float = 180) -> None:
        """Stop the stream, let the sink drain it, check both tables, print the case's line (``ended``:
        when the fault was over, epoch s)."""
        recovered = self.wait_commits(1, timeout=timeout, after=ended) - ended
        self._stop.set()
        self._thread.join(150)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sink.alive()
            if all(len(self.rows(t)) >= len(self.acked) for t in self.tables):
                break
            time.sleep(1)
        else:
            print(f"the sink did not drain the stream in {timeout:.0f}s:\n{self.sink.stacks()}")
        retries = self.retries()
        for table in self.tables:
            got = self.rows(table)
            duplicates = len(got) - len(set(got))
            lost = len(set(self.acked) - set(got))
            assert duplicates == 0 and lost == 0, (f"{fault}: {table} has {duplicates} duplicates, {lost} lost of "
                                                   f"{len(self.acked)}; sink log:\n{self.sink.tail()}")
            assert set(got) == set(self.acked)
        print(f"\nFAULT {fault}: {len(self.acked)} records, {retries} cycles retried, committed again "
              f"{recovered:.1f} s after the fault ended, 0 duplicates, 0 lost")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)


@pytest.fixture()
def run(matrix: Matrix, sink: Sink, unique: str) -> Iterator[Callable[[], Run]]:
    runs: list[Run] = []

    def make() -> Run:
        runs.append(Run(sink, unique).start())
        return runs[-1]

    yield make
    for r in runs:
        r.stop()
    matrix.catalog.clear()
    matrix.s3.clear()
    if matrix.catalog._listener is None:
        matrix.catalog.up()
    if matrix.s3._listener is None:
        matrix.s3.up()
    matrix.stack.revive()


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (a sink's Spark JVM)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def loads_of(table: str) -> Callable[[Request], bool]:
    namespace, name = table.split(".")
    return lambda r: r.method == "GET" and r.path.split("?")[0].endswith(f"/namespaces/{namespace}/tables/{name}")


# ---- Kafka: a node of the three dies


def test_source_partition_leader_killed_mid_cycle(matrix: Matrix, run: Callable[[], Run]) -> None:
    sink = run()
    leader = matrix.leader(sink.topic)
    began = time.time()
    # A cycle loads its tables before it reads: the leader dies as the cycle starts reading from it.
    matrix.catalog.on_request(loads_of(sink.tables[0]), lambda _: matrix.kill(leader))
    sink.wait_commits(3, timeout=120, after=began)
    assert not pid_alive(matrix.stack.info.pids[leader])  # no restart: the others carry the partition
    sink.finish(f"leader of {sink.topic}[0] ({leader}) SIGKILLed mid-cycle", matrix.killed_at)


def test_transaction_coordinator_killed_between_commit_start_and_complete(
        matrix: Matrix, run: Callable[[], Run]) -> None:
    sink = run()
    # One __transaction_state partition: its leader is every transaction's coordinator.
    coordinator = matrix.leader("__transaction_state")
    began = time.time()
    matrix.catalog.on_request(publishes, lambda _: matrix.kill(coordinator))
    sink.wait_commits(3, timeout=120, after=began)
    assert not pid_alive(matrix.stack.info.pids[coordinator])
    sink.finish(f"transaction coordinator ({coordinator}) SIGKILLed while a cycle published", matrix.killed_at)


def test_broker_killed_and_back_30s_later(matrix: Matrix, run: Callable[[], Run]) -> None:
    sink = run()
    matrix.kill("broker-2")
    time.sleep(30)
    assert matrix.stack.revive() == ["broker-2"]
    sink.finish("broker-2 SIGKILLed, started again 30 s later", time.time())


# ---- the REST catalog


def test_catalog_killed_during_a_publish_then_restarted(matrix: Matrix, run: Callable[[], Run]) -> None:
    sink = run()
    died = threading.Event()
    matrix.catalog.on_request(publishes, lambda _: (matrix.kill("catalog"), died.set()))
    assert died.wait(60)
    time.sleep(5)
    assert matrix.stack.revive() == ["catalog"]
    sink.finish("catalog SIGKILLed during a publish, started again 5 s later", time.time())


def test_catalog_answer_to_a_publish_lost_after_it_landed(matrix: Matrix, run: Callable[[], Run]) -> None:
    sink = run()
    began = time.time()
    lost = matrix.catalog.swallow(publishes, times=1)
    sink.wait_commits(3, timeout=120, after=began)
    assert lost.hits == 1 and lost.last_hit is not None
    sink.finish("the catalog's answer to a publish lost", lost.last_hit)


def test_catalog_slow_for_a_minute(matrix: Matrix, run: Callable[[], Run]) -> None:
    sink = run()
    matrix.catalog.delay(5, seconds=60)
    time.sleep(60)
    sink.finish("every catalog answer 5 s late for 60 s", time.time())


def test_catalog_503_for_20s(matrix: Matrix, run: Callable[[], Run]) -> None:
    sink = run()
    refused = matrix.catalog.fail(503, seconds=20)
    time.sleep(20)
    assert refused.hits > 0
    sink.finish("the catalog answering 503 for 20 s", time.time())


# ---- the object store


def test_object_store_refusing_writes_for_20s(matrix: Matrix, run: Callable[[], Run]) -> None:
    sink = run()
    refused = matrix.s3.fail(503, seconds=20, match=writes)
    time.sleep(20)
    assert refused.hits > 0
    sink.finish("the object store answering 503 to writes for 20 s", time.time())


def test_object_store_down_then_back(matrix: Matrix, run: Callable[[], Run]) -> None:
    # moto keeps its objects in memory: a real kill would take the warehouse with it. Down here is
    # the store's address refusing connections and open ones reset, which is what the sink sees.
    sink = run()
    matrix.s3.down()
    time.sleep(10)
    matrix.s3.up()
    sink.finish("the object store refusing connections for 10 s", time.time())


def test_proxy_faults_do_what_they_say(matrix: Matrix, unique: str) -> None:
    """The injector itself, against the real catalog: 503, a late answer, a lost one, a refusal."""
    import requests

    url = f"http://{matrix.catalog.address}/v1/config"
    assert requests.get(url, timeout=10).status_code == 200
    matrix.catalog.fail(503, times=1)
    assert requests.get(url, timeout=10).status_code == 503
    matrix.catalog.delay(1.0, times=1)
    started = time.monotonic()
    assert requests.get(url, timeout=10).status_code == 200
    assert time.monotonic() - started >= 1.0
    matrix.catalog.drop(times=1)
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=10)
    # A swallowed request reached the server, which acted on it: only the answer was lost.
    matrix.catalog.swallow(lambda r: r.method == "POST", times=1)
    with pytest.raises(requests.ConnectionError):
        requests.post(f"http://{matrix.catalog.address}/v1/namespaces", json={"namespace": [unique]}, timeout=10)
    assert (unique,) in matrix.stack.catalog.list_namespaces()
    matrix.catalog.down()
    try:
        with pytest.raises(requests.ConnectionError):
            requests.get(url, timeout=10)
    finally:
        matrix.catalog.up()
    assert requests.get(url, timeout=10).status_code == 200


# ---- the sink's own host


def test_a_cycle_too_large_for_memory_fails_naming_the_setting(stack: Stack, stack_file: Path, tmp_path: Path,
                                                               unique: str) -> None:
    """Where Kafka Connect fails too (a task out of memory is not retried): the sink is FAILED, and the
    error says how to make a cycle fit; with that setting the same records land, exactly once."""
    stack.create_topic(unique, partitions=2)
    producer = Producer({**stack.kafka_config(), "linger.ms": 50})
    blob = "x" * 900_000  # each record near Kafka's 1 MB default: 600 of them fill a 512 MB driver
    for i in range(600):
        producer.produce(unique, json.dumps({"order_id": f"o{i}", "blob": blob}).encode())
        producer.poll(0)
    assert producer.flush(60) == 0
    config = {"topics": unique, "iceberg.tables": f"{unique}.big", "iceberg.catalog": "sinklab",
              "iceberg.tables.auto-create-enabled": "true", "value.converter.schemas.enable": "false",
              "iceberg.control.commit.interval-ms": "1000"}
    path = tmp_path / "sink.json"
    path.write_text(json.dumps({"name": f"sink-{unique}", "config": config}))
    small = ["--conf", "spark.driver.memory=512m"]
    failed = subprocess.run([sys.executable, "-m", "sinklab.cli", "sink", "run", "--config", str(path), "--stack",
                             str(stack_file), "--until-idle", "3", *small], capture_output=True, text=True, timeout=300)
    assert failed.returncode != 0
    error = failed.stderr.strip().splitlines()[-1]
    assert "CycleTooLarge" in error and "a cycle of 600 records did not fit" in error, failed.stderr[-3000:]
    assert "driver memory 512m" in error and "sinklab.cycle.max-records (now 5,000,000) lower" in error

    path.write_text(json.dumps({"name": f"sink-{unique}", "config": {**config, "sinklab.cycle.max-records": "100"}}))
    fits = subprocess.run([sys.executable, "-m", "sinklab.cli", "sink", "run", "--config", str(path), "--stack",
                           str(stack_file), "--until-idle", "3", *small], capture_output=True, text=True, timeout=300)
    assert fits.returncode == 0, fits.stderr[-3000:]
    table = stack.catalog.load_table((unique, "big"))
    ids = table.scan(selected_fields=("order_id",)).to_arrow().column("order_id").to_pylist()
    assert sorted(ids) == sorted(f"o{i}" for i in range(600))
