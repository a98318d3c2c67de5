"""Stack: where the broker, the catalog and Spark are, and who started them.

The running stack's API. Making an embedded one is ``embedded.py``'s job (``Stack.embedded`` calls it),
its Spark session ``stack_spark.py``'s (a base of ``Stack``), stopping a recorded stack ``stopping.py``'s.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sinklab.exceptions import AccessDenied, ComposeNotRunning, ProcessError
from sinklab.security import is_secret, librdkafka_settings, resolve_all, scrub
from sinklab.stack import jvm_archive
from sinklab.stack.broker import EmbeddedBroker
from sinklab.stack.catalog import EmbeddedCatalog
from sinklab.stack.connect import EmbeddedConnect
from sinklab.stack.embedded import (
    check_arguments,
    describe,
    make_processes,
    make_workdir,
    resumed,
    start_in_order,
)
from sinklab.stack.info import DEFAULT_CATALOG_NAME, STACK_FILE, StackInfo
from sinklab.stack.process import pid_alive, unwind_on_sigterm
from sinklab.stack.registry import EmbeddedRegistry, answers
from sinklab.stack.s3 import EmbeddedS3
from sinklab.stack.spark import SparkSettings
from sinklab.stack.stack_spark import StackSpark
from sinklab.stack.stopping import together

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient, PartitionMetadata
    from pyiceberg.catalog.rest import RestCatalog
    from pyspark.sql import SparkSession



class Stack(StackSpark):
    """A broker, an Iceberg REST catalog and a Spark session factory.

    ``Stack.embedded()`` starts and owns the servers; ``Stack.external()`` connects to servers
    that already run. Spark starts on first use of ``stack.spark`` and stops with the stack.
    """

    def __init__(self, info: StackInfo, spark_settings: SparkSettings | None = None, spark_client: bool = False):
        if spark_client and not info.spark_connect_url:
            raise ProcessError("the stack serves no Spark Connect (no spark_connect_url in its stack.json); start "
                               "it with `sinklab stack up --spark-connect`")
        self.info = info
        # True: ``spark`` is a Spark Connect client of ``info.spark_connect_url``, not a driver of this process.
        self.spark_client = spark_client
        self.spark_settings = spark_settings or SparkSettings(master=info.spark_master)
        self._brokers: list[EmbeddedBroker] = []
        self._catalog_server: EmbeddedCatalog | None = None
        self._s3: EmbeddedS3 | None = None
        self._connect: EmbeddedConnect | None = None
        self._registry: EmbeddedRegistry | None = None
        self._owned_workdir: Path | None = None
        self._spark: SparkSession | None = None
        self._catalog: RestCatalog | None = None
        self._spark_catalogs: set[str] = set()
        # The Connect server starts several sinks at once, each from its own thread: one session.
        self._spark_lock = threading.RLock()
        self._training: jvm_archive.Training | None = None

    # ---- constructors
    @classmethod
    def embedded(
        cls,
        workdir: str | Path | None = None,
        catalog_name: str = DEFAULT_CATALOG_NAME,
        spark: SparkSettings | Literal["connect"] | None = None,
        storage: Literal["local", "s3"] = "local",
        resume: StackInfo | None = None,
        connect: bool = True,
        connect_port: int | None = None,
        schema_registry: bool = False,
        brokers: int | None = None,
        warm: bool = False,
        secure: bool | None = None,
    ) -> Stack:
        """Start Apache Kafka and Apache's Iceberg REST catalog now (Spark waits for first use, or with
        ``warm`` starts beside them: ``warm_spark()``).

        Topics, records, offsets and tables live in ``workdir`` and outlive the processes: a stack
        started again on the same workdir has them all. ``resume`` (an earlier ``stack.json`` of
        this workdir) keeps the processes of it that still run and starts the others again on their
        old ports when those are free: this is how a crashed broker is brought back.

        ``storage="s3"`` also starts an S3 server (moto) and puts the warehouse in its bucket, read
        and written through Iceberg's ``S3FileIO``. moto keeps objects in memory, so an S3
        warehouse lasts as long as its server.

        ``brokers=3`` runs Kafka as three nodes (``sinklab.stack.broker``): every topic replicated to all
        three, two in sync, so that the stack lives through a node's death as a production cluster does;
        the default is one node (a stack resumed keeps its count).

        ``connect`` also starts the Kafka Connect REST server (``sinklab.connect``, its own process;
        its Spark starts with the first connector) on ``connect_port`` or a free port; its URL is
        ``info.connect_url``. Its connectors live in ``workdir/connect`` and resume with it.

        ``spark="connect"`` starts that server's Spark driver at once and has it serve Spark Connect
        (``info.spark_connect_url``): ``stack.spark`` is then a Spark Connect client of it, which starts
        in seconds and has settings of its own; sinks run there, started through the REST API.

        ``secure=True`` (a resumed stack keeps what it was): Kafka asks every client for a password over TLS
        (SASL_SSL, SCRAM-SHA-256; certificates of a CA the stack makes, passwords it makes, both kept in the
        workdir, readable by their owner only); ``info.kafka_security`` says how a client logs in, the
        password by reference. One Kafka node.
        """
        nodes, secure = check_arguments(spark, storage, connect, brokers, resume, secure)
        unwind_on_sigterm()  # a SIGTERM to this process still stops the servers it is about to start
        path, owned = make_workdir(workdir)
        kept = resumed(resume, connect_port, spark == "connect")
        procs = make_processes(path, nodes, storage, connect, spark == "connect", kept, secure)
        info = describe(procs, path, catalog_name, storage, nodes, kept, resume, schema_registry)
        stack = cls(info, None if spark == "connect" else spark, spark_client=spark == "connect")
        stack._owned_workdir = owned
        start_in_order(stack, procs, kept.running, warm, schema_registry)
        return stack

    @classmethod
    def external(
        cls,
        bootstrap_servers: str,
        catalog_uri: str,
        warehouse: str,
        spark_master: str = "local[*]",
        catalog_name: str = DEFAULT_CATALOG_NAME,
        catalog_token: str | None = None,
        catalog_properties: dict[str, str] | None = None,
        spark: SparkSettings | None = None,
    ) -> Stack:
        info = StackInfo(
            bootstrap_servers=bootstrap_servers,
            catalog_uri=catalog_uri,
            warehouse=warehouse,
            spark_master=spark_master,
            catalog_name=catalog_name,
            catalog_token=catalog_token,
            catalog_properties=catalog_properties or {},
        )
        return cls(info, spark or SparkSettings(master=spark_master))

    @classmethod
    def compose(
        cls,
        inside: bool | None = None,
        catalog_name: str = DEFAULT_CATALOG_NAME,
        spark: SparkSettings | None = None,
        check: bool = True,
    ) -> Stack:
        """Connect to the services of ``compose.yaml`` (started with ``docker compose up``).

        From the host, Kafka, the REST catalog and MinIO are reached on their published loopback
        ports and Spark runs locally (with S3FileIO); inside the stack's JupyterLab container
        (``inside``, detected from ``SINKLAB_IN_COMPOSE=1``) the service names are used and Spark
        runs on the stack's cluster. ``check`` fails fast, naming each service that does not answer.
        """
        from sinklab.stack import compose as c
        from sinklab.stack.s3 import s3_client_properties

        endpoints = c.compose_endpoints(inside)
        if check:
            problems = c.unreachable(endpoints)
            if problems:
                raise ComposeNotRunning(
                    "the compose stack does not answer:\n  " + "\n  ".join(problems)
                    + "\nstart it with `docker compose up -d --wait` in the sinklab checkout (needs a Docker engine)"
                )
        settings = spark or SparkSettings(master=endpoints.spark_master, conf=c.driver_conf(endpoints))
        stack = cls.external(
            bootstrap_servers=endpoints.bootstrap_servers,
            catalog_uri=endpoints.catalog_uri,
            warehouse=c.WAREHOUSE,
            spark_master=endpoints.spark_master,
            catalog_name=catalog_name,
            catalog_properties=s3_client_properties(endpoints.s3_endpoint, c.S3_ACCESS_KEY, c.S3_SECRET_KEY,
                                                    c.S3_REGION),
            spark=settings,
        )
        stack.info.kind = "compose"
        stack.info.schema_registry_url = endpoints.schema_registry_url
        return stack

    @classmethod
    def from_file(cls, path: str | Path, spark: SparkSettings | Literal["connect"] | None = None) -> Stack:
        """Connect to the stack a ``stack.json`` describes; its processes stay someone else's.

        ``spark="connect"``: ``stack.spark`` is a client of the stack's Spark Connect server (``stack up
        --spark-connect``), not a driver of this process's own."""
        path = Path(path)
        if path.is_dir():
            path = path / STACK_FILE
        info = StackInfo.model_validate_json(path.read_text())
        info = info.model_copy(update={"pids": {}})
        if spark == "connect":
            return cls(info, spark_client=True)
        return cls(info, spark or SparkSettings(master=info.spark_master))

    @classmethod
    def open(cls, at: str | Path | None = None, workdir: str | Path | None = None, *, jvm: bool = False,
             **embedded: Any) -> Stack:
        """The stack a notebook runs on, chosen by one parameter, ``at``:

        - ``None``: one of its own, ``embedded(workdir, warm=True, **embedded)`` (``warm=False``: no Spark
          driver until one is asked for); inside compose.yaml's JupyterLab (``SINKLAB_IN_COMPOSE=1``)
          compose's services instead;
        - ``"compose"``: the services of compose.yaml (``compose()``);
        - a ``stack.json`` (or its folder) of a running stack (``sinklab stack up --spark-connect``): its Spark
          Connect server's warm driver runs this process's Spark work; ``jvm=True`` starts a driver of this
          process's own instead, for what calls Java through py4j (Iceberg's maintenance actions).

        The stack is closed when the interpreter exits, which stops only what it started (a headless run
        whose cell failed leaves no server behind), and py4j's per-call INFO lines are quieted.
        """
        import atexit

        from sinklab.stack.compose import in_compose

        logging.getLogger("py4j").setLevel(logging.WARNING)
        if at is None and in_compose():
            at = "compose"
        if at is None:
            stack = cls.embedded(workdir, **{"warm": True, **embedded})
        elif str(at) == "compose":
            stack = cls.compose()
        elif jvm:
            stack = cls.from_file(at)
            stack.warm_spark()
        else:
            stack = cls.from_file(at, spark="connect")
        atexit.register(stack.close)
        return stack

    def start_schema_registry(self) -> str:
        """Start the embedded schema registry (Apicurio Registry, its schemas in the workdir) unless it
        runs; return its Confluent-compatible URL, also in ``info.schema_registry_url``.

        Not started by default: its jar is built from Maven Central on first use (about a minute,
        ~130 MB) and it takes ~5 s and ~250 MB, which sinks of JSON topics do not need.
        """
        if self.info.schema_registry_url and (self._registry is not None or answers(self.info.schema_registry_url)):
            return self.info.schema_registry_url  # this object's, or another process's (Stack.from_file)
        if self.workdir is None or self.info.kind != "embedded":
            raise ProcessError("only an embedded stack starts a schema registry; give an external one's URL in the "
                               "converter's schema.registry.url")
        registry = EmbeddedRegistry(self.workdir, port=self.info.ports.get("schema-registry"))
        self._registry = registry
        registry.start()
        self.info.pids["schema-registry"] = registry.process.pid or 0
        self.info.ports["schema-registry"] = registry.port
        self.info.schema_registry_url = registry.url
        return registry.url

    # ---- lifecycle
    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop Spark and every process this object started; the first failure is raised last."""
        errors: list[BaseException] = []
        if self._training is not None:
            self._training.stop()  # kept if it finished; a later stack trains again if it did not
            self._training = None
        try:
            self.stop_spark()
        except Exception as exc:  # noqa: BLE001 - keep stopping the rest, re-raised below
            errors.append(exc)
        # The Connect server first: its sinks finish their cycle while broker and catalog still answer.
        for proc in (self._connect, self._registry, self._catalog_server, self._s3):
            if proc is None:
                continue
            try:
                proc.stop()
            except Exception as exc:  # noqa: BLE001 - keep stopping the rest, re-raised below
                errors.append(exc)
        errors += together([b.stop for b in self._brokers])
        self._connect = self._registry = self._catalog_server = self._s3 = None
        self._brokers = []
        if self._owned_workdir is not None:
            shutil.rmtree(self._owned_workdir, ignore_errors=True)
            self._owned_workdir = None
        if errors:
            raise errors[0]

    def revive(self, timeout: float = 90) -> list[str]:
        """Start again, on their old ports, the processes this object started that have died (a broker
        node, the catalog, the S3 server): what `sinklab stack up` does for a workdir. Returns their names.
        A revived S3 server starts empty: moto keeps its objects in memory."""
        revived = []
        for proc in (self._s3, self._catalog_server):
            if proc is not None and not pid_alive(proc.process.pid or 0):
                proc.process.stop()  # reaps it
                proc.start()
                self.info.pids[_name_of(proc)] = proc.process.pid or 0
                revived.append(_name_of(proc))
        dead = [b for b in self._brokers if not pid_alive(b.process.pid or 0)]
        for b in dead:
            b.process.stop()
            b.begin()
            self.info.pids[b.name] = b.process.pid or 0
        for b in dead:
            b.wait_ready(timeout)
        return revived + [b.name for b in dead]

    def detach(self) -> StackInfo:
        """Leave the servers running (for `sinklab stack up`); `stop_recorded` stops them later."""
        self._catalog_server = self._s3 = self._connect = self._registry = None
        self._brokers = []
        self._owned_workdir = None
        return self.info

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        if path.is_dir():
            path = path / STACK_FILE
        path.write_text(self.info.model_dump_json(indent=2) + "\n")
        return path

    # ---- clients
    @property
    def bootstrap_servers(self) -> str:
        return self.info.bootstrap_servers

    @property
    def connect_server(self) -> EmbeddedConnect | None:
        """The Kafka Connect REST server this object started (``stop()`` it to restart it with
        ``Stack.embedded(workdir, resume=info)``, as `stack up` does after a crash)."""
        return self._connect

    @property
    def workdir(self) -> Path | None:
        return Path(self.info.workdir) if self.info.workdir else None

    def kafka_config(self, **overrides: Any) -> dict[str, Any]:
        """A librdkafka client's settings for the stack's Kafka: its address and how to log in (secrets
        resolved: for a client, never to be written), then ``overrides``."""
        security = librdkafka_settings(resolve_all(self.info.kafka_security))
        return {"bootstrap.servers": self.info.bootstrap_servers, **security, **overrides}

    def admin(self) -> AdminClient:
        from confluent_kafka.admin import AdminClient

        # Its log lines (one at close, at times) go to the stack's log, not to a notebook's stderr.
        return AdminClient(self.kafka_config(logger=self.client_logger(), log_level=4))

    def catalog_properties(self) -> dict[str, str]:
        """A catalog client's properties (pyiceberg's, and Iceberg's REST client's), secrets resolved: for a
        client, never to be written."""
        props = {"uri": self.info.catalog_uri, "warehouse": self.info.warehouse, **self.info.catalog_properties}
        if self.info.catalog_token:
            props["token"] = self.info.catalog_token
        return resolve_all(props)

    @property
    def catalog(self) -> RestCatalog:
        """A pyiceberg client of the stack's REST catalog."""
        if self._catalog is None:
            from pyiceberg.exceptions import AuthorizationExpiredError, ForbiddenError, OAuthError, UnauthorizedError

            from sinklab.stack.catalog_client import rest_catalog

            properties = self.catalog_properties()
            try:
                self._catalog = rest_catalog(self.info.catalog_name, properties)
            except (OAuthError, UnauthorizedError, ForbiddenError, AuthorizationExpiredError) as exc:
                # Refused, not away: trying again with the same credential would be refused again.
                secrets = [part for k, v in properties.items() if is_secret(k) for part in (v, v.partition(":")[2])]
                raise AccessDenied("catalog", self.info.catalog_uri, "login", scrub(str(exc), secrets)
                                   + "; check the catalog's credential (client id and secret) or token (one that "
                                   "expired cannot be renewed without a credential)") from None
        return self._catalog

    def client_logger(self) -> logging.Logger:
        """The logger a librdkafka client of this process logs through (its ``logger`` setting):
        ``WORKDIR/logs/kafka-clients.log``, not the process's stderr, which in a notebook is a cell's
        output. For clients whose config also reaches Spark, which cannot take a logger object."""
        path = self.spark_log.with_name("kafka-clients.log")
        logger = logging.getLogger(f"sinklab.kafka-clients.{path}")
        if not logger.handlers:
            path.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(path)
            handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(message)s"))
            logger.addHandler(handler)
            logger.propagate = False
        return logger

    def create_topic(
        self, name: str, partitions: int = 1, config: dict[str, str] | None = None, exist_ok: bool = True,
        timeout: float = 30,
    ) -> dict[int, PartitionMetadata]:
        """Create the topic (or find it, with ``exist_ok``) and wait until every partition has a leader;
        returns the partitions' metadata as it then was (another client's first answer may still lack
        them: notebook 04 once read none)."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        # The broker's default replication: 1 on one node, 3 on three (with two in sync).
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=-1, config=config or {})],
            request_timeout=timeout,
        )
        wanted = partitions
        try:
            futures[name].result(timeout)
        except KafkaException as exc:
            if not (exist_ok and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
            wanted = 1  # its own count, whatever this call asked for
        # Metadata propagates asynchronously: producers that race it see UNKNOWN_TOPIC, and on three
        # nodes a reader saw the topic before its partitions (notebook 04 asked for partition 0's leader).
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            topic = admin.list_topics(name, timeout=5).topics.get(name)
            if (topic is not None and topic.error is None and len(topic.partitions) >= wanted
                    and all(p.error is None and p.leader >= 0 for p in topic.partitions.values())):
                return dict(topic.partitions)
            time.sleep(0.1)
        raise TimeoutError(f"topic {name!r} did not show in metadata with every partition led within {timeout}s")


def _name_of(proc: EmbeddedCatalog | EmbeddedS3) -> str:
    return "s3" if isinstance(proc, EmbeddedS3) else "catalog"

