"""What a ``stack.json`` holds: where a running stack's services are, for any client to reach them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from sinklab.security import resolve

STACK_FILE = "stack.json"
DEFAULT_CATALOG_NAME = "sinklab"
STORAGES = ("local", "s3")


class StackInfo(BaseModel):
    """The contents of ``stack.json``: enough for any client to reach a running stack."""

    kind: Literal["embedded", "external", "compose"] = "external"
    bootstrap_servers: str
    catalog_uri: str
    catalog_name: str = DEFAULT_CATALOG_NAME
    warehouse: str
    catalog_token: str | None = None
    # Extra catalog client properties (s3.* and the like), for Spark and pyiceberg alike.
    catalog_properties: dict[str, str] = Field(default_factory=dict)
    spark_master: str = "local[*]"
    workdir: str | None = None
    # Processes `sinklab stack up` started and `stack down` stops, by name.
    pids: dict[str, int] = Field(default_factory=dict)
    # The embedded processes' ports: a process started again on the same workdir takes them back.
    ports: dict[str, int] = Field(default_factory=dict)
    storage: Literal["local", "s3"] = "local"
    # The Kafka Connect REST API of the stack (sinklab.connect), when one runs.
    connect_url: str | None = None
    # Spark Connect (sc://host:port) of the Connect server's driver, when it serves it (`stack up --spark-connect`).
    spark_connect_url: str | None = None
    # The Confluent-compatible schema registry (Avro converters' schema.registry.url), when one runs.
    schema_registry_url: str | None = None
    # Nodes of the embedded Kafka (bootstrap_servers lists each): 1, or 3 replicating every topic.
    brokers: int = 1
    # How a client logs in to Kafka, in librdkafka's names (security.protocol, sasl.mechanisms, sasl.username,
    # sasl.password, ssl.ca.location, ...; Java's are taken too), a secret by reference (${env:NAME},
    # ${file:PATH:KEY}), never in clear. Empty: Kafka asks nobody.
    kafka_security: dict[str, str] = Field(default_factory=dict)
    # An embedded stack whose servers ask every client who it is (`stack up --secure`): Kafka over SASL_SSL,
    # the catalog a bearer token, the Connect REST API a password.
    secure: bool = False
    # The Connect REST API's login (HTTP basic authentication), "user:password" with the password by reference,
    # as Kafka Connect's basic.auth.user.info is written; None: it asks nobody.
    connect_basic_auth: str | None = None

    def connect_auth(self) -> tuple[str, str] | None:
        """(user, password) for a request to the Connect REST API (``requests``' ``auth``), resolved: for a
        client, never to be written; None when it asks nobody."""
        if not self.connect_basic_auth:
            return None
        user, _, password = resolve(self.connect_basic_auth, "connect_basic_auth").partition(":")
        return user, password
