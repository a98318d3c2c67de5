"""The older spellings Tabular's sink documented (its IcebergSinkConfig before Apache took it in), as
published configs still carry them: each read as its current key, with a note naming both."""

from __future__ import annotations

import pytest

from sinklab.connect.server import validate_response
from sinklab.exceptions import ConfigError
from sinklab.sink.config import keys
from sinklab.sink.config.sink_config import from_connect

BASE = {"topics": "pizzas", "iceberg.catalog.uri": "http://localhost:8181"}


@pytest.mark.parametrize(("older", "value", "field", "read"), [
    ("iceberg.control.commitIntervalMs", "1000", "commit_interval_ms", 1000),
    ("iceberg.control.commitTimeoutMs", "45000", "commit_timeout_ms", 45000),
    ("iceberg.tables.upsertModeEnabled", "true", "upsert_mode", True),
    ("iceberg.tables.cdcField", "_cdc.op", "cdc_field", "_cdc.op"),
])
def test_an_older_spelling_sets_what_its_current_key_sets(older: str, value: str, field: str, read: object) -> None:
    conf = {**BASE, "iceberg.tables": "rpc.pizzas", "iceberg.tables.default-id-columns": "id", older: value}
    config = from_connect("s", conf)
    assert getattr(config, field) == read
    current = keys.current_spelling(older)
    assert current is not None and keys.lookup(current) is not None
    assert any(older in n and current in n for n in config.notes)


def test_a_routed_config_in_the_older_spelling_routes() -> None:
    config = from_connect("s", {**BASE, "iceberg.tables": "rpc.margherita,rpc.other",
                                "iceberg.tables.routeField": "name",
                                "iceberg.table.rpc.margherita.routeRegex": "Margherita.*"})
    assert config.route_field == "name"
    assert config.route_regex == {"rpc.margherita": "Margherita.*"}
    assert any("iceberg.table.rpc.margherita.routeRegex" in n and "iceberg.table.rpc.margherita.route-regex" in n
               for n in config.notes)


def test_dynamic_routing_in_the_older_spelling() -> None:
    config = from_connect("s", {**BASE, "iceberg.tables.dynamic.enabled": "true", "iceberg.tables.routeField": "db"})
    assert config.dynamic_enabled and config.route_field == "db"


def test_an_older_spelling_ignored_as_its_current_key_is() -> None:
    config = from_connect("s", {**BASE, "iceberg.tables": "rpc.pizzas", "iceberg.control.commitThreads": "8"})
    assert any(n.startswith(f"{keys.COMMIT_THREADS}: accepted, not used") for n in config.notes)


def test_both_spellings_with_other_values_are_refused_naming_both() -> None:
    with pytest.raises(ConfigError) as raised:
        from_connect("s", {**BASE, "iceberg.tables": "rpc.pizzas", "iceberg.control.commitIntervalMs": "1000",
                           keys.COMMIT_INTERVAL_MS: "60000"})
    assert raised.value.key == "iceberg.control.commitIntervalMs" and keys.COMMIT_INTERVAL_MS in str(raised.value)
    same = from_connect("s", {**BASE, "iceberg.tables": "rpc.pizzas", "iceberg.control.commitIntervalMs": "1000",
                              keys.COMMIT_INTERVAL_MS: "1000"})
    assert same.commit_interval_ms == 1000


def test_an_invalid_value_in_the_older_spelling_names_the_key_as_written() -> None:
    with pytest.raises(ConfigError) as raised:
        from_connect("s", {**BASE, "iceberg.tables": "rpc.pizzas", "iceberg.control.commitIntervalMs": "soon"})
    assert raised.value.key == "iceberg.control.commitIntervalMs"


def test_a_current_key_is_no_older_spelling() -> None:
    assert all(keys.current_spelling(k.name) is None for k in keys.KEYS)


def test_connects_validate_answers_an_older_spelling_with_its_current_keys_definition() -> None:
    answer = validate_response("IcebergSinkConnector", {
        "name": "s", "connector.class": "io.tabular.iceberg.connect.IcebergSinkConnector", **BASE,
        "iceberg.tables": "rpc.pizzas", "iceberg.control.commitIntervalMs": "1000"})
    assert answer["error_count"] == 0
    info = next(c for c in answer["configs"] if c["definition"]["name"] == "iceberg.control.commitIntervalMs")
    assert info["definition"]["type"] == "INT" and info["value"]["value"] == "1000"
    assert keys.COMMIT_INTERVAL_MS in info["definition"]["documentation"]
    refused = validate_response("IcebergSinkConnector", {
        "name": "s", "connector.class": "io.tabular.iceberg.connect.IcebergSinkConnector", **BASE,
        "iceberg.tables": "rpc.pizzas", "iceberg.control.commitIntervalMs": "soon"})
    bad = next(c for c in refused["configs"] if c["definition"]["name"] == "iceberg.control.commitIntervalMs")
    assert refused["error_count"] == 1 and bad["value"]["errors"]
