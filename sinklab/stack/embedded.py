"""Making an embedded stack (``Stack.embedded``), one job a function: the arguments checked, what an
earlier stack of the workdir left (its running processes, its ports), the process objects, the
``StackInfo`` that describes them, and their start in order, which stops what it started when one fails.

``Stack`` (``stack.py``) is the running stack's API; this module knows it only as ``Owner``, what the
ordered start needs of it, so that neither file imports the other's.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from sinklab.exceptions import ProcessError
from sinklab.stack import tls
from sinklab.stack.broker import EmbeddedBroker, cluster
from sinklab.stack.catalog import EmbeddedCatalog
from sinklab.stack.connect import EmbeddedConnect
from sinklab.stack.info import STORAGES, StackInfo
from sinklab.stack.process import free_port, pid_alive, port_free
from sinklab.stack.s3 import EmbeddedS3, require_moto

if TYPE_CHECKING:
    from sinklab.stack.spark import SparkSettings


def check_arguments(spark: SparkSettings | Literal["connect"] | None, storage: str, connect: bool,
                    brokers: int | None, resume: StackInfo | None, secure: bool | None = None) -> tuple[int, bool]:
    """Refuse what ``Stack.embedded`` cannot start before anything is made; returns its count of Kafka
    nodes (``brokers``, else the resumed stack's, else 1) and whether it is secure (``secure``, else the
    resumed stack's, else not)."""
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
    locked = secure if secure is not None else resume.secure if resume is not None else False
    if resume is not None and resume.secure != locked:
        raise ProcessError(f"the stack in {resume.workdir} is {'' if resume.secure else 'not '}secure; start a "
                           f"{'secure' if locked else 'open'} one in another workdir")
    if locked and nodes != 1:
        raise ValueError("a secure embedded stack runs one Kafka node: brokers=1")
    return nodes, locked


def make_workdir(workdir: str | Path | None) -> tuple[Path, Path | None]:
    """The stack's workdir, resolved and made; and, when none was given, the temporary one made for it,
    which the stack owns (removes at close)."""
    owned = None
    if workdir is None:
        owned = Path(tempfile.mkdtemp(prefix="sinklab-"))
        workdir = owned
    path = Path(workdir).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path, owned


@dataclass
class Resumed:
    """What this start keeps of an earlier ``stack.json`` of the workdir."""

    running: dict[str, int]  # its processes that still run, by name: kept, not started again
    ports: dict[str, int]  # the ports the processes to start take back (and ``connect_port``)


def resumed(resume: StackInfo | None, connect_port: int | None, spark_connect: bool) -> Resumed:
    """The processes of ``resume`` that still run and the ports this start takes; refuses a Connect port
    or a Spark Connect that its running Connect server does not have."""
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
    if spark_connect and "connect" in running and resume is not None and not resume.spark_connect_url:
        raise ProcessError("the stack's Connect server runs without Spark Connect; stop it to start it with")
    return Resumed(running, ports)


@dataclass
class Processes:
    """An embedded stack's process objects, made but not started."""

    kafka: list[EmbeddedBroker]
    catalog: EmbeddedCatalog
    s3: EmbeddedS3 | None
    connect: EmbeddedConnect | None
    spark_connect_port: int | None  # the port the Connect server's driver serves Spark Connect on, if it does


def make_processes(workdir: Path, nodes: int, storage: str, connect: bool, spark_connect: bool,
                   kept: Resumed, secure: bool = False) -> Processes:
    """The process objects, on the ports ``kept`` holds where it has them, free ones elsewhere."""
    ports, running = kept.ports, kept.running
    served = (ports.get("spark-connect") or free_port()) if spark_connect else None
    connect_server = EmbeddedConnect(workdir, port=ports.get("connect"),
                                     spark_connect_port=served) if connect else None
    kafka = cluster(workdir, nodes, ports, secure=secure)
    s3 = EmbeddedS3(workdir, port=ports.get("s3")) if storage == "s3" else None
    if s3 is None:
        catalog = EmbeddedCatalog(workdir, port=ports.get("catalog"), secure=secure)
    else:
        db = workdir / "catalog-s3.db"
        if "s3" not in running:
            # The objects of an earlier S3 stack died with its server, and a catalog that
            # outlived them would list tables whose files are gone.
            db.unlink(missing_ok=True)
        catalog = EmbeddedCatalog(workdir, port=ports.get("catalog"), warehouse=f"s3://{s3.bucket}/warehouse",
                                  io_properties=s3.client_properties(), db=db, secure=secure)
    return Processes(kafka, catalog, s3, connect_server, served)


def describe(procs: Processes, workdir: Path, catalog_name: str, storage: Literal["local", "s3"], nodes: int,
             kept: Resumed, resume: StackInfo | None, schema_registry: bool) -> StackInfo:
    """The ``StackInfo`` of the stack about to start: its processes' ports and URLs, and those of the
    resumed processes it keeps (the PIDs of those it starts are added as they start)."""
    kafka, catalog, s3 = procs.kafka, procs.catalog, procs.s3
    connect_server, served = procs.connect, procs.spark_connect_port
    info = StackInfo(
        kind="embedded",
        bootstrap_servers=",".join(b.bootstrap_servers for b in kafka),
        catalog_uri=catalog.uri,
        catalog_name=catalog_name,
        warehouse=catalog.warehouse,
        catalog_properties={**(s3.client_properties() if s3 else {}), **catalog.client_properties()},
        workdir=str(workdir),
        storage=storage,
        pids=dict(kept.running),
        brokers=nodes,
        ports={**{k: v for b in kafka for k, v in ((b.name, b.port), (b.name.replace("broker", "controller"),
                                                                       b.controller_port))},
               "catalog": catalog.port,
               **({"s3": s3.port} if s3 else {}), **({"connect": connect_server.port} if connect_server else {}),
               **({"spark-connect": served} if connect_server and served else {})},
        connect_url=connect_server.url if connect_server else None,
        spark_connect_url=connect_server.spark_connect_url if connect_server else None,
        kafka_security=kafka[0].client_settings(),
        secure=kafka[0].secure,
        connect_basic_auth=f"{tls.CONNECT_USER}:{tls.reference(workdir, 'connect.admin')}"
        if kafka[0].secure and connect_server else None,
    )
    if resume is not None and "connect" in kept.running:
        # Kept running, though this object does not manage it, and serving what it served.
        info.connect_url = resume.connect_url
        info.spark_connect_url = resume.spark_connect_url
        info.connect_basic_auth = resume.connect_basic_auth
        if resume.spark_connect_url:
            info.ports["spark-connect"] = resume.ports["spark-connect"]
    if resume is not None and "schema-registry" in kept.running:
        info.ports["schema-registry"] = resume.ports["schema-registry"]
        info.schema_registry_url = resume.schema_registry_url
    elif schema_registry and "schema-registry" in kept.ports:
        info.ports["schema-registry"] = kept.ports["schema-registry"]  # started again on its old port
    return info


class Owner(Protocol):
    """What the ordered start needs of the stack it starts processes for (a ``Stack``): the slots its
    ``close()`` stops them from, so that a failed start stops what it had started."""

    info: StackInfo
    _brokers: list[EmbeddedBroker]
    _s3: EmbeddedS3 | None
    _catalog_server: EmbeddedCatalog | None
    _connect: EmbeddedConnect | None

    def warm_spark(self) -> None: ...

    def start_schema_registry(self) -> str: ...

    def close(self) -> None: ...


def start_in_order(stack: Owner, procs: Processes, running: dict[str, int], warm: bool,
                   schema_registry: bool) -> None:
    """Start the processes not in ``running``, each after those it needs, recording each PID in
    ``stack.info``; on any failure (a SIGTERM too) ``stack.close()`` stops those started, and it is raised."""
    try:
        # All nodes before waiting for any: a node of three answers once two of them run.
        starting = [b for b in procs.kafka if b.name not in running]
        for b in starting:
            stack._brokers.append(b)
            b.begin()
            stack.info.pids[b.name] = b.process.pid or 0
        if warm:
            stack.warm_spark()
        for b in starting:
            b.wait_ready()
        # The S3 server before the catalog, which creates its FileIO on it.
        if procs.s3 is not None and "s3" not in running:
            stack._s3 = procs.s3
            procs.s3.start()
            stack.info.pids["s3"] = procs.s3.process.pid or 0
        if "catalog" not in running:
            stack._catalog_server = procs.catalog
            procs.catalog.start()
            stack.info.pids["catalog"] = procs.catalog.process.pid or 0
        if schema_registry:
            stack.start_schema_registry()
        # Last: it attaches to the broker, the catalog and the registry (its sinks' Avro converters
        # find the stack's).
        if procs.connect is not None and "connect" not in running:
            stack._connect = procs.connect
            procs.connect.start(stack.info)
            stack.info.pids["connect"] = procs.connect.process.pid or 0
    except BaseException:
        stack.close()
        raise
