"""Generators without Kafka: reproducible streams, field shapes and distributions, CDC, drift, bad records,
spec errors, and the rate schedule under a fake clock."""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sinklab.generators import (
    BAD_KINDS,
    CdcGenerator,
    Generator,
    PaymentGenerator,
    PizzaGenerator,
    RateSchedule,
    SpecError,
    builtin_specs,
    pizza_events,
)
from sinklab.generators.produce import Pacer, daily_topic, rate_schedule

REPO = Path(__file__).resolve().parent.parent
SAUCES = {"regular", "light", "extra", "none", "bbq", "alfredo"}


def values(gen: Generator, n: int) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for r in gen.records(n)]


# ---- reproducible

@pytest.mark.parametrize("make", [
    lambda seed: PizzaGenerator(seed=seed),
    lambda seed: PaymentGenerator(seed=seed),
    lambda seed: CdcGenerator(seed=seed),
    lambda seed: CdcGenerator(seed=seed, format="debezium", snapshot=20),
    lambda seed: PizzaGenerator(seed=seed, bad_records=0.2, route={"mix": {"a": 1, "b": 1}},
                                drift=[{"after": 50, "add": {"coupon": {"kind": "uuid"}}}]),
])
def test_same_seed_same_records(make: Any) -> None:
    assert values(make(3), 300) == values(make(3), 300)
    assert values(make(3), 300) != values(make(4), 300)


def test_sample_is_the_start_of_the_stream() -> None:
    gen = PaymentGenerator(seed=5)
    df = gen.sample(50)
    assert list(df.columns) == ["id", "type", "created_at", "document", "payer", "amount"]
    assert df.to_dict("records") == [json.loads(v) for _, v in values(gen, 50)]
    assert "_bad" not in df.columns


def test_builtin_specs_are_the_documented_files() -> None:
    assert builtin_specs() == ["cdc", "payments", "pizzas"]
    # One source: the package's specs are data-generators/ itself.
    for name in builtin_specs():
        assert (REPO / "data-generators" / f"{name}.yaml").is_file()
    assert values(Generator.from_spec(REPO / "data-generators" / "pizzas.yaml"), 20) == values(PizzaGenerator(), 20)


# ---- the seeds' shapes and distributions

def test_pizzas_shape_and_busy_stores() -> None:
    events = list(PizzaGenerator(seed=11).events(20_000))
    assert list(events[0]) == ["order_id", "store_id", "sauce", "cheese", "meats", "veggies", "date_ordered"]
    assert all(uuid.UUID(e["order_id"]).version == 4 for e in events[:100])
    assert len({e["order_id"] for e in events}) == len(events)
    assert {e["sauce"] for e in events} == SAUCES
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", e["date_ordered"]) for e in events)
    assert [e["date_ordered"] for e in events] == sorted(e["date_ordered"] for e in events)
    stores = Counter(e["store_id"] for e in events)
    assert set(stores) <= set(range(1, 101)) and len(stores) == 100
    # zipf(0.8) over 100 stores: store 1 has ~12.3% of the orders, store 100 ~0.3%.
    share = stores[1] / len(events)
    assert 0.11 < share < 0.135
    assert stores.most_common(1)[0][0] == 1
    assert stores[1] > 10 * stores[100]
    # The compatibility helper is the same stream.
    assert list(pizza_events(100, seed=11)) == events[:100]


def test_pizza_stores_configurable() -> None:
    assert {e["store_id"] for e in PizzaGenerator(stores=3).events(500)} == {1, 2, 3}


def test_payments_shape_and_uniform_types() -> None:
    events = list(PaymentGenerator(seed=2).events(9000))
    types = Counter(e["type"] for e in events)
    assert set(types) == {"debit", "credit", "bank_slip"}
    assert all(2700 < c < 3300 for c in types.values())
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", e["created_at"]) for e in events)
    assert events[0]["created_at"] == "2024-02-29T12:23:03" and events[1]["created_at"] == "2024-02-29T12:23:04"
    documents = {e["document"] for e in events}
    assert all(isinstance(d, str) for d in documents) and {int(d) for d in documents} == set(range(1, 101))
    amounts = [e["amount"] for e in events]
    assert min(amounts) >= 10 and max(amounts) <= 10000 and 4500 < sum(amounts) / len(amounts) < 5500
    titled = sum(e["payer"].split()[0] in {"Mr.", "Mrs.", "Ms.", "Miss", "Dr."} for e in events)
    assert 0.45 < titled / len(events) < 0.55
    assert all(len(e["payer"].split()) >= 2 for e in events)


def test_weighted_choice_and_route_mix() -> None:
    gen = CdcGenerator(seed=1, route={"field": "dest", "mix": {"orders": 7, "refunds": 2, "audit": 1}})
    events = list(gen.events(20_000))
    inserts = [e for e in events if e["op"] == "I"]
    tiers = Counter(e["tier"] for e in inserts)
    assert abs(tiers["bronze"] / len(inserts) - 0.6) < 0.03 and abs(tiers["gold"] / len(inserts) - 0.1) < 0.02
    dests = Counter(e["dest"] for e in events)
    assert abs(dests["orders"] / len(events) - 0.7) < 0.03 and abs(dests["audit"] / len(events) - 0.1) < 0.02
    pizzas = Counter(e["t"] for e in PizzaGenerator(route={"field": "t", "mix": {"a": 1, "b": 3}}).events(8000))
    assert abs(pizzas["b"] / 8000 - 0.75) < 0.03


# ---- CDC

def replay_flat(events: list[dict[str, Any]], key: str = "id", op: str = "op") -> dict[int, dict[str, Any]]:
    table: dict[int, dict[str, Any]] = {}
    for e in events:
        k = e[key]
        if e[op] == "I":
            assert k not in table, f"insert of live key {k}"
            table[k] = e
        elif e[op] == "U":
            assert k in table, f"update of missing key {k}"
            table[k] = e
        else:
            assert e[op] == "D" and k in table, f"delete of missing key {k}"
            del table[k]
    return table


def test_cdc_flat_targets_live_keys_only() -> None:
    gen = CdcGenerator(seed=4, key_space=200, mix={"I": 0.4, "U": 0.4, "D": 0.2})
    records = list(gen.records(10_000))
    events = [r.event for r in records]
    table = replay_flat(events)
    assert 0 < len(table) <= 200
    assert all(1 <= e["id"] <= 200 for e in events)
    assert all(r.key == str(r.event["id"]).encode() for r in records)
    ops = Counter(e["op"] for e in events)
    # Inserts into a full key space become updates, so only U/D are exact-ish; D stays near its weight.
    assert abs(ops["D"] / len(events) - 0.2) < 0.02
    assert ops["I"] + ops["U"] + ops["D"] == 10_000
    # Keys come back after their delete.
    deleted = {e["id"] for e in events if e["op"] == "D"}
    assert any(e["op"] == "I" and e["id"] in deleted for e in events[len(events) // 2:])


def test_cdc_unbounded_keys_are_new_and_op_field_configurable() -> None:
    events = list(CdcGenerator(seed=2, key_space=None, op_field="__op", mix={"I": 1, "U": 1, "D": 1},
                               ).events(3000))
    inserted = [e["id"] for e in events if e["__op"] == "I"]
    assert inserted == list(range(1, len(inserted) + 1))
    replay_flat(events, op="__op")
    ops = Counter(e["__op"] for e in events)
    assert all(900 < ops[o] < 1100 for o in "IUD")


def test_cdc_debezium_envelope() -> None:
    events = list(CdcGenerator(seed=6, format="debezium", snapshot=50, key_space=100).events(3000))
    assert [e["op"] for e in events[:50]] == ["r"] * 50
    assert set(e["op"] for e in events[50:]) == {"c", "u", "d"}
    rows: dict[int, dict[str, Any]] = {}
    for e in events:
        assert e["source"] == {"db": "shop", "table": "customers"}
        if e["op"] in ("r", "c"):
            assert e["before"] is None and e["after"]["id"] not in rows
            rows[e["after"]["id"]] = e["after"]
        elif e["op"] == "u":
            assert e["before"] == rows[e["after"]["id"]]
            rows[e["after"]["id"]] = e["after"]
        else:
            assert e["after"] is None and e["before"] == rows.pop(e["before"]["id"])
    stamps = [e["ts_ms"] for e in events]
    assert stamps == sorted(stamps) and stamps[0] == 1704369600000


def test_cdc_update_fields() -> None:
    gen = Generator("cdc", cdc={"update_fields": ["balance"], "key_space": 50})
    table: dict[int, dict[str, Any]] = {}
    for e in gen.events(2000):
        if e["op"] == "U":
            before = table[e["id"]]
            assert {k for k in e if e[k] != before[k]} <= {"balance", "op"}
        if e["op"] == "D":
            table.pop(e["id"])
        else:
            table[e["id"]] = e


# ---- drift

def test_drift_field_appears_and_type_widens() -> None:
    gen = PizzaGenerator(seed=9, drift=[
        {"after": 100, "add": {"coupon": {"kind": "choice", "values": ["SPRING", "NONE"]}}},
        {"after": 250, "widen": {"store_id": "long"}},
    ])
    events = list(gen.events(400))
    assert all("coupon" not in e for e in events[:100]) and all("coupon" in e for e in events[100:])
    assert all(e["store_id"] <= 100 for e in events[:250])
    assert all(e["store_id"] > 2**31 for e in events[250:])
    # Drift leaves every other field as it was.
    plain = list(PizzaGenerator(seed=9).events(400))
    assert [e["order_id"] for e in events] == [e["order_id"] for e in plain]
    assert [e["store_id"] for e in events[:250]] == [e["store_id"] for e in plain[:250]]


def test_drift_double() -> None:
    gen = Generator({"name": "m", "fields": {"x": {"kind": "int", "max": 9}, "f": {"kind": "float", "max": 1}},
                     "drift": [{"after": 3, "widen": {"x": "double", "f": "double"}}]})
    events = list(gen.events(50))
    assert all(isinstance(e["x"], int) and e["f"] <= 1 for e in events[:3])
    assert all(isinstance(e["x"], float) and not e["x"].is_integer() for e in events[3:])
    assert all(e["f"] > 3.5e38 for e in events[3:] if e["f"] != 0)


# ---- bad records

def check_bad(kind: str, value: bytes | None, event: dict[str, Any], spec_key: str = "order_id") -> None:
    if kind == "tombstone":
        assert value is None
        return
    assert value is not None
    if kind == "undecodable":
        with pytest.raises(UnicodeDecodeError):
            value.decode("utf-8")
        return
    text = value.decode("utf-8")
    if kind == "malformed-json":
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)
        return
    parsed = json.loads(text)
    if kind == "not-an-object":
        assert isinstance(parsed, list)
        return
    assert parsed == event
    if kind == "type-mismatch":
        assert isinstance(parsed["store_id"], str) and not parsed["store_id"].lstrip("-").isdigit()
    elif kind == "out-of-range":
        assert parsed["store_id"] >= 2**64
    elif kind == "missing-required":
        assert spec_key not in parsed
    elif kind == "no-table":
        assert parsed["table"] not in {"a", "b"}
    else:
        raise AssertionError(kind)


def test_bad_records_every_kind_at_the_ratio() -> None:
    gen = PizzaGenerator(seed=12, bad_records=0.1, route={"field": "table", "mix": {"a": 1, "b": 1}})
    records = list(gen.records(20_000))
    bad = [r for r in records if r.bad]
    assert 1800 < len(bad) < 2200
    kinds = Counter(r.bad for r in bad)
    assert set(kinds) == set(BAD_KINDS)
    assert all(180 < c < 320 for c in kinds.values())
    for r in bad:
        check_bad(r.bad or "", r.value, r.event)
        assert r.key is not None  # a bad value still has its key, even a tombstone
    # Good records are the ones a clean run makes: bad records replace events, they do not shift them.
    clean = list(PizzaGenerator(seed=12, route={"field": "table", "mix": {"a": 1, "b": 1}}).records(20_000))
    assert all(r.value == c.value for r, c in zip(records, clean, strict=True) if not r.bad)
    df = gen.sample(500)
    assert list(df["_bad"].dropna()) == [r.bad for r in records[:500] if r.bad]


def test_bad_records_chosen_kinds_and_fields() -> None:
    gen = PaymentGenerator(seed=1, bad_records={"ratio": 0.5, "kinds": {"type-mismatch": 1, "missing-required": 3},
                                                "field": "amount", "required": "payer"})
    bad = [r for r in gen.records(4000) if r.bad]
    kinds = Counter(r.bad for r in bad)
    assert set(kinds) == {"type-mismatch", "missing-required"}
    assert 2.5 < kinds["missing-required"] / kinds["type-mismatch"] < 3.5
    for r in bad:
        if r.bad == "type-mismatch":
            assert isinstance(r.event["amount"], str)
        else:
            assert "payer" not in r.event and "amount" in r.event


def test_bad_records_in_debezium_corrupt_the_row() -> None:
    gen = CdcGenerator(seed=3, format="debezium",
                       bad_records={"ratio": 0.3, "kinds": ["out-of-range", "missing-required"]})
    bad = [r for r in gen.records(300) if r.bad]
    assert bad
    for r in bad:
        row = r.event["after"] if r.event["after"] is not None else r.event["before"]
        if r.bad == "missing-required":
            assert "id" not in row and r.key is not None
        else:
            assert row["balance"] >= 2**64
        assert json.loads(r.value or b"") == r.event


# ---- the spec language

def test_field_kinds() -> None:
    gen = Generator({"name": "kinds", "seed": 1, "key": "n", "fields": {
        "n": {"kind": "sequence", "start": 10, "step": 5},
        "c": {"kind": "constant", "value": {"v": 1}},
        "ref": {"kind": "template", "template": "order-{n}-{c[v]}"},
        "obj": {"kind": "object", "fields": {"a": {"kind": "bool", "ratio": 1}, "b": {"kind": "name", "part": "last"}}},
        "tags": {"kind": "array", "items": {"kind": "choice", "values": ["x", "y"]}, "min_items": 1, "max_items": 2},
        "price": {"kind": "float", "min": 1, "max": 2, "decimals": 1},
        "ms": {"kind": "timestamp", "format": "epoch_ms", "start": "2024-01-01T00:00:00", "step": 2},
        "iso": {"kind": "timestamp", "format": "iso", "start": "2024-01-01T00:00:00", "step": 0.5},
        "maybe": {"kind": "uuid", "null_ratio": 0.5},
        "code": {"kind": "int", "max": 9, "as_string": True},
    }})
    events = list(gen.events(400))
    assert [e["n"] for e in events[:3]] == [10, 15, 20]
    assert events[1]["ref"] == "order-15-1" and events[0]["c"] == {"v": 1}
    assert all(e["obj"]["a"] is True and isinstance(e["obj"]["b"], str) for e in events)
    assert all(1 <= len(e["tags"]) <= 2 and set(e["tags"]) <= {"x", "y"} for e in events)
    assert all(1 <= e["price"] <= 2 and round(e["price"], 1) == e["price"] for e in events)
    assert events[0]["ms"] == 1704067200000 and events[1]["ms"] == 1704067202000
    assert events[1]["iso"] == "2024-01-01T00:00:00.500000"
    assert 150 < sum(e["maybe"] is None for e in events) < 250
    assert all(isinstance(e["code"], str) for e in events)
    assert next(gen.records(1)).key == b"10"


@pytest.mark.parametrize(("spec", "message"), [
    ({"name": "x", "fields": {"a": {"kind": "int", "maxx": 3}}}, "fields.a.max: Field required"),
    ({"name": "x", "fields": {"a": {"kind": "int", "max": 3, "maxx": 3}}}, "fields.a.maxx: Extra inputs"),
    ({"name": "x", "fields": {"a": {"kind": "integer", "max": 3}}}, "fields.a: Input tag 'integer'"),
    ({"name": "x", "fields": {"a": {"kind": "int", "min": 5, "max": 3}}}, "min (5) is greater than max (3)"),
    ({"name": "x", "fields": {"a": {"kind": "template", "template": "{b}"}, "b": {"kind": "uuid"}}},
     "a.template: {b} names no field declared before 'a'"),
    ({"name": "x", "key": "id", "fields": {"a": {"kind": "uuid"}}}, "key: 'id' is not a field"),
    ({"name": "x", "fields": {"a": {"kind": "uuid"}}, "bad_records": {"ratio": 0.1, "kinds": ["no-table"]}},
     "no-table needs a `route`"),
    ({"name": "x", "fields": {"a": {"kind": "uuid"}}, "bad_records": {"ratio": 0.1, "kinds": ["wrong"]}},
     "bad_records.kinds"),
    ({"name": "x", "fields": {"a": {"kind": "uuid"}}, "drift": [{"after": 5, "widen": {"a": "long"}}]},
     "drift[0].widen: 'a' is not an int"),
    ({"name": "x", "fields": {"a": {"kind": "choice", "values": ["p"], "weights": [1, 2]}}},
     "weights: 2 weights for 1 values"),
    ({"name": "x", "fields": {"a": {"kind": "object", "fields": {"b": {"kind": "int"}}}}}, "fields.a.fields.b.max"),
    ({"name": "x", "fields": {"a": {"kind": "uuid"}}, "rate": {"per_second": 10, "burst": {"every": 1}}},
     "rate.burst.duration: Field required"),
    ({"name": "x", "fields": {"id": {"kind": "uuid"}}, "cdc": {}}, "remove it from fields"),
])
def test_spec_errors_name_the_key(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as info:
        Generator(spec)
    assert message in str(info.value)


def test_spec_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("name: x\nfields:\n  a: {kind: int, max: [}\n")
    with pytest.raises(SpecError, match="mine.yaml: not valid YAML"):
        Generator.from_spec(path)
    path.write_text("name: x\nfields:\n  a: {kind: int, max: ten}\n")
    with pytest.raises(SpecError, match=r"mine.yaml is invalid:\n  fields.a.max"):
        Generator.from_spec(path)
    with pytest.raises(SpecError, match="no built-in generator spec 'pizza'"):
        Generator.from_spec("pizza")
    with pytest.raises(SpecError, match="seeed: Extra inputs are not permitted"):
        PizzaGenerator(seeed=3)


# ---- rate

class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def pace(schedule: RateSchedule, n: int) -> list[float]:
    clock = FakeClock()
    pacer = Pacer(schedule, clock)
    sent = []
    for i in range(n):
        pacer.wait(i)
        sent.append(clock.t)
    return sent


def test_rate_steady() -> None:
    sent = pace(RateSchedule(100), 501)
    assert sent[0] == 0 and sent[-1] == pytest.approx(5.0)
    assert all(b - a == pytest.approx(0.01) for a, b in zip(sent, sent[1:], strict=False))


def test_rate_bursts() -> None:
    # 10/s, but the last 2 s of every 10 s at 100/s: 80 + 200 events per period.
    schedule = rate_schedule({"per_second": 10, "burst": {"every": 10, "duration": 2, "per_second": 100}})
    assert schedule is not None
    sent = pace(schedule, 561)
    assert sent[80] == pytest.approx(8.0) and sent[280] == pytest.approx(10.0) and sent[560] == pytest.approx(20.0)
    per_second = Counter(int(t) for t in sent[:560])
    assert [per_second[s] for s in range(10)] == [10] * 8 + [100, 100]
    # Never ahead of the schedule.
    assert all(schedule.allowed(t) >= i - 1e-6 for i, t in enumerate(sent))


def test_rate_only_bursts() -> None:
    schedule = RateSchedule(0, burst_every=5, burst_for=1, burst_rate=50)
    sent = pace(schedule, 101)
    assert sent[1] == pytest.approx(4.02) and sent[50] == pytest.approx(5.0) and sent[100] == pytest.approx(10.0)


def test_rate_errors() -> None:
    with pytest.raises(SpecError, match=r"rate.per_second: Input should be greater than or equal to 0"):
        rate_schedule(-5)
    with pytest.raises(SpecError, match=r"rate.burst.every: Field required"):
        rate_schedule({"per_second": 5, "burst": {"duration": 1, "per_second": 9}})


def test_daily_topic_name() -> None:
    from datetime import datetime

    assert daily_topic("logs", datetime(2024, 1, 2, 23, 59)) == "logs.20240102"
