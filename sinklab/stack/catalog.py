"""The embedded Iceberg REST catalog: Apache Iceberg's own ``RESTCatalogServer``, on loopback.

It is the server inside the ``apache/iceberg-rest-fixture`` image (compose.yaml runs the same one):
Iceberg's ``RESTCatalogAdapter`` over a ``JdbcCatalog`` on a SQLite file, so the catalog persists
across ``stack down``/``up``. The server's ``main`` binds every interface, so this module starts it
the way ``main`` does, through py4j (shipped with PySpark), with its one connector on 127.0.0.1.
``CATALOG_*`` environment variables still become catalog properties, as in the image.

``catalog_server.py`` is the process itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import requests

from sinklab.security import resolve
from sinklab.stack import jars, tls
from sinklab.stack.catalog_auth import TOKENS_PATH
from sinklab.stack.process import LOOPBACK, ManagedProcess, free_port


def server_properties(db: Path, warehouse: str, io_properties: dict[str, str] | None = None) -> dict[str, str]:
    """Catalog properties of the embedded server (the ones the image takes as ``CATALOG_*``)."""
    props = {
        "catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "uri": f"jdbc:sqlite:file:{db}",
        # V1 adds views; the catalog's own default would refuse them.
        "jdbc.schema-version": "V1",
        "warehouse": warehouse,
    }
    if io_properties:
        # S3FileIO on the server, and the same credentials handed to every client in each
        # load-table response (RESTServerCatalogAdapter's include-credentials), as a vending
        # catalog does.
        props.update(io_properties)
        props["io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
        props["include-credentials"] = "true"
    return props


class EmbeddedCatalog:
    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        warehouse: str | None = None,
        io_properties: dict[str, str] | None = None,
        db: Path | None = None,
        secure: bool = False,
        token_lifetime_s: float = 3600,
    ):
        self.workdir = workdir
        self.port = port or free_port()
        self.warehouse = warehouse or (workdir / "warehouse").resolve().as_uri()
        self.db = db or workdir / "catalog.db"
        # A file, not arguments: arguments (S3 secrets among them) are visible to every user in `ps`.
        self.properties_file = workdir / "catalog.properties.json"
        self.properties = server_properties(self.db, self.warehouse, io_properties)
        argv = [sys.executable, "-m", "sinklab.stack.catalog_server", "--stack-dir", str(workdir),
                "--port", str(self.port), "--properties-file", str(self.properties_file)]
        self.secure = secure
        if secure:
            argv += ["--client-secret", tls.reference(workdir, "catalog.client-secret"),
                     "--token-lifetime-s", str(token_lifetime_s)]
        self.process = ManagedProcess("REST catalog (Apache Iceberg RESTCatalogServer)", argv,
                                      workdir / "logs" / "catalog.log")

    @property
    def uri(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def client_properties(self) -> dict[str, str]:
        """How a client logs in (Iceberg's REST catalog properties, the secret by reference); empty for an
        open catalog."""
        if not self.secure:
            return {}
        return {"credential": f"{tls.CATALOG_CLIENT_ID}:{tls.reference(self.workdir, 'catalog.client-secret')}",
                "oauth2-server-uri": f"{self.uri}{TOKENS_PATH}", "scope": "catalog"}

    def ready(self) -> bool:
        headers = {}
        if self.secure:
            client_id, _, secret = resolve(self.client_properties()["credential"]).partition(":")
            answer = requests.post(f"{self.uri}{TOKENS_PATH}", timeout=2, data={
                "grant_type": "client_credentials", "client_id": client_id, "client_secret": secret,
                "scope": "catalog"})
            if not answer.ok:
                return False
            headers["Authorization"] = f"Bearer {answer.json()['access_token']}"
        return requests.get(f"{self.uri}/v1/config", timeout=2, headers=headers).status_code == 200

    def start(self, timeout: float = 90) -> None:
        if self.warehouse.startswith("file:"):
            Path(self.warehouse.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
        tls.write_private(self.properties_file, json.dumps(self.properties))
        jars.jars(jars.ICEBERG_REST)  # resolved here, so that a failure names the coordinate
        self.process.start()
        self.process.wait_ready(self.ready, timeout)

    def stop(self) -> None:
        self.process.stop(timeout=10)
