"""The embedded stack with security on (``Stack.embedded(secure=True)``): a broker that asks every client for a
password over TLS, and what sinklab does with it: the pizza pipeline through it (the sink's consumer,
transactional producer and admin, Spark's Kafka source, the generators, the readings), a connector's Java
settings translated, and each refusal (a wrong password, no TLS, an untrusted CA, a login without grants)
a named error that commits nothing, after which the right credentials pick up exactly where it stopped."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import once, order_ids, sink_config

from sinklab.exceptions import EXIT_DENIED, AccessDenied
from sinklab.generators import PizzaGenerator
from sinklab.readings import consumer_lag, control_log, record_times
from sinklab.security import properties
from sinklab.sink import IcebergSink
from sinklab.stack import Stack, tls

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("secure")]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with Stack.embedded(tmp_path_factory.mktemp("secure"), secure=True) as s:
        yield s


def passwords(stack: Stack) -> dict[str, str]:
    assert stack.workdir is not None
    return properties((stack.workdir / tls.SECRETS_FILE).read_text())


def test_stack_json_names_every_secret_by_reference(secure: Stack, tmp_path: Path) -> None:
    text = secure.write(tmp_path / "stack.json").read_text()
    for name, password in passwords(secure).items():
        assert password not in text, name
    info = json.loads(text)
    assert info["secure"] is True
    security = info["kafka_security"]
    assert security["security.protocol"] == "SASL_SSL" and security["sasl.username"] == tls.KAFKA_USER
    assert security["sasl.password"].startswith("${file:") and security["sasl.password"].endswith(":kafka.sinklab}")
    assert secure.workdir is not None
    for private in (tls.SECRETS_FILE, tls.BROKER_PEM):
        assert stat.S_IMODE(os.stat(secure.workdir / private).st_mode) == 0o600, private
    # The broker's own config names its password by reference too.
    server = (secure.workdir / "broker" / "server.properties").read_text()
    assert passwords(secure)["kafka.admin"] not in server and "${file:" in server


def test_the_pizza_pipeline_runs_on_a_broker_that_asks_for_a_password(secure: Stack, unique: str) -> None:
    secure.create_topic(unique, partitions=2)
    PizzaGenerator(seed=3).produce(secure, unique, count=500, partitions=2).wait()
    result = once(secure, sink_config(unique))
    assert result.records == 500
    assert len(set(order_ids(secure, f"{unique}.pizzas"))) == 500
    # The workbench's readers log in as the stack says.
    assert len(record_times(secure, unique)) == 500
    lag = consumer_lag(secure, f"connect-sink-{unique}", unique)
    assert int(lag["lag"].sum()) == 0 and int(lag["committed"].sum()) == 500
    log = control_log(secure, sink=f"sink-{unique}")
    assert list(log.loc[log["type"] == "commit-complete", "commit_id"]) == [result.commit_id]


def test_a_connectors_java_settings_log_in_as_written(secure: Stack, unique: str) -> None:
    """A published config's consumer.override.* keys are Java's (a JAAS config, a PEM truststore): the sink's
    librdkafka clients and Spark's Java one both log in with them."""
    assert secure.workdir is not None
    password = tls.reference(secure.workdir, "kafka.sinklab")
    PizzaGenerator(seed=4).produce(secure, unique, count=300, partitions=2).wait()
    config = sink_config(unique, **{
        "consumer.override.security.protocol": "SASL_SSL",
        "consumer.override.sasl.mechanism": "SCRAM-SHA-256",
        "consumer.override.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                              f'username="{tls.KAFKA_USER}" password="{password}";',
        "consumer.override.ssl.truststore.type": "PEM",
        "consumer.override.ssl.truststore.location": str(secure.workdir / tls.CA_FILE),
    })
    assert once(secure, config).records == 300


@pytest.mark.parametrize("override, refused", [
    ({"consumer.override.sasl.password": "not-the-password-4711"}, "login"),
    ({"consumer.override.security.protocol": "SASL_PLAINTEXT"}, "tls"),
    ({"consumer.override.ssl.ca.location": "OTHER_CA"}, "tls"),
], ids=["wrong-password", "no-tls", "untrusted-ca"])
def test_a_refused_connection_is_named_commits_nothing_and_the_right_one_resumes(
        secure: Stack, unique: str, tmp_path: Path, override: dict[str, str], refused: str) -> None:
    if override.get("consumer.override.ssl.ca.location") == "OTHER_CA":
        other_ca, _ = tls.certificates(tmp_path / "other")
        override = {"consumer.override.ssl.ca.location": str(other_ca)}
    PizzaGenerator(seed=5).produce(secure, unique, count=200, partitions=2).wait()
    with pytest.raises(AccessDenied) as e:
        IcebergSink(secure, sink_config(unique, **override)).run_once()
    assert (e.value.service, e.value.refused, e.value.address) == ("kafka", refused, secure.bootstrap_servers)
    assert e.value.exit_code == EXIT_DENIED and e.value.sink == f"sink-{unique}"
    for password in [*passwords(secure).values(), "not-the-password-4711"]:
        assert password not in str(e.value)
    assert not secure.catalog.table_exists(f"{unique}.pizzas")  # refused before anything was written
    assert once(secure, sink_config(unique)).records == 200
    assert len(order_ids(secure, f"{unique}.pizzas")) == 200


def test_a_topics_traffic_is_read_by_a_login_that_may_only_read_it(secure: Stack, unique: str) -> None:
    """`sinklab traffic`'s reader under ``guest``, granted nothing but reading the topic: its offsets,
    timestamps and a sample; it commits nothing, so it needs no group."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    from sinklab.generators import profile_topic
    from sinklab.security.references import resolve_all

    assert secure.workdir is not None
    secure.create_topic(unique, partitions=2)
    PizzaGenerator(seed=7).produce(secure, unique, count=300, partitions=2).wait()
    guest = {**secure.kafka_config(), "sasl.username": tls.KAFKA_GUEST,
             "sasl.password": resolve_all({"p": tls.reference(secure.workdir, "kafka.guest")})["p"]}
    with pytest.raises(ValueError, match=unique) as refused:  # not even described without a grant
        profile_topic(guest, unique, window_s=600, bucket_s=60, sample=50)
    assert "authoriz" in str(refused.value).lower(), refused.value
    admin = secure.admin()
    for future in admin.create_acls([AclBinding(
            ResourceType.TOPIC, unique, ResourcePatternType.LITERAL, f"User:{tls.KAFKA_GUEST}", "*",
            AclOperation.READ, AclPermissionType.ALLOW)]).values():
        future.result(30)
    shape = profile_topic(guest, unique, window_s=600, bucket_s=60, sample=50)
    assert shape.records == 300 and shape.sampled == 50 and 150 <= shape.value_bytes[5] <= 200


def test_a_login_without_grants_is_refused_naming_what(secure: Stack, unique: str) -> None:
    """``guest`` may log in and nothing more: the sink stops at the first grant it lacks, named; granted
    its transactional id, group and control topic, at its source topic."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    from sinklab.sink.config.keys import CONTROL_TOPIC

    assert secure.workdir is not None
    PizzaGenerator(seed=6).produce(secure, unique, count=50, partitions=1).wait()
    guest = {"consumer.override.sasl.username": tls.KAFKA_GUEST,
             "consumer.override.sasl.password": tls.reference(secure.workdir, "kafka.guest")}
    with pytest.raises(AccessDenied) as e:
        IcebergSink(secure, sink_config(unique, **guest)).run_once()
    assert (e.value.service, e.value.refused, e.value.resource) == (
        "kafka", "transactional-id", f"sinklab-sink-{unique}")
    assert e.value.resource in str(e.value)

    def allow(kind: ResourceType, name: str) -> AclBinding:
        return AclBinding(kind, name, ResourcePatternType.LITERAL, f"User:{tls.KAFKA_GUEST}", "*",
                          AclOperation.ALL, AclPermissionType.ALLOW)

    grants = [allow(ResourceType.TRANSACTIONAL_ID, f"sinklab-sink-{unique}"),
              allow(ResourceType.GROUP, f"connect-sink-{unique}"), allow(ResourceType.TOPIC, CONTROL_TOPIC)]
    admin = secure.admin()  # held: its futures end with it
    for future in admin.create_acls(grants).values():
        future.result(30)
    with pytest.raises(AccessDenied) as e:
        IcebergSink(secure, sink_config(unique, **guest)).run_once()
    assert (e.value.refused, e.value.resource) == ("topic", unique)


def test_the_catalog_asks_for_a_token_and_one_that_expires_mid_run_is_renewed(secure: Stack, unique: str) -> None:
    """The catalog answers nobody without a bearer token; its tokens expire (here every 3 s) and the
    sink's clients (Spark's Iceberg catalog, pyiceberg) get new ones as they go: no cycle fails on one."""
    import time

    import requests

    from sinklab.stack.catalog import EmbeddedCatalog

    assert requests.get(f"{secure.info.catalog_uri}/v1/config", timeout=5).status_code == 401
    assert secure.workdir is not None and secure._catalog_server is not None
    old = secure._catalog_server
    old.stop()
    short = EmbeddedCatalog(secure.workdir, port=old.port, secure=True, token_lifetime_s=3)
    secure._catalog_server = short
    short.start()
    sink = IcebergSink(secure, sink_config(unique))
    try:
        for round_ in range(3):
            PizzaGenerator(seed=10 + round_).produce(secure, unique, count=100, partitions=1).wait()
            result = sink.run_once()
            assert result is not None and result.records == 100
            time.sleep(4)  # every token either client holds has expired
        assert len(order_ids(secure, f"{unique}.pizzas")) == 300
    finally:
        sink.stop()
        short.stop()
        secure._catalog_server = old
        old.start()


def test_no_secret_is_written_anywhere_the_story_leaves_a_trace(secure: Stack, unique: str, tmp_path: Path) -> None:
    """The pizza story on the secure stack, with a connector config that carries a literal password (as
    published configs do) and bad records: dead letters to a topic and a table, a replay, a fresh read, the
    frames, `sink status`, the Connect API's answers, a refused login's error. Then every place the issue
    names is searched for every secret the stack has: logs, errors, status, table properties and snapshot
    summaries, control events, dead letters (table rows, topic records and headers), Connect's answers."""
    import requests
    from confluent_kafka import Producer

    from sinklab import fresh
    from sinklab.connect.report import format_reports, sink_reports
    from sinklab.readings import commits
    from sinklab.sink.config.keys import CONTROL_TOPIC
    from sinklab.sink.wire import TopicReader

    secrets = passwords(secure)
    assert secure.workdir is not None and secure.info.connect_url is not None
    name = f"sink-{unique}"
    config = sink_config(unique, **{
        "consumer.override.sasl.password": secrets["kafka.sinklab"],  # a literal, as in a published config
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": f"{unique}-dlq",
        "errors.deadletterqueue.context.headers.enable": "true",
        "errors.deadletterqueue.table.name": f"{unique}.dead_letters"})
    secure.create_topic(unique, partitions=1)
    PizzaGenerator(seed=20).produce(secure, unique, count=100, partitions=1).wait()
    producer = Producer(secure.kafka_config())
    producer.produce(unique, b'{"order_id": "broken"', b"bad-key")  # malformed: a dead letter
    assert producer.flush(30) == 0
    traces: dict[str, str] = {}
    sink = IcebergSink(secure, config)
    try:
        result = sink.run_once()
        assert result is not None and result.records == 101
        traces["replay"] = repr(sink.replay())
        traces["sink status"] = format_reports(sink_reports(secure, [name]))
    finally:
        sink.stop()
    assert len(order_ids(secure, f"{unique}.pizzas")) == 100
    traces["fresh read"] = repr(fresh.read(secure, f"{unique}.pizzas", config).df.collect())
    traces["frames"] = commits(secure, sink=name).to_csv()
    with pytest.raises(AccessDenied) as refused:
        IcebergSink(secure, sink_config(unique, **{"consumer.override.sasl.password": "nope-123"})).run_once()
    traces["error"] = str(refused.value) + repr(refused.value.__dict__)

    # Connect's answers, for a connector created with the literal password (stopped: it need not run).
    auth = secure.info.connect_auth()
    url = secure.info.connect_url
    made = requests.post(f"{url}/connectors", auth=auth, timeout=30, json={
        "name": f"{name}-c", "config": {**config["config"], "connector.class": "org.apache.iceberg.connect."
                                        "IcebergSinkConnector"}, "initial_state": "STOPPED"})
    assert made.status_code == 201, made.text
    assert requests.get(f"{url}/connectors", timeout=10).status_code == 401  # no login, no answer
    for path in (f"/connectors/{name}-c/config", f"/connectors/{name}-c", f"/connectors/{name}-c/status",
                 "/connectors?expand=info&expand=status"):
        answer = requests.get(f"{url}{path}", auth=auth, timeout=10)
        assert answer.ok, answer.text
        traces[f"GET {path}"] = answer.text
    assert "[hidden]" in traces[f"GET /connectors/{name}-c/config"]
    requests.delete(f"{url}/connectors/{name}-c", auth=auth, timeout=30)

    for table in ("pizzas", "dead_letters"):
        loaded = secure.catalog.load_table((unique, table))
        traces[f"{table} properties"] = json.dumps(loaded.properties)
        traces[f"{table} snapshots"] = json.dumps([dict(s.summary.additional_properties) for s in
                                                   loaded.metadata.snapshots if s.summary])
    traces["dead-letter table"] = repr(secure.spark.table(f"sinklab.{unique}.dead_letters").collect())
    for topic in (CONTROL_TOPIC, f"{unique}-dlq"):
        with TopicReader(secure.kafka_config(), topic) as reader:
            traces[f"topic {topic}"] = repr([(m.key(), m.value(), m.headers()) for batch in reader.read(idle_s=1.0)
                                             for m in batch])
    assert "broken" in traces[f"topic {unique}-dlq"] and "broken" in traces["dead-letter table"]
    # Every log the stack's processes and this process's clients wrote, and the tables' metadata files.
    for path in [*(secure.workdir / "logs").rglob("*"), *secure.workdir.rglob("*.metadata.json"),
                 *secure.workdir.rglob("*.log")]:
        if path.is_file():
            traces[str(path)] = path.read_text(errors="replace")
    for secret_name, secret in [*secrets.items(), ("literal", "nope-123")]:
        for where, text in traces.items():
            assert secret not in text, f"{secret_name} in {where}"


def test_apaches_sink_runs_on_the_secure_stack_and_sinklab_takes_its_connector_over(secure: Stack,
                                                                                   unique: str) -> None:
    """Apache's sink 1.12 in a Connect worker logs in as the stack says (SASL_SSL through the worker's config
    providers, the catalog's OAuth2 client credentials by reference); sinklab takes the connector over
    under its name, and every record is in the table once."""
    import time
    from collections import Counter

    from sinklab.stack.apache_sink import ConnectWorker, connector_config, scratch_dir

    secure.create_topic(unique, partitions=2)
    PizzaGenerator(seed=30).produce(secure, unique, count=200, partitions=2).wait()
    config = sink_config(unique)
    name, table = config["name"], f"{unique}.pizzas"
    with ConnectWorker(secure, scratch_dir(secure)) as worker:
        theirs = connector_config(secure, name, unique, table, interval_ms=1000, tasks=1)
        theirs["iceberg.tables.auto-create-enabled"] = "true"
        worker.add(theirs)
        assert "${file:" in theirs["iceberg.catalog.credential"]  # resolved by the worker, not written
        deadline = time.monotonic() + 180
        while not (secure.catalog.table_exists(table) and
                   secure.catalog.load_table(table).scan().to_arrow().num_rows == 200):
            worker.check(name)
            assert time.monotonic() < deadline, "Apache's sink did not commit the 200 records"
            time.sleep(0.5)
        worker.remove(name)
    PizzaGenerator(seed=31).produce(secure, unique, count=100, partitions=2).wait()
    sink = IcebergSink(secure, config)
    try:
        for _ in range(3):
            sink.run_once()
    finally:
        sink.stop()
    counts = Counter(order_ids(secure, table))
    assert len(counts) == 300 and set(counts.values()) == {1}


def test_a_wrong_catalog_secret_or_an_expired_token_is_refused_named(secure: Stack) -> None:
    from sinklab.stack.catalog_auth import Tokens

    wrong = secure.info.model_copy(deep=True)
    wrong.catalog_properties["credential"] = f"{tls.CATALOG_CLIENT_ID}:wrong-secret-5150"
    # A bearer token of the stack's own signing that has expired, given alone: nothing can renew it.
    expired = Tokens(tls.CATALOG_CLIENT_ID, passwords(secure)["catalog.client-secret"], lifetime_s=-60).issue()
    stale = secure.info.model_copy(deep=True)
    stale.catalog_properties = {}
    stale.catalog_token = expired
    for info, secret in ((wrong, "wrong-secret-5150"), (stale, expired)):
        with pytest.raises(AccessDenied) as e:
            Stack(info).catalog  # noqa: B018 - the client logs in when it is made
        assert (e.value.service, e.value.refused, e.value.address) == ("catalog", "login", secure.info.catalog_uri)
        assert secret not in str(e.value)


def test_the_command_exits_8_on_a_refused_login_naming_it_without_the_secret(secure: Stack, unique: str,
                                                                            tmp_path: Path) -> None:
    from helpers import run_cli

    PizzaGenerator(seed=40).produce(secure, unique, count=10, partitions=1).wait()
    config = tmp_path / "sink.json"
    config.write_text(json.dumps(sink_config(unique, **{"consumer.override.sasl.password": "wrong-pw-8675309"})))
    done = run_cli("sink", "run", "--once", "--config", str(config), "--stack", str(secure.write(tmp_path / "s.json")))
    assert done.returncode == EXIT_DENIED, done.stderr
    assert f"kafka at {secure.bootstrap_servers} refused login" in done.stderr
    assert "wrong-pw-8675309" not in done.stderr + done.stdout
    help_text = run_cli("--help").stdout
    assert "8" in help_text and "refused" in help_text


def test_stack_up_secure_starts_it_and_says_how_to_log_in(tmp_path: Path) -> None:
    from helpers import run_cli

    from sinklab.stack import StackInfo, stop_recorded

    workdir = tmp_path / "up"
    up = run_cli("stack", "up", "--secure", "--workdir", str(workdir))
    written = workdir / "stack.json"
    info = StackInfo.model_validate_json(written.read_text()) if written.exists() else None
    try:
        assert up.returncode == 0, up.stderr
        assert info is not None and info.secure and info.kafka_security["security.protocol"] == "SASL_SSL"
        assert "kafka login        SASL_SSL SCRAM-SHA-256 as sinklab, password ${file:" in up.stdout
        for secret in properties((workdir / tls.SECRETS_FILE).read_text()).values():
            assert secret not in up.stdout + up.stderr + (workdir / "stack.json").read_text()
        # A client of the stack.json logs in; one without it is refused.
        from sinklab.security import probe

        client = Stack.from_file(workdir / "stack.json")
        probe(client.kafka_config(), 10)
        with pytest.raises(AccessDenied):
            probe({"bootstrap.servers": info.bootstrap_servers}, 10)
    finally:
        if info is not None:
            stop_recorded(info)
