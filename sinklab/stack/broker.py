"""The embedded broker: Apache Kafka in KRaft mode, on loopback; one node, or a cluster of three.

Every node is a combined broker+controller: three nodes are three JVMs (not six) on a laptop, and
any one of them may die with the controller quorum (two of three) and every partition (replicated
three times, two in sync) still there. A production cluster would run its controllers apart.

A node's data, metadata and log live in ``<workdir>/broker`` (node 1) or ``<workdir>/broker-N``; a
node started again on the same workdir (``sinklab stack up``) keeps topics, records and committed
offsets, and takes its old ports back when they are free, so that running clients reconnect to it.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path

from sinklab.exceptions import ProcessError
from sinklab.security import resolve_all
from sinklab.stack import jars, tls
from sinklab.stack.process import LOOPBACK, ManagedProcess, free_port

# Single-node settings: one replica of every internal topic, and few partitions so that the
# first consumer group or transaction does not wait for 50 internal partitions to be created.
# A group's coordinator moving, or still loading its partition of __consumer_offsets (a broker just started
# or restarted): librdkafka does not retry group calls (committed offsets, describe) on these; callers do.
COORDINATOR_MOVING = frozenset({14, 15, 16})  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR

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
# Three nodes: everything the sink and the generators write is on every node and acknowledged by two
# (producers ask for acks=all), so a node can die without a record or an offset going with it.
REPLICATED = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
}
# Small heap: the embedded broker holds a workshop's data, not a cluster's. The serial collector and C1
# alone, as the catalog's and the registry's JVMs: half the CPU to start and to idle, and no slower at a
# million records (bench/README.md, "The embedded broker's JVM").
JVM_OPTS = ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
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


def broker_ready(bootstrap: str, settings: dict[str, str] | None = None) -> bool:
    """Ready means a real metadata request is answered, not merely that the port is open. ``settings``:
    the client's security settings (librdkafka's names), resolved."""
    from confluent_kafka.admin import AdminClient

    # log_level 0: a probe of a broker that is still starting would log every refused connection.
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0,
                         **(settings or {})})
    metadata = admin.list_topics(timeout=2)
    return bool(metadata.brokers)


def node_name(node_id: int) -> str:
    """The name of a node's directory, log, and entry in stack.json's pids and ports: node 1 is
    ``broker`` (as a one-node stack's only node always was), the others ``broker-N``."""
    return "broker" if node_id == 1 else f"broker-{node_id}"


def cluster(workdir: Path, nodes: int, ports: dict[str, int] | None = None, secure: bool = False
            ) -> list[EmbeddedBroker]:
    """The nodes of a stack's Kafka, on their old ports (``ports``, as stack.json records them) where
    given; one cluster id for all, read back from a node formatted before. ``secure``: one node that asks
    every client for a password over TLS (``EmbeddedBroker``)."""
    if secure and nodes != 1:
        raise ProcessError("a secure embedded stack runs one Kafka node, not three")
    ports = ports or {}
    names = [node_name(n) for n in range(1, nodes + 1)]
    listener = {n: ports.get(name) or free_port() for n, name in enumerate(names, 1)}
    controller = {n: ports.get(f"controller{name.removeprefix('broker')}") or free_port()
                  for n, name in enumerate(names, 1)}
    known = None
    for name in names:
        meta = workdir / name / "data" / "meta.properties"
        if meta.exists():
            known = next((line.split("=", 1)[1].strip() for line in meta.read_text().splitlines()
                          if line.startswith("cluster.id=")), None)
            break
    cluster_id = known or _cluster_id()
    return [EmbeddedBroker(workdir, listener[n], controller[n], node_id=n, voters=controller, cluster_id=cluster_id,
                           secure=secure) for n in range(1, nodes + 1)]


def _cluster_id() -> str:
    # Kafka's Uuid text form: URL-safe base64 of 16 random bytes, unpadded.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class EmbeddedBroker:
    """``kafka.Kafka`` as a managed JVM; the storage is formatted once, the first time.

    A node of a cluster knows every node's controller port (``voters``, node id -> port); ``start``
    waits until it answers, which a node of a cluster only does once a majority of them runs: start
    them all (``begin``), then wait for each (``wait_ready``).

    ``secure``: its one listener for clients is SASL_SSL (a certificate of the stack's CA, ``tls``): SCRAM-SHA-256
    logins for clients (``sinklab``, a super user, and ``guest``, granted nothing), created once it runs; PLAIN
    for the broker's own login (``admin``), which its controller listener (SASL_PLAINTEXT, loopback) takes too.
    ACLs are enforced (``StandardAuthorizer``). Its config names the passwords by reference (Kafka's
    ``FileConfigProvider``); ``client_settings`` says how a client reaches it."""

    def __init__(self, workdir: Path, port: int | None = None, controller_port: int | None = None,
                 node_id: int = 1, voters: dict[int, int] | None = None, cluster_id: str | None = None,
                 secure: bool = False):
        self.workdir = workdir
        self.node_id = node_id
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.voters = voters or {node_id: self.controller_port}
        self.cluster_id = cluster_id
        self.name = node_name(node_id)
        self.secure = secure
        self.home = workdir / self.name
        self.data_dir = self.home / "data"
        self.config_path = self.home / "server.properties"
        self.process = ManagedProcess(f"{self.name} (Apache Kafka)", [], workdir / "logs" / f"{self.name}.log")

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def client_settings(self, user: str = tls.KAFKA_USER) -> dict[str, str]:
        """How a client logs in as ``user`` (librdkafka's names; the password by reference); empty for an
        open broker."""
        if not self.secure:
            return {}
        return {"security.protocol": "SASL_SSL",
                "sasl.mechanisms": "PLAIN" if user == tls.KAFKA_ADMIN else "SCRAM-SHA-256",
                "sasl.username": user, "sasl.password": tls.reference(self.workdir, f"kafka.{user}"),
                "ssl.ca.location": str(self.workdir / tls.CA_FILE)}

    def properties(self) -> dict[str, str]:
        # Clients on one listener (SASL_SSL when secure, else PLAINTEXT), the controller on its own.
        client = "SASL_SSL" if self.secure else "PLAINTEXT"
        controller = "SASL_PLAINTEXT" if self.secure else "PLAINTEXT"
        return {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": ",".join(f"{n}@{LOOPBACK}:{p}" for n, p in sorted(self.voters.items())),
            "listeners": f"{client}://{LOOPBACK}:{self.port},CONTROLLER://{LOOPBACK}:{self.controller_port}",
            "advertised.listeners": f"{client}://{LOOPBACK}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": client,
            "listener.security.protocol.map": f"{client}:{client},CONTROLLER:{controller}",
            "log.dirs": str(self.data_dir),
            **(SINGLE_NODE if len(self.voters) == 1 else REPLICATED),
            **(self._security() if self.secure else {}),
        }

    def _security(self) -> dict[str, str]:
        """The secure node's logins, certificates and ACLs; its passwords by reference (a file only its
        owner reads), resolved by Kafka's FileConfigProvider."""
        ca, pem = tls.certificates(self.workdir)
        tls.passwords(self.workdir)
        secret = tls.reference(self.workdir, "kafka.admin")
        plain = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                 f'username="{tls.KAFKA_ADMIN}" password="{secret}" user_{tls.KAFKA_ADMIN}="{secret}";')
        return {
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": plain,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{tls.KAFKA_ADMIN};User:{tls.KAFKA_USER}",
            "allow.everyone.if.no.acl.found": "false",
            "config.providers": "file",
            "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
        }

    def start(self, timeout: float = 90) -> None:
        self.begin()
        self.wait_ready(timeout)

    def begin(self) -> None:
        """Start the process without waiting for it to answer."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (self.home / "log4j2.properties").write_text(LOG4J2)
        classpath = jars.classpath(jars.KAFKA)
        if not (self.data_dir / "meta.properties").exists():
            self._format(classpath)
        self.process.argv = [jars.java(), *JVM_OPTS, f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
                             "-cp", classpath, "kafka.Kafka", str(self.config_path)]
        self.process.start()

    def wait_ready(self, timeout: float = 90) -> None:
        admin = resolve_all(self.client_settings(tls.KAFKA_ADMIN))
        self.process.wait_ready(lambda: broker_ready(self.bootstrap_servers, admin), timeout)
        if self.secure:
            self._add_users(admin)

    def _add_users(self, admin_settings: dict[str, str]) -> None:
        """The SCRAM logins of the stack's clients, as its secrets file has them (again at every start:
        an upsert), and wait until one of them logs in."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        passwords = tls.passwords(self.workdir)
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0, **admin_settings})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
        upserts = [UserScramCredentialUpsertion(user, info, passwords[f"kafka.{user}"].encode())
                   for user in (tls.KAFKA_USER, tls.KAFKA_GUEST)]
        for future in admin.alter_user_scram_credentials(upserts).values():
            future.result(30)
        client = resolve_all(self.client_settings())
        self.process.wait_ready(lambda: broker_ready(self.bootstrap_servers, client), 30)

    def _format(self, classpath: str) -> None:
        argv = [jars.java(), f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}", "-cp", classpath,
                "kafka.tools.StorageTool", "format", f"--cluster-id={self.cluster_id or _cluster_id()}",
                "-c", str(self.config_path), "--ignore-formatted"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise ProcessError(f"formatting the broker's storage in {self.data_dir} failed:\n"
                               f"{proc.stdout}{proc.stderr}")

    def stop(self) -> None:
        # A clean shutdown flushes and writes its checkpoints; a SIGKILL after the timeout only
        # costs a log recovery at the next start.
        self.process.stop(timeout=20)
