"""Configuration: the Kafka Connect JSON a user has, validated with messages that name the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sinklab.demo import SEED_CONFIG
from sinklab.exceptions import ConfigError
from sinklab.sink.config.sink_config import from_connect, load_config


def test_seed_config_loads_verbatim() -> None:
    config = load_config(SEED_CONFIG)
    assert config.name == "pizzas-on-ice"
    assert config.topics == ["completed-pizzas"] and config.tables == ["rpc.pizzas"]
    assert config.catalog_name == "demo" and config.catalog_properties["uri"] == "http://iceberg-rest:8181"
    assert config.auto_create and config.evolve_schema and not config.schemas_enable
    assert config.commit_interval_ms == 180000
    assert any("connector.class" in n for n in config.notes)
    assert config.transactional_id == "sinklab-pizzas-on-ice" and config.group_id == "connect-pizzas-on-ice"


def test_a_topic_regex_never_reads_a_control_topic() -> None:
    config = from_connect("s", {"topics.regex": ".*", "iceberg.tables": "ns.t", "errors.tolerance": "all",
                                "errors.deadletterqueue.topic.name": "dlq-s"})
    assert config.reads_topic("pizzas") and config.reads_topic("payments.20260101")
    for log in ("control-sinklab", "control-iceberg", "dlq-s", "__consumer_offsets"):
        assert not config.reads_topic(log), log
    named = from_connect("s", {"topics": "control-iceberg,control-sinklab", "iceberg.tables": "ns.t"})
    assert named.reads_topic("control-iceberg")  # named, it is the user's to read: Apache's log as data
    assert not named.reads_topic("control-sinklab")  # its own log never


def test_wrapped_form_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    converter = "org.apache.kafka.connect.json.JsonConverter"
    path.write_text(json.dumps({"name": "s1", "config": {"topics": "a,b", "iceberg.tables": "ns.t",
                                                          "value.converter": converter, "some.unknown": "x"}}))
    config = load_config(path)
    assert config.name == "s1" and config.topics == ["a", "b"]
    assert config.schemas_enable  # JsonConverter's own default
    # A control topic of its own: Apache's sink fails on other records in its `control-iceberg`.
    assert config.commit_interval_ms == 300000 and config.control_topic == "control-sinklab"
    assert any("some.unknown" in n for n in config.notes)
    # Keys: JsonConverter's envelope by default (a tombstone's key names its row by the payload).
    keyed = {"topics": "a", "iceberg.tables": "ns.t", "key.converter": converter}
    assert from_connect("s", keyed).key_envelope and not config.key_envelope
    assert not from_connect("s", {**keyed, "key.converter.schemas.enable": "false"}).key_envelope
    assert not from_connect("s", {**keyed, "key.converter": "org.apache.kafka.connect.storage.StringConverter"}
                            ).key_envelope


@pytest.mark.parametrize(("conf", "key"), [
    ({"iceberg.tables": "ns.t"}, "topics"),
    ({"topics": "a"}, "iceberg.tables"),
    ({"topics": "a", "iceberg.tables": "flat"}, "iceberg.tables"),
    ({"topics": "a", "iceberg.tables": "ns.t", "iceberg.control.commit.interval-ms": "soon"},
     "iceberg.control.commit.interval-ms"),
    ({"topics": "a", "iceberg.tables": "ns.t", "iceberg.tables.auto-create-enabled": "yes"},
     "iceberg.tables.auto-create-enabled"),
    ({"topics": "a", "iceberg.tables": "ns.t",
      "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter"}, "value.converter"),
    ({"topics.regex": "logs.[", "iceberg.tables": "ns.t"}, "topics.regex"),
    ({"topics": "a", "iceberg.tables": "ns.t", "errors.tolerance": "some"}, "errors.tolerance"),
    ({"topics": "a", "iceberg.tables": "ns.t", "key.converter": "org.apache.kafka.connect.json.JsonConverter",
      "key.converter.schemas.enable": "maybe"}, "key.converter.schemas.enable"),
])
def test_bad_values_name_the_key(conf: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({"name": "s", **conf})
    assert str(info.value).startswith(key)


def test_topic_regex_matches_daily_topics() -> None:
    config = load_config({"name": "s", "topics.regex": r"logs\.\d{8}", "iceberg.tables": "ns.logs"})
    assert config.matches_topic("logs.20240102") and not config.matches_topic("logs.x")


@pytest.mark.parametrize(("conf", "key"), [
    ({"iceberg.tables.default-partition-by": "weekly(ts)"}, "iceberg.tables.default-partition-by"),
    ({"iceberg.table.ns.t.partition-by": "bucket(id)"}, "iceberg.table.ns.t.partition-by"),
    ({"iceberg.tables.route-field": "k", "iceberg.table.ns.t.route-regex": "a("}, "iceberg.table.ns.t.route-regex"),
    ({"iceberg.table.ns.t.route-regex": "a"}, "iceberg.table.ns.t.route-regex"),
    ({"errors.tolerance": "all"}, "errors.deadletterqueue.topic.name"),
    ({"transforms": "x", "transforms.x.type": "io.confluent.connect.transforms.ExtractTopic$Value"},
     "transforms.x.type"),
    ({"transforms": "x"}, "transforms.x.type"),
])
def test_routing_partition_and_transform_errors_name_the_key(conf: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({"name": "s", "topics": "a", "iceberg.tables": "ns.t", **conf})
    assert str(info.value).startswith(key)


def test_partition_fields_and_transforms_are_read() -> None:
    from sinklab.sink.config.transforms import Debezium, Flatten, KafkaMetadata

    config = load_config({
        "name": "s", "topics": "a", "iceberg.tables": "ns.t,ns.u",
        "iceberg.tables.default-partition-by": "day(ts), bucket(16, id)",
        "iceberg.table.ns.u.partition-by": "truncate(name, 4), region",
        "transforms": "meta,dbz",
        "transforms.meta.type": "org.apache.iceberg.connect.transforms.KafkaMetadataTransform",
        "transforms.meta.nested": "true",
        "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform",
        "transforms.dbz.cdc.target.pattern": "cdc.{table}", "sinklab.flatten.separator": "__",
    })
    assert [f.ddl for f in config.table_partition_by("ns.t")] == ["days(`ts`)", "bucket(16, `id`)"]
    assert [f.ddl for f in config.table_partition_by("ns.u")] == ["truncate(4, `name`)", "`region`"]
    assert config.transforms == [KafkaMetadata(alias="meta", nested=True),
                                 Debezium(alias="dbz", target_pattern="cdc.{table}"),
                                 Flatten(alias="sinklab.flatten", delimiter="__")]


def test_the_settings_a_sink_keeps_on_its_tables_hold_no_credentials_and_read_back() -> None:
    """SinkConfig.shareable: what sinklab.fresh reads from a table's sinklab.settings.<sink> property."""
    from sinklab.sink.config.sink_config import SinkConfig

    config = load_config({"name": "x", "config": {
        "topics": "t", "iceberg.tables": "a.b", "value.converter": "io.confluent.connect.avro.AvroConverter",
        "value.converter.schema.registry.url": "http://u:pw@reg:8081/api",
        "value.converter.basic.auth.user.info": "u:pw", "iceberg.catalog.uri": "http://catalog-host",
        "iceberg.catalog.credential": "id:secret", "iceberg.kafka.sasl.jaas.config": "jaas-secret",
        "transforms": "meta", "transforms.meta.type": "org.apache.iceberg.connect.transforms.KafkaMetadataTransform"}})
    kept = config.shareable()
    assert not any(secret in kept for secret in ("pw", "secret", "catalog-host", "jaas"))
    back = SinkConfig.model_validate_json(kept)
    assert back.value_registry is not None and back.value_registry.registry_url == "http://reg:8081/api"
    assert back.transforms == config.transforms and back.tables == ["a.b"] and back.group_id == config.group_id


APICURIO = "io.apicurio.registry.utils.converter.AvroConverter"


def test_apicurios_avro_converter_reads_its_frame_settings_and_refuses_what_it_cannot_honour() -> None:
    """Apicurio's AvroConverter: where the id is (headers, payload of 8 or 4 bytes), which id, the native API's
    URL and credentials; a serializer's settings are noted as changing nothing; what sinklab cannot read is
    refused, naming the key."""
    base = {"topics": "t", "iceberg.tables": "a.b", "value.converter": APICURIO,
            "value.converter.apicurio.registry.url": "http://reg:8080/apis/registry/v2"}
    config = from_connect("s", {**base, "value.converter.apicurio.registry.auto-register": "true",
                                "value.converter.apicurio.registry.find-latest": "true"})
    registry = config.value_registry
    assert registry is not None and registry.apicurio is not None and registry.format == "avro"
    assert registry.registry_url == "http://reg:8080/apis/registry/v2"
    assert (registry.apicurio.use_id, registry.apicurio.id_size, registry.apicurio.headers_enabled) == (
        "globalId", 8, True)  # Apicurio 2.x's defaults
    assert sorted(n.split(":")[0] for n in config.notes if "serializer" in n) == [
        "value.converter.apicurio.registry.auto-register", "value.converter.apicurio.registry.find-latest"]
    frame = from_connect("s", {**base, "value.converter.apicurio.registry.use-id": "contentId",
                               "value.converter.apicurio.registry.as-confluent": "true",
                               "value.converter.apicurio.registry.headers.enabled": "false",
                               "value.converter.apicurio.registry.headers.value.contentId.name": "cid",
                               "value.converter.apicurio.auth.username": "u",
                               "value.converter.apicurio.auth.password": "pw",
                               "value.converter.apicurio.registry.request.headers.Authorization": "Bearer t0k"}
                         ).value_registry
    assert frame is not None and frame.apicurio is not None
    assert (frame.apicurio.use_id, frame.apicurio.id_size, frame.apicurio.headers_enabled) == ("contentId", 4, False)
    assert frame.apicurio.header_names == {"contentId": "cid"} and frame.user_info == "u:pw"
    assert frame.apicurio.request_headers == {"Authorization": "Bearer t0k"}
    handler = from_connect("s", {**base, "value.converter.apicurio.registry.id-handler":
                                 "io.apicurio.registry.serde.Legacy4ByteIdHandler"}).value_registry
    assert handler is not None and handler.apicurio is not None and handler.apicurio.id_size == 4
    # Keys through Apicurio's converter take the values' registry; a Confluent one's URL is not Apicurio's API.
    keyed = from_connect("s", {**base, "key.converter": APICURIO})
    assert keyed.key_registry is not None and keyed.key_registry.registry_url == registry.registry_url
    mixed = from_connect("s", {**base, "key.converter": "io.confluent.connect.avro.AvroConverter"})
    assert mixed.key_registry is not None and mixed.key_registry.registry_url is None
    for prop, value in (("apicurio.registry.avro.encoding", "JSON"), ("apicurio.registry.use-id", "artifactId"),
                        ("apicurio.registry.id-handler", "com.example.MyIdHandler"),
                        ("apicurio.auth.service.url", "http://keycloak/auth"), ("apicurio.registry.url", "reg:8080")):
        with pytest.raises(ConfigError) as refused:
            from_connect("s", {**base, f"value.converter.{prop}": value})
        assert refused.value.key == f"value.converter.{prop}"


def test_apicurios_secrets_are_neither_shared_nor_shown() -> None:
    """A table's shared settings keep no request header or password; Connect's validate answer hides them."""
    from sinklab.connect.server import _config_info

    given = {"value.converter.apicurio.registry.request.headers.Authorization": "Bearer t0k",
             "value.converter.apicurio.auth.username": "u", "value.converter.apicurio.auth.password": "pw0rd"}
    config = from_connect("s", {"topics": "t", "iceberg.tables": "a.b", "value.converter": APICURIO, **given})
    assert "t0k" not in config.shareable() and "pw0rd" not in config.shareable()
    for key, value in given.items():
        shown = _config_info(key, value, [])["value"]["value"]
        assert shown == ("u" if key.endswith("username") else "[hidden]"), key
