"""Secrets by reference, what is shown of a secret, and Kafka's client settings in librdkafka's names and
Java's: pure logic (the secure stack's tests run them against a broker that asks for a password)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from sinklab.exceptions import ConfigError, SecretReferenceError
from sinklab.security import (
    HIDDEN,
    is_secret,
    java_settings,
    librdkafka_settings,
    redact,
    resolve,
    resolve_all,
    scrub,
    shown,
)
from sinklab.security.kafka import jaas_options
from sinklab.security.references import properties

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_references_resolve_from_the_environment_a_properties_file_and_a_directory(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    monkeypatch.setenv("SINKLAB_TEST_PASSWORD", "pa$$ word")
    (tmp_path / "kafka.properties").write_text("# users\nsasl.password = s3cr=t\nother: x\nlong=a\\\n  b\n")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "token").write_text("tok-123\n")
    assert resolve("${env:SINKLAB_TEST_PASSWORD}") == "pa$$ word"
    assert resolve(f"${{file:{tmp_path}/kafka.properties:sasl.password}}") == "s3cr=t"
    assert resolve(f"${{file:{tmp_path}/kafka.properties:long}}") == "ab"
    assert resolve(f"${{directory:{tmp_path}/secrets:token}}") == "tok-123"
    # Inside a longer value (a JAAS config), and every text value of a mapping; other values untouched.
    assert resolve('x password="${env:SINKLAB_TEST_PASSWORD}";') == 'x password="pa$$ word";'
    assert resolve_all({"a": "${env:SINKLAB_TEST_PASSWORD}", "b": 5, "c": "plain"}) == {
        "a": "pa$$ word", "b": 5, "c": "plain"}


def test_a_reference_that_names_nothing_is_a_clear_error_that_shows_no_value(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SINKLAB_NOT_SET", raising=False)
    with pytest.raises(SecretReferenceError) as e:
        resolve("${env:SINKLAB_NOT_SET}", "sasl.password")
    assert (e.value.key, e.value.reference) == ("sasl.password", "${env:SINKLAB_NOT_SET}")
    assert "not set" in e.value.problem
    assert isinstance(e.value, ConfigError)
    again = pickle.loads(pickle.dumps(e.value))
    assert (again.key, again.reference, again.problem) == (e.value.key, e.value.reference, e.value.problem)
    (tmp_path / "p.properties").write_text("user=alice\npassword=hunter22\n")
    with pytest.raises(SecretReferenceError) as e:
        resolve(f"${{file:{tmp_path}/p.properties:pass}}", "k")
    assert "has no key pass" in str(e.value) and "hunter22" not in str(e.value)
    with pytest.raises(SecretReferenceError, match="cannot read it"):
        resolve(f"${{file:{tmp_path}/missing.properties:password}}")
    with pytest.raises(SecretReferenceError, match="PATH:KEY"):
        resolve("${file:password}")


def test_properties_files_read_as_java_reads_them() -> None:
    assert properties("a=1\n  b : two words\n! comment\n#c=3\nd\ne=x\\\n   y\nf==g\n") == {
        "a": "1", "b": "two words", "d": "", "e": "xy", "f": "=g"}


@pytest.mark.parametrize("key", [
    "sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password", "sasl.jaas.config",
    "consumer.override.sasl.jaas.config", "iceberg.kafka.sasl.password", "iceberg.catalog.credential",
    "iceberg.catalog.token", "credential", "token", "s3.secret-access-key", "s3.session-token",
    "iceberg.catalog.header.Authorization", "ssl.keystore.key", "ssl.key.pem", "client_secret", "api.key"])
def test_secrets_are_known_by_their_names(key: str) -> None:
    assert is_secret(key)
    assert shown(key, "literal") == HIDDEN
    assert shown(key, "${env:NAME}") == "${env:NAME}"  # a reference says where, and is shown as written


@pytest.mark.parametrize("key", [
    "bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.username", "ssl.ca.location",
    "ssl.truststore.location", "ssl.key.location", "key.converter", "iceberg.catalog.uri", "s3.access-key-id",
    "iceberg.catalog.token-refresh-enabled", "iceberg.catalog.oauth2-server-uri", "ssl.ca.pem", "tokens.max"])
def test_other_settings_are_shown(key: str) -> None:
    assert not is_secret(key)
    assert shown(key, "value") == "value"


def test_redact_and_scrub() -> None:
    assert redact({"sasl.username": "alice", "sasl.password": "hunter22", "ssl.key.password": "${env:P}"}) == {
        "sasl.username": "alice", "sasl.password": HIDDEN, "ssl.key.password": "${env:P}"}
    assert scrub("login failed for alice:hunter22 (hunter22)", ["hunter22", ""]) == (
        f"login failed for alice:{HIDDEN} ({HIDDEN})")


def test_sasl_in_both_names() -> None:
    rdk = {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
           "sasl.username": "alice", "sasl.password": 'p"w\\d'}
    java = java_settings(rdk)
    assert java == {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.jaas.config": f'{SCRAM} required username="alice" password="p\\"w\\\\d";'}
    back = librdkafka_settings(java)
    assert back == {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                    "sasl.username": "alice", "sasl.password": 'p"w\\d'}
    plain = java_settings({"sasl.mechanism": "PLAIN", "sasl.username": "bob", "sasl.password": "x"})
    assert plain["sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.PlainLoginModule required")
    # Unquoted options, as some published configs write them.
    assert jaas_options(f"{SCRAM} required username=alice password=secret;") == {
        "username": "alice", "password": "secret"}
    with pytest.raises(ConfigError) as e:
        java_settings({"sasl.mechanism": "OAUTHBEARER", "sasl.username": "u"})
    assert e.value.key == "sasl.mechanism"


def test_tls_in_both_names(tmp_path: Path) -> None:
    assert java_settings({"ssl.ca.location": "/ca.pem"}) == {
        "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem"}
    assert librdkafka_settings({"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem"}) == {
        "ssl.ca.location": "/ca.pem"}
    assert java_settings({"ssl.ca.pem": "-----BEGIN"}) == {
        "ssl.truststore.type": "PEM", "ssl.truststore.certificates": "-----BEGIN"}
    assert librdkafka_settings({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": "-----BEGIN"}) == {
        "ssl.ca.pem": "-----BEGIN"}
    # Mutual TLS: one PEM file holding the key and its certificate, inline PEM, or PKCS#12.
    assert java_settings({"ssl.certificate.location": "/me.pem", "ssl.key.location": "/me.pem",
                          "ssl.key.password": "k"}) == {
        "ssl.keystore.type": "PEM", "ssl.keystore.location": "/me.pem", "ssl.key.password": "k"}
    assert librdkafka_settings({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/me.pem"}) == {
        "ssl.certificate.location": "/me.pem", "ssl.key.location": "/me.pem"}
    assert java_settings({"ssl.key.pem": "KEY", "ssl.certificate.pem": "CERT"}) == {
        "ssl.keystore.type": "PEM", "ssl.keystore.key": "KEY", "ssl.keystore.certificate.chain": "CERT"}
    assert librdkafka_settings({"ssl.keystore.type": "PEM", "ssl.keystore.key": "KEY",
                                "ssl.keystore.certificate.chain": "CERT"}) == {
        "ssl.key.pem": "KEY", "ssl.certificate.pem": "CERT"}
    assert java_settings({"ssl.keystore.location": "/me.p12", "ssl.keystore.password": "s"}) == {
        "ssl.keystore.location": "/me.p12", "ssl.keystore.password": "s", "ssl.keystore.type": "PKCS12"}
    assert librdkafka_settings({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/me.p12",
                                "ssl.keystore.password": "s"}) == {
        "ssl.keystore.location": "/me.p12", "ssl.keystore.password": "s"}
    # Host name checks off: librdkafka's "none" is Java's empty value.
    assert java_settings({"ssl.endpoint.identification.algorithm": "none"}) == {
        "ssl.endpoint.identification.algorithm": ""}
    assert librdkafka_settings({"ssl.endpoint.identification.algorithm": ""}) == {
        "ssl.endpoint.identification.algorithm": "none"}


def test_what_one_client_cannot_read_is_a_clear_error() -> None:
    with pytest.raises(ConfigError) as e:
        librdkafka_settings({"ssl.truststore.location": "/trust.jks"})
    assert e.value.key == "ssl.truststore.location" and "PEM" in e.value.problem
    with pytest.raises(ConfigError) as e:
        librdkafka_settings({"ssl.keystore.type": "JKS", "ssl.keystore.location": "/me.jks"})
    assert e.value.key == "ssl.keystore.type"
    with pytest.raises(ConfigError) as e:
        java_settings({"ssl.certificate.location": "/cert.pem", "ssl.key.location": "/key.pem"})
    assert e.value.key == "ssl.key.location"


def test_settings_the_other_client_lacks_stay_behind() -> None:
    import logging

    java = java_settings({"bootstrap.servers": "h:1", "logger": logging.getLogger("x"), "log_level": 4,
                          "enable.ssl.certificate.verification": False, "socket.timeout.ms": 100})
    assert java == {"bootstrap.servers": "h:1", "socket.timeout.ms": "100"}
    rdk = librdkafka_settings({"bootstrap.servers": "h:1", "ssl.truststore.type": "PEM",
                               "ssl.truststore.location": "/ca.pem", "ssl.enabled.protocols": "TLSv1.3",
                               "config.providers": "file"})
    assert rdk == {"bootstrap.servers": "h:1", "ssl.ca.location": "/ca.pem"}


def test_a_connectors_login_is_read_where_kafka_connect_users_write_it(monkeypatch) -> None:
    """``consumer.override.*`` and ``iceberg.kafka.*`` (every setting), ``producer.override.*`` and
    ``admin.override.*`` (their login, where the others give none), over the stack's; references resolved."""
    from sinklab.sink.config import load_config

    monkeypatch.setenv("SINKLAB_TEST_KAFKA_PASSWORD", "from-env")
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
            'password="${env:SINKLAB_TEST_KAFKA_PASSWORD}";')
    config = load_config({"name": "s", "config": {
        "topics": "t", "iceberg.tables": "n.t", "producer.override.security.protocol": "SASL_SSL",
        "producer.override.sasl.mechanism": "PLAIN", "producer.override.sasl.jaas.config": jaas,
        "producer.override.acks": "1", "admin.override.ssl.ca.location": "/admin-ca.pem",
        "consumer.override.ssl.ca.location": "/ca.pem", "iceberg.kafka.client.id": "me"}})
    assert config.kafka_settings({"bootstrap.servers": "h:1", "security.protocol": "PLAINTEXT"}) == {
        "bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": "u",
        "sasl.password": "from-env", "ssl.ca.location": "/ca.pem", "client.id": "me"}
    assert "from-env" not in config.shareable() and "admin-ca" not in config.shareable()
