"""Kafka client settings in librdkafka's names or Java's, from either's: the one place that translates.

sinklab's own clients (the sink's consumer, transactional producer and admin, the readers, the
generators) are librdkafka's; Spark's Kafka source and a Kafka Connect worker are Java's. A user writes
whichever they know: a connector's ``consumer.override.sasl.jaas.config`` and ``ssl.truststore.location``
are Java's, a stack.json written by hand may hold librdkafka's ``sasl.username`` and ``ssl.ca.location``.
Security settings differ between the two; the rest share their names (and a client of either ignores or
refuses the other's own, hence the translation both ways).

The pairs (each covered by a test, tests/test_security.py):

=====================================  ================================================================
librdkafka                             Java
=====================================  ================================================================
sasl.mechanisms / sasl.mechanism       sasl.mechanism
sasl.username + sasl.password          sasl.jaas.config (ScramLoginModule or PlainLoginModule)
ssl.ca.location (PEM)                  ssl.truststore.location + ssl.truststore.type=PEM
ssl.ca.pem                             ssl.truststore.certificates + ssl.truststore.type=PEM
ssl.certificate.location +             ssl.keystore.location + ssl.keystore.type=PEM (one file holding both)
ssl.key.location (one PEM file)
ssl.certificate.pem + ssl.key.pem      ssl.keystore.certificate.chain + ssl.keystore.key (type PEM)
ssl.keystore.location (PKCS#12)        ssl.keystore.location + ssl.keystore.type=PKCS12
ssl.endpoint.identification.algorithm  the same; librdkafka's ``none`` is Java's empty value
=====================================  ================================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sinklab.exceptions import ConfigError

JAAS = "sasl.jaas.config"
LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}
# Settings only one of the two clients has: dropped on the way to the other (a Java client warns of an
# unknown setting, librdkafka refuses it).
_LIBRDKAFKA_ONLY = {"sasl.username", "sasl.password", "sasl.mechanisms", "ssl.ca.location", "ssl.ca.pem",
                    "ssl.certificate.location", "ssl.key.location", "ssl.certificate.pem", "ssl.key.pem",
                    "enable.ssl.certificate.verification", "logger", "log_level", "error_cb", "stats_cb",
                    "oauth_cb", "throttle_cb", "on_delivery"}
_JAVA_ONLY = {JAAS, "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
              "ssl.truststore.certificates", "ssl.keystore.type", "ssl.keystore.certificate.chain", "ssl.keystore.key",
              "ssl.protocol", "ssl.enabled.protocols", "ssl.trustmanager.algorithm", "ssl.keymanager.algorithm",
              "sasl.login.callback.handler.class", "sasl.client.callback.handler.class", "config.providers"}
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^\s;"]+))')


def librdkafka_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` (either client's names) in librdkafka's: what a confluent-kafka client takes."""
    out = {k: v for k, v in settings.items() if k not in _JAVA_ONLY}
    if "sasl.mechanism" in out:
        out.setdefault("sasl.mechanisms", out.pop("sasl.mechanism"))
    if JAAS in settings and "sasl.username" not in out:
        options = jaas_options(str(settings[JAAS]))
        if "username" in options:
            out["sasl.username"] = options["username"]
        if "password" in options:
            out["sasl.password"] = options["password"]
    truststore = settings.get("ssl.truststore.location")
    if truststore and "ssl.ca.location" not in out:
        if str(settings.get("ssl.truststore.type", "JKS")).upper() != "PEM":
            raise ConfigError("ssl.truststore.location", "librdkafka (sinklab's Kafka clients) reads CA certificates "
                              "as PEM only: give the CA as ssl.truststore.type=PEM or as ssl.ca.location")
        out["ssl.ca.location"] = truststore
    if "ssl.truststore.certificates" in settings:
        out.setdefault("ssl.ca.pem", settings["ssl.truststore.certificates"])
    # librdkafka reads a keystore as PKCS#12 (its only kind); Java's default is JKS, named when it is one.
    keystore_type = str(settings.get("ssl.keystore.type", "PKCS12")).upper()
    if keystore_type == "PEM":
        if "ssl.keystore.location" in out:
            location = out.pop("ssl.keystore.location")
            out.setdefault("ssl.certificate.location", location)
            out.setdefault("ssl.key.location", location)
        if "ssl.keystore.key" in settings:
            out.setdefault("ssl.key.pem", settings["ssl.keystore.key"])
            out.setdefault("ssl.certificate.pem", settings.get("ssl.keystore.certificate.chain"))
    elif keystore_type != "PKCS12" and "ssl.keystore.location" in settings:
        raise ConfigError("ssl.keystore.type", f"librdkafka (sinklab's Kafka clients) reads keystores as PKCS12 or "
                          f"PEM, not {keystore_type}")
    if out.get("ssl.endpoint.identification.algorithm") == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    return {k: v for k, v in out.items() if v is not None}


def java_settings(settings: Mapping[str, Any]) -> dict[str, str]:
    """``settings`` (either client's names) in Java's: what Spark's Kafka source (as ``kafka.*`` options)
    and a Kafka Connect worker take. Only text values: callbacks and loggers stay behind."""
    out = {k: str(v) for k, v in settings.items()
           if k not in _LIBRDKAFKA_ONLY and isinstance(v, str | int | float | bool)}
    mechanism = settings.get("sasl.mechanism") or settings.get("sasl.mechanisms")
    if mechanism:
        out["sasl.mechanism"] = str(mechanism)
    if "sasl.username" in settings and JAAS not in out:
        module = LOGIN_MODULES.get(str(mechanism or "GSSAPI").upper())
        if module is None:
            raise ConfigError("sasl.mechanism", f"sinklab writes a JAAS config for PLAIN and SCRAM only, "
                              f"not {mechanism}: give {JAAS} for it")
        out[JAAS] = (f'{module} required username="{_quoted(settings["sasl.username"])}" '
                     f'password="{_quoted(settings.get("sasl.password", ""))}";')
    if "ssl.ca.location" in settings and "ssl.truststore.location" not in out:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = str(settings["ssl.ca.location"])
    if "ssl.ca.pem" in settings and "ssl.truststore.certificates" not in out:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.certificates"] = str(settings["ssl.ca.pem"])
    cert, key = settings.get("ssl.certificate.location"), settings.get("ssl.key.location")
    if (cert or key) and "ssl.keystore.location" not in out:
        if cert != key:
            raise ConfigError("ssl.key.location", "a Java client reads a PEM key and its certificate from one file: "
                              "give ssl.certificate.location and ssl.key.location as the same file, or a PKCS12 "
                              "ssl.keystore.location")
        out["ssl.keystore.type"] = "PEM"
        out["ssl.keystore.location"] = str(cert)
    if "ssl.key.pem" in settings and "ssl.keystore.key" not in out:
        out["ssl.keystore.type"] = "PEM"
        out["ssl.keystore.key"] = str(settings["ssl.key.pem"])
        out["ssl.keystore.certificate.chain"] = str(settings.get("ssl.certificate.pem", ""))
    if "ssl.keystore.location" in settings and "ssl.keystore.type" not in out:
        out["ssl.keystore.type"] = "PKCS12"
    if out.get("ssl.endpoint.identification.algorithm") == "none":
        out["ssl.endpoint.identification.algorithm"] = ""
    return out


def jaas_options(jaas: str) -> dict[str, str]:
    """The options of a JAAS login module's config (``username``, ``password``, ...), unquoted."""
    _, _, rest = jaas.partition(" required")
    return {m.group(1): re.sub(r"\\(.)", r"\1", m.group(2)) if m.group(2) is not None else m.group(3)
            for m in _JAAS_OPTION.finditer(rest)}


def _quoted(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"')
