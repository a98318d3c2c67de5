"""The embedded REST catalog's process: Apache Iceberg's ``RESTCatalogServer`` in a JVM held by py4j.

Run as ``python -m sinklab.stack.catalog_server --stack-dir DIR --port P --properties-file F``
(``--stack-dir`` puts the stack's workdir in the command line, which is how ``stack down`` makes sure
a recorded PID still belongs to the stack). With ``--client-secret REF`` (a reference to the secret, never
the secret) the server listens on a loopback port of its own and ``catalog_auth``'s door on P: an OAuth2
token endpoint and a bearer-token gate. The JVM exits when this process does (py4j's
die_on_exit); both get the SIGTERM of a stop, sent to the process group.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from sinklab.security import resolve
from sinklab.stack import catalog_auth, jars
from sinklab.stack.process import LOOPBACK, free_port
from sinklab.stack.spark import no_local_checksums
from sinklab.stack.tls import CATALOG_CLIENT_ID

JVM_OPTS = ["-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]


def serve(port: int, properties: dict[str, str], client_secret: str | None = None, token_lifetime_s: float = 3600
          ) -> None:
    """Start Apache's REST catalog in a JVM and serve until SIGTERM; with ``client_secret``, behind the door
    (``catalog_auth``) that asks for it."""
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

    gateway_port = launch_gateway(
        classpath=jars.classpath(jars.ICEBERG_REST), javaopts=JVM_OPTS, die_on_exit=True,
        redirect_stdout=sys.stdout, redirect_stderr=sys.stderr,
    )
    gateway = JavaGateway(gateway_parameters=GatewayParameters(port=gateway_port, auto_convert=True))
    jvm = gateway.jvm
    # The catalog writes each commit's metadata file with HadoopFileIO on a local warehouse.
    no_local_checksums(jvm, jvm.org.apache.hadoop.conf.Configuration())
    config = jvm.java.util.HashMap()
    for key, value in properties.items():
        config.put(key, value)
    # RESTCatalogServer's own steps (its constructor, initializeBackendCatalog, the adapter that vends
    # credentials) are package-private: reached by reflection, so the catalog behaves exactly as
    # the image's; only the connector differs.
    reflect = jvm.java.lang.Class
    server_cls = reflect.forName("org.apache.iceberg.rest.RESTCatalogServer")
    map_cls = reflect.forName("java.util.Map")
    ctor = _declared(gateway, server_cls, [map_cls])
    ctor.setAccessible(True)
    server = ctor.newInstance(_objects(gateway, [config]))
    init = server_cls.getDeclaredMethod("initializeBackendCatalog", gateway.new_array(jvm.java.lang.Class, 0))
    init.setAccessible(True)
    context = init.invoke(server, gateway.new_array(jvm.java.lang.Object, 0))
    adapter_cls = reflect.forName("org.apache.iceberg.rest.RESTServerCatalogAdapter")
    context_cls = reflect.forName("org.apache.iceberg.rest.RESTCatalogServer$CatalogContext")
    adapter_ctor = _declared(gateway, adapter_cls, [context_cls])
    adapter_ctor.setAccessible(True)
    adapter = adapter_ctor.newInstance(_objects(gateway, [context]))

    # As RESTCatalogServer.start wires Jetty 12.1: the servlet, without sessions, behind gzip.
    jetty = jvm.org.eclipse.jetty
    servlet = jvm.org.apache.iceberg.rest.RESTCatalogServlet(adapter)
    handler = jetty.ee10.servlet.ServletContextHandler(jetty.ee10.servlet.ServletContextHandler.NO_SESSIONS)
    handler.addServlet(jetty.ee10.servlet.ServletHolder(servlet), "/*")
    compression = jetty.compression.server.CompressionHandler()
    compression.putCompression(jetty.compression.gzip.GzipCompression())
    handler.insertHandler(compression)
    http = jetty.server.Server()
    connector = jetty.server.ServerConnector(http)
    connector.setHost(LOOPBACK)
    connector.setPort(free_port() if client_secret else port)
    http.addConnector(connector)
    http.setHandler(handler)
    http.start()
    if client_secret:
        tokens = catalog_auth.Tokens(CATALOG_CLIENT_ID, client_secret, token_lifetime_s)
        catalog_auth.serve(port, connector.getLocalPort(), tokens, LOOPBACK)
    print(f"Apache Iceberg REST catalog serving on http://{LOOPBACK}:{port}"
          + (" (OAuth2 client credentials, bearer tokens)" if client_secret else ""), flush=True)

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    # The stop signalled the whole process group: the JVM is stopping on its own SIGTERM, and
    # py4j calls into it would only fail. Its stdin closing with this process ends it otherwise.
    os._exit(0)


def _declared(gateway: Any, cls: Any, parameter_types: list[Any]) -> Any:
    types = gateway.new_array(gateway.jvm.java.lang.Class, len(parameter_types))
    for i, t in enumerate(parameter_types):
        types[i] = t
    return cls.getDeclaredConstructor(types)


def _objects(gateway: Any, values: list[Any]) -> Any:
    array = gateway.new_array(gateway.jvm.java.lang.Object, len(values))
    for i, v in enumerate(values):
        array[i] = v
    return array


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="sinklab's embedded Iceberg REST catalog (Apache's server)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--properties-file", required=True, help="JSON object of catalog properties")
    parser.add_argument("--stack-dir", required=True, help="the workdir of the stack this server belongs to")
    parser.add_argument("--client-secret", help="a reference to the OAuth2 client's secret (${file:PATH:KEY}, "
                        "${env:NAME}): clients must log in")
    parser.add_argument("--token-lifetime-s", type=float, default=3600)
    args = parser.parse_args(argv)
    secret = resolve(args.client_secret, "--client-secret") if args.client_secret else None
    serve(args.port, json.loads(Path(args.properties_file).read_text()), secret, args.token_lifetime_s)


if __name__ == "__main__":
    main()
