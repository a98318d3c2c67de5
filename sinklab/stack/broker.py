"""The embedded broker: Apache Kafka in KRaft mode, one combined broker+controller node, on loopback.

Its data, metadata and log live in ``<workdir>/broker``; a broker started again on the same workdir
(``sinklab stack up``) keeps topics, records and committed offsets, and takes its old ports back when
they are free, so that running clients reconnect to it.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path

from sinklab.stack import jars
from sinklab.stack.process import LOOPBACK, ManagedProcess, ProcessError, free_port

# Single-node settings: one replica of every internal topic, and few partitions so that the
# first consumer group or transaction does not wait for 50 internal partitions to be created.
SINGLE_NODE = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
}
# Small heap: the embedded broker holds a workshop's data, not a cluster's.
JVM_OPTS = ["-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true"]
# Warnings to the console (the process's log file), for sinklab's JVM processes; each adds its own loggers.
LOG4J2_CONSOLE = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
"""
LOG4J2 = LOG4J2_CONSOLE + """logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
"""


def broker_ready(bootstrap: str) -> bool:
    """Ready means a real metadata request is answered, not merely that the port is open."""
    from confluent_kafka.admin import AdminClient

    # log_level 0: a probe of a broker that is still starting would log every refused connection.
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
    metadata = admin.list_topics(timeout=2)
    return bool(metadata.brokers)


def _cluster_id() -> str:
    # Kafka's Uuid text form: URL-safe base64 of 16 random bytes, unpadded.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class EmbeddedBroker:
    """``kafka.Kafka`` as a managed JVM; the storage is formatted once, the first time."""

    def __init__(self, workdir: Path, port: int | None = None, controller_port: int | None = None):
        self.workdir = workdir
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.home = workdir / "broker"
        self.data_dir = self.home / "data"
        self.config_path = self.home / "server.properties"
        self.process = ManagedProcess("broker (Apache Kafka)", [], workdir / "logs" / "broker.log")

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def properties(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{LOOPBACK}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{LOOPBACK}:{self.port},CONTROLLER://{LOOPBACK}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **SINGLE_NODE,
        }

    def start(self, timeout: float = 90) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (self.home / "log4j2.properties").write_text(LOG4J2)
        classpath = jars.classpath(jars.KAFKA)
        if not (self.data_dir / "meta.properties").exists():
            self._format(classpath)
        self.process.argv = [jars.java(), *JVM_OPTS, f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
                             "-cp", classpath, "kafka.Kafka", str(self.config_path)]
        self.process.start()
        self.process.wait_ready(lambda: broker_ready(self.bootstrap_servers), timeout)

    def _format(self, classpath: str) -> None:
        argv = [jars.java(), f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}", "-cp", classpath,
                "kafka.tools.StorageTool", "format", f"--cluster-id={_cluster_id()}", "-c", str(self.config_path),
                "--ignore-formatted"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise ProcessError(f"formatting the broker's storage in {self.data_dir} failed:\n"
                               f"{proc.stdout}{proc.stderr}")

    def stop(self) -> None:
        # A clean shutdown flushes and writes its checkpoints; a SIGKILL after the timeout only
        # costs a log recovery at the next start.
        self.process.stop(timeout=20)
