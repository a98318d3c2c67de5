"""A Kafka refusal as ``AccessDenied``: the login (SASL), the connection (TLS) or a grant (an ACL), told
apart by librdkafka's error codes, never by its text; and ``probe``, which a client that is about to start
work runs first, so that a refusal stops it at once, named, instead of as a timeout in the middle of a cycle.

Nothing here is tried again (``sinklab.retry.transient`` says no to ``AccessDenied``): the same
credentials are refused again. A message never carries a secret (``hidden.scrub``)."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from sinklab.exceptions import AccessDenied, KafkaUnavailable
from sinklab.security.hidden import is_secret, scrub

REFUSED = {
    KafkaError._AUTHENTICATION: "login",
    KafkaError.SASL_AUTHENTICATION_FAILED: "login",
    KafkaError._SSL: "tls",
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "group",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional-id",
}


def refused(error: KafkaError | KafkaException | BaseException | None) -> str | None:
    """What a Kafka error refused (``REFUSED``), or None when it is no refusal."""
    if isinstance(error, KafkaException):
        error = error.args[0] if error.args else None
    return REFUSED.get(error.code()) if isinstance(error, KafkaError) else None


def denied(error: KafkaError | KafkaException, settings: Mapping[str, Any], resource: str | None = None,
           sink: str | None = None) -> AccessDenied | None:
    """``AccessDenied`` for a refusal (``resource``: the topic, group or transactional id the call asked
    for), None for any other error."""
    what = refused(error)
    if what is None:
        return None
    err = error.args[0] if isinstance(error, KafkaException) else error
    return AccessDenied("kafka", str(settings.get("bootstrap.servers", "?")), what,
                        _detail(err.str(), what, settings), resource=resource if what != "login" else None, sink=sink)


def probe(settings: Mapping[str, Any], timeout_s: float, sink: str | None = None) -> None:
    """Ask the cluster for its metadata with ``settings`` (librdkafka's, resolved): return when it answers;
    raise ``AccessDenied`` when it refuses the login or the connection (a client that speaks no TLS to a
    TLS listener included), ``KafkaUnavailable`` when it does not answer, within ``timeout_s``."""
    from confluent_kafka.admin import AdminClient

    errors: list[KafkaError] = []
    conf = {k: v for k, v in settings.items() if k not in ("logger", "error_cb")}
    admin = AdminClient({**conf, "error_cb": errors.append, "log_level": 0,
                         "socket.timeout.ms": int(timeout_s * 1000)})
    protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    tls_asked = "SSL" in protocol
    # In steps: a refused login never answers the metadata request, it is reported to error_cb (by poll).
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            errors.append(exc.args[0])
        admin.poll(0)
        for err in errors:
            if (found := denied(err, settings, sink=sink)) is not None:
                raise found
        # A TLS listener drops a client that speaks no TLS, as a broker that is down would: asked once.
        if not tls_asked:
            tls_asked = True
            if address := _speaks_tls(str(settings.get("bootstrap.servers", ""))):
                raise AccessDenied("kafka", address, "tls", f"the listener speaks TLS and this client does not "
                                   f"(security.protocol={protocol}): give SSL or SASL_SSL and the CA it trusts",
                                   sink=sink)
        if time.monotonic() >= deadline:
            break
    last = errors[-1].str() if errors else "no answer"
    raise KafkaUnavailable(f"kafka at {settings.get('bootstrap.servers')} did not answer within {timeout_s:.0f}s "
                           f"({last})", sink=sink)


def _speaks_tls(bootstrap: str) -> str | None:
    """The first of ``bootstrap``'s addresses whose server answers a TLS handshake, if one does."""
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            continue
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            with socket.create_connection((host, int(port)), timeout=3) as raw, \
                    context.wrap_socket(raw, server_hostname=host):
                return address.strip()
        except (OSError, ssl.SSLError):
            continue
    return None


def _detail(text: str, what: str, settings: Mapping[str, Any]) -> str:
    """librdkafka's words, any secret of ``settings`` in them hidden, and what to check."""
    hint = {"login": "check the user and password (sasl.username, sasl.password or sasl.jaas.config) and "
                     "sasl.mechanism",
            "tls": "check the CA the client trusts (ssl.ca.location, or ssl.truststore.location as PEM)"}.get(
        what, "the principal needs an ACL for it (docs/production.md)")
    secrets = [str(v) for k, v in settings.items() if is_secret(k)]
    return f"{scrub(text, secrets)}; {hint}"
