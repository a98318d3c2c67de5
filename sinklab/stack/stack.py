"""Stack: where the broker, the catalog and Spark are, and who started them."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sinklab.exceptions import ComposeNotRunning, ProcessError
from sinklab.stack import jvm_archive
from sinklab.stack.broker import EmbeddedBroker, cluster
from sinklab.stack.catalog import EmbeddedCatalog
from sinklab.stack.connect import STOP_GRACE_S, EmbeddedConnect
from sinklab.stack.info import DEFAULT_CATALOG_NAME, STACK_FILE, STORAGES, StackInfo
from sinklab.stack.process import free_port, pid_alive, port_free, stop_leader_first, stop_pid, unwind_on_sigterm
from sinklab.stack.registry import EmbeddedRegistry, answers
from sinklab.stack.s3 import EmbeddedS3, require_moto
from sinklab.stack.spark import (
    S3_FILE_IO,
    SparkSettings,
    build_spark,
    catalog_conf,
    connect_session,
    is_s3_location,
    stop_spark,
)

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient, PartitionMetadata
    from pyiceberg.catalog.rest import RestCatalog
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class Stack:
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
        """
        if spark == "connect" and not connect:
            raise ValueError("spark='connect' serves Spark Connect from the Connect server's driver: keep connect=True")
        if storage not in STORAGES:
            raise ValueError(f"storage must be one of {', '.join(STORAGES)}, not {storage!r}")
        if storage == "s3":
            require_moto()  # before anything is created that would need cleaning up
        nodes = brokers if brokers is not None else resume.brokers if resume is not None else 1
        if nodes not in (1, 3):
            raise ValueError(f"brokers must be 1 or 3, not {nodes}")
        if resume is not None and resume.brokers != nodes:
            raise ProcessError(f"the stack in {resume.workdir} has {resume.brokers} broker(s), not {nodes}; stop it "
                               f"and start it in another workdir to change that")
        unwind_on_sigterm()  # a SIGTERM to this process still stops the servers it is about to start
        owned = None
        if workdir is None:
            owned = Path(tempfile.mkdtemp(prefix="sinklab-"))
            workdir = owned
        workdir = Path(workdir).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        running = {name: pid for name, pid in (resume.pids if resume else {}).items() if pid and pid_alive(pid)}
        # A port stays when its process runs (a node's controller port is its broker's process) or is free.
        ports = {name: port for name, port in (resume.ports if resume else {}).items()
                 if name in running or name.replace("controller", "broker") in running or port_free(port)}
        if connect_port is not None:
            if "connect" in running and ports.get("connect") != connect_port:
                raise ProcessError(f"the stack's Connect server already runs on port {ports.get('connect')}, "
                                   f"not {connect_port}")
            if "connect" not in running and not port_free(connect_port):
                raise ProcessError(f"Connect port {connect_port} is in use")
            ports["connect"] = connect_port
        if spark == "connect" and "connect" in running and resume is not None and not resume.spark_connect_url:
            raise ProcessError("the stack's Connect server runs without Spark Connect; stop it to start it with")
        served = (ports.get("spark-connect") or free_port()) if spark == "connect" else None
        connect_server = EmbeddedConnect(workdir, port=ports.get("connect"),
                                         spark_connect_port=served) if connect else None
        kafka = cluster(workdir, nodes, ports)
        s3 = EmbeddedS3(workdir, port=ports.get("s3")) if storage == "s3" else None
        if s3 is None:
            catalog = EmbeddedCatalog(workdir, port=ports.get("catalog"))
        else:
            db = workdir / "catalog-s3.db"
            if "s3" not in running:
                # The objects of an earlier S3 stack died with its server, and a catalog that
                # outlived them would list tables whose files are gone.
                db.unlink(missing_ok=True)
            catalog = EmbeddedCatalog(workdir, port=ports.get("catalog"), warehouse=f"s3://{s3.bucket}/warehouse",
                                      io_properties=s3.client_properties(), db=db)
        info = StackInfo(
            kind="embedded",
            bootstrap_servers=",".join(b.bootstrap_servers for b in kafka),
            catalog_uri=catalog.uri,
            catalog_name=catalog_name,
            warehouse=catalog.warehouse,
            catalog_properties=s3.client_properties() if s3 else {},
            workdir=str(workdir),
            storage=storage,
            pids=dict(running),
            brokers=nodes,
            ports={**{k: v for b in kafka for k, v in ((b.name, b.port), (b.name.replace("broker", "controller"),
                                                                           b.controller_port))},
                   "catalog": catalog.port,
                   **({"s3": s3.port} if s3 else {}), **({"connect": connect_server.port} if connect_server else {}),
                   **({"spark-connect": served} if connect_server and served else {})},
            connect_url=connect_server.url if connect_server else None,
            spark_connect_url=connect_server.spark_connect_url if connect_server else None,
        )
        if resume is not None and "connect" in running:
            # Kept running, though this object does not manage it, and serving what it served.
            info.connect_url = resume.connect_url
            info.spark_connect_url = resume.spark_connect_url
            if resume.spark_connect_url:
                info.ports["spark-connect"] = resume.ports["spark-connect"]
        if resume is not None and "schema-registry" in running:
            info.ports["schema-registry"] = resume.ports["schema-registry"]
            info.schema_registry_url = resume.schema_registry_url
        elif schema_registry and "schema-registry" in ports:
            info.ports["schema-registry"] = ports["schema-registry"]  # started again on its old port
        stack = cls(info, None if spark == "connect" else spark, spark_client=spark == "connect")
        stack._owned_workdir = owned
        try:
            # All nodes before waiting for any: a node of three answers once two of them run.
            starting = [b for b in kafka if b.name not in running]
            for b in starting:
                stack._brokers.append(b)
                b.begin()
                stack.info.pids[b.name] = b.process.pid or 0
            if warm:
                stack.warm_spark()
            for b in starting:
                b.wait_ready()
            # The S3 server before the catalog, which creates its FileIO on it.
            if s3 is not None and "s3" not in running:
                stack._s3 = s3
                s3.start()
                stack.info.pids["s3"] = s3.process.pid or 0
            if "catalog" not in running:
                stack._catalog_server = catalog
                catalog.start()
                stack.info.pids["catalog"] = catalog.process.pid or 0
            if schema_registry:
                stack.start_schema_registry()
            # Last: it attaches to the broker, the catalog and the registry (its sinks' Avro converters
            # find the stack's).
            if connect_server is not None and "connect" not in running:
                stack._connect = connect_server
                connect_server.start(stack.info)
                stack.info.pids["connect"] = connect_server.process.pid or 0
        except BaseException:
            stack.close()
            raise
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

    def stop_spark(self, timeout: float = 30) -> None:
        """Stop this stack's Spark session and its JVM; ``stack.spark`` starts a new one on next use.

        One process holds one Spark driver: stop one stack's Spark before another stack (with other
        jars, such as an S3 stack) starts its own.
        """
        with self._spark_lock:  # a driver still starting (warm_spark) is stopped once it has started
            if self._spark is None:
                return
            spark, self._spark = self._spark, None
            self._spark_catalogs = set()
            if self.spark_client:
                spark.stop()  # the client's session on the server; the server's driver runs on
                return
            stop_spark(spark, timeout)

    def warm_spark(self) -> None:
        """Start this process's Spark driver now, in the background, and run a small job and a catalog
        query in it: a fresh driver takes 4 s to start and a first cycle 8 s more, 5 s once such a job
        has run (2 cores, bench/README.md), and that time passes while the stack starts and the cells
        before the first cycle (or the demo's producer) run. A driver that fails to start here is
        started again, and fails with its error, at first use of ``spark``."""
        if self.spark_client or self._spark is not None:
            return

        def start() -> None:
            try:
                spark = self.spark
                spark.range(10).selectExpr("id % 2 AS k").groupBy("k").count().collect()
                spark.sql(f"SHOW NAMESPACES IN {self.info.catalog_name}").collect()
            except Exception as exc:  # noqa: BLE001 - a driver that did not start fails again at first use
                log.info("warming Spark's driver in the background stopped (%s): a driver that did not start is "
                         "started at first use of stack.spark", exc)

        threading.Thread(target=start, name="sinklab-warm-spark", daemon=True).start()

    def driver(self, what: str) -> SparkSession:
        """``spark``, for a part of sinklab that drives Iceberg's Java API through py4j (``what``: a sink,
        a maintenance run): a Spark Connect client has no JVM in its process to do that with."""
        if self.spark_client:
            raise ProcessError(
                f"{what} needs a Spark driver in this process (it calls Iceberg's Java API through py4j), and this "
                f"stack's spark is a Spark Connect client of {self.info.spark_connect_url}: run it on the stack's "
                f"Connect server ({self.info.connect_url}), as sinklab.sink.open_sink(stack, config) does for a "
                "sink, or from a Stack made without spark='connect'")
        return self.spark

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
        return {"bootstrap.servers": self.info.bootstrap_servers, **overrides}

    def admin(self) -> AdminClient:
        from confluent_kafka.admin import AdminClient

        # Its log lines (one at close, at times) go to the stack's log, not to a notebook's stderr.
        return AdminClient(self.kafka_config(logger=self.client_logger(), log_level=4))

    def catalog_properties(self) -> dict[str, str]:
        props = {"uri": self.info.catalog_uri, "warehouse": self.info.warehouse, **self.info.catalog_properties}
        if self.info.catalog_token:
            props["token"] = self.info.catalog_token
        return props

    @property
    def catalog(self) -> RestCatalog:
        """A pyiceberg client of the stack's REST catalog."""
        if self._catalog is None:
            from sinklab.stack.catalog_client import rest_catalog

            self._catalog = rest_catalog(self.info.catalog_name, self.catalog_properties())
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

    @property
    def spark_log(self) -> Path:
        """The log of the Spark driver's JVM: ``WORKDIR/logs/spark.log``, or in the temporary directory
        for a stack without a workdir."""
        if self.workdir is not None:
            return self.workdir / "logs" / "spark.log"
        return Path(tempfile.gettempdir()) / "sinklab" / f"spark-{os.getpid()}.log"

    @property
    def spark(self) -> SparkSession:
        """This process's Spark session (its driver starts on first use), or a Spark Connect client session
        of the stack's server when this object was made with ``spark="connect"``."""
        with self._spark_lock:
            if self.spark_client:
                if self._spark is None:
                    self._spark = connect_session(str(self.info.spark_connect_url))
                return self._spark
            if self._spark is None or self._spark.sparkContext._jsc is None:  # none yet, or stopped elsewhere
                conf = self.spark_catalog_conf(self.info.catalog_name)
                conf["spark.sql.defaultCatalog"] = self.info.catalog_name
                self._spark = build_spark(self.spark_settings, conf, s3=self.uses_s3, log_file=self.spark_log)
                self._spark_catalogs = {self.info.catalog_name}
                if self._training is None:
                    # Without a class archive this driver started cold; the next ones will not.
                    self._training = jvm_archive.train_in_background()
            return self._spark

    def register_spark_catalog(self, name: str) -> None:
        """Expose the stack's catalog in Spark under another name too (a config's ``iceberg.catalog``)."""
        with self._spark_lock:
            spark = self.spark
            if name in self._spark_catalogs:
                return
            for key, value in self.spark_catalog_conf(name).items():
                spark.conf.set(key, value)
            self._spark_catalogs.add(name)

    @property
    def uses_s3(self) -> bool:
        """Whether the warehouse is on S3, so Spark needs Iceberg's S3FileIO (iceberg-aws-bundle)."""
        return is_s3_location(self.info.warehouse) or "s3.endpoint" in self.info.catalog_properties

    def spark_catalog_conf(self, name: str) -> dict[str, str]:
        extra = dict(self.info.catalog_properties)
        if self.uses_s3:
            # The stack's own properties win: a cluster's own io-impl stays.
            extra = {"io-impl": S3_FILE_IO, **extra}
        return catalog_conf(name, self.info.catalog_uri, self.info.warehouse, self.info.catalog_token, extra)

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


def stop_recorded(info: StackInfo) -> list[str]:
    """Stop the processes a ``stack.json`` records; a PID is only signalled while its command line
    still names the stack's workdir (PIDs are reused)."""
    live = {name: pid for name, pid in info.pids.items() if pid and pid_alive(pid)}
    for name, pid in live.items():
        if info.workdir and info.workdir not in _cmdline(pid):
            raise ProcessError(f"PID {pid} ({name}) no longer belongs to the stack in {info.workdir}; not stopping it")
    # The Connect server first: its sinks finish their cycle while broker and catalog still answer.
    brokers = [name for name in live if name.startswith("broker")]
    servers = sorted((name for name in live if name not in brokers), key=lambda name: name != "connect")
    for name in servers:
        if name == "connect":
            stop_leader_first(live[name], STOP_GRACE_S)
        else:
            stop_pid(live[name], timeout=15)
    errors = together([lambda pid=live[name]: stop_pid(pid, timeout=15) for name in brokers])
    if errors:
        raise errors[0]
    return servers + brokers


def together(stops: list[Callable[[], None]]) -> list[BaseException]:
    """Run ``stops`` at once; the errors they raised. For the nodes of a cluster: stopped one after
    another, the last to go has no quorum left for its controlled shutdown and waits out its timeout
    (20 s of 21 for three nodes, measured; 5.6 s at once)."""
    errors: list[BaseException] = []

    def run(stop: Callable[[], None]) -> None:
        try:
            stop()
        except Exception as exc:  # noqa: BLE001 - returned to the caller, which raises it
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(stop,)) for stop in stops]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _name_of(proc: EmbeddedCatalog | EmbeddedS3) -> str:
    return "s3" if isinstance(proc, EmbeddedS3) else "catalog"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
