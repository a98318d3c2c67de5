"""The generator spec: pydantic models of a ``data-generators/*.yaml`` file.

Every model forbids unknown keys, so a typo is reported with its place in the file
(``fields.store_id.maxx: Extra inputs are not permitted``) instead of being ignored.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sinklab.exceptions import SpecError

# The seeds' streams are timestamped in early 2024; a fixed start keeps seeded output reproducible.
DEFAULT_START = datetime(2024, 1, 4, 12, 0, 0)
# Beyond this many values a zipf table costs more memory than it is worth.
MAX_ZIPF_VALUES = 1_000_000

BAD_KINDS = ("malformed-json", "not-an-object", "undecodable", "type-mismatch", "missing-required", "out-of-range",
             "tombstone", "no-table")
BadKind = Literal["malformed-json", "not-an-object", "undecodable", "type-mismatch", "missing-required", "out-of-range",
                  "tombstone", "no-table"]
TIME_FORMATS = ("iso", "epoch_s", "epoch_ms", "epoch_us")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Field(_Model):
    # Every kind may emit nulls, or its value as a string (the seed's payment `document` is "75").
    null_ratio: float = Field(0.0, ge=0, le=1)
    as_string: bool = False


class UuidField(_Field):
    kind: Literal["uuid"]


class IntField(_Field):
    kind: Literal["int"]
    min: int = 0
    max: int
    distribution: Literal["uniform", "zipf"] = "uniform"
    # zipf: the value min+k-1 is drawn with weight 1/k**exponent, so `min` is the busiest.
    exponent: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _range(self) -> IntField:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        if self.distribution == "zipf" and self.max - self.min + 1 > MAX_ZIPF_VALUES:
            raise ValueError(f"zipf needs at most {MAX_ZIPF_VALUES} values, min..max has {self.max - self.min + 1}")
        return self


class FloatField(_Field):
    kind: Literal["float"]
    min: float = 0.0
    max: float
    decimals: int | None = Field(2, ge=0)

    @model_validator(mode="after")
    def _range(self) -> FloatField:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self


class BoolField(_Field):
    kind: Literal["bool"]
    ratio: float = Field(0.5, ge=0, le=1, description="probability of true")


class ChoiceField(_Field):
    kind: Literal["choice"]
    # A list (uniform, or weighted by `weights`) or a mapping value -> weight.
    values: list[Any] | dict[str, float]
    weights: list[float] | None = None

    @model_validator(mode="after")
    def _weights(self) -> ChoiceField:
        if not self.values:
            raise ValueError("values: give at least one value")
        if isinstance(self.values, dict):
            if self.weights is not None:
                raise ValueError("weights: not allowed when values is a mapping of value -> weight")
            weights = list(self.values.values())
        else:
            weights = self.weights or []
            if self.weights is not None and len(self.weights) != len(self.values):
                raise ValueError(f"weights: {len(self.weights)} weights for {len(self.values)} values")
        if any(w < 0 for w in weights) or (weights and sum(weights) <= 0):
            raise ValueError("weights must be >= 0 and not all 0")
        return self

    def pairs(self) -> tuple[list[Any], list[float] | None]:
        if isinstance(self.values, dict):
            return list(self.values), list(self.values.values())
        return list(self.values), self.weights


class NameField(_Field):
    kind: Literal["name"]
    part: Literal["full", "first", "last"] = "full"
    title_ratio: float = Field(0.0, ge=0, le=1, description="how often a full name has a title (Mrs., Dr.)")


Step = float | tuple[float, float]


class TimestampField(_Field):
    kind: Literal["timestamp"]
    # A strftime pattern, or one of iso / epoch_s / epoch_ms / epoch_us. Times are UTC, without zone.
    format: str = "%Y-%m-%d %H:%M:%S"
    start: datetime | Literal["now"] = DEFAULT_START
    # Seconds between one event and the next: a number, or [min, max] drawn uniformly.
    step: Step = 1.0

    @field_validator("step")
    @classmethod
    def _step(cls, v: Step) -> Step:
        low, high = v if isinstance(v, tuple) else (v, v)
        if low < 0 or high < low:
            raise ValueError("step: seconds >= 0, or [min, max] with min <= max")
        return v

    @field_validator("format")
    @classmethod
    def _format(cls, v: str) -> str:
        if v not in TIME_FORMATS and "%" not in v:
            raise ValueError(f"format: a strftime pattern such as '%Y-%m-%d %H:%M:%S' or one of {TIME_FORMATS}")
        return v


class SequenceField(_Field):
    kind: Literal["sequence"]
    start: int = 1
    step: int = 1


class ConstantField(_Field):
    kind: Literal["constant"]
    value: Any


class TemplateField(_Field):
    kind: Literal["template"]
    # str.format over the fields declared before this one in the same object: "store-{store_id}".
    template: str


class ObjectField(_Field):
    kind: Literal["object"]
    fields: dict[str, FieldSpec]

    @model_validator(mode="after")
    def _templates(self) -> ObjectField:
        check_templates(self.fields)
        return self


class ArrayField(_Field):
    kind: Literal["array"]
    items: FieldSpec
    min_items: int = Field(0, ge=0)
    max_items: int = Field(3, ge=0)

    @model_validator(mode="after")
    def _range(self) -> ArrayField:
        if self.min_items > self.max_items:
            raise ValueError(f"min_items ({self.min_items}) is greater than max_items ({self.max_items})")
        return self


FieldSpec = Annotated[
    UuidField | IntField | FloatField | BoolField | ChoiceField | NameField | TimestampField | SequenceField
    | ConstantField | TemplateField | ObjectField | ArrayField,
    Field(discriminator="kind"),
]
KINDS = ("uuid", "int", "float", "bool", "choice", "name", "timestamp", "sequence", "constant", "template",
         "object", "array")
NUMERIC = (IntField, FloatField, SequenceField)
INTEGRAL = (IntField, SequenceField)
ObjectField.model_rebuild()
ArrayField.model_rebuild()


def check_templates(fields: Mapping[str, Any], before: list[str] | None = None) -> None:
    """A template may only name fields declared before it in the same object."""
    seen: list[str] = list(before or [])
    for name, spec in fields.items():
        if isinstance(spec, TemplateField):
            try:
                parsed = list(string.Formatter().parse(spec.template))
            except ValueError as exc:
                raise ValueError(f"{name}.template: {exc}") from None
            for _, ref, _, _ in parsed:
                if ref is None:
                    continue
                root = ref.split(".")[0].split("[")[0]
                if root not in seen:
                    raise ValueError(f"{name}.template: {{{ref}}} names no field declared before {name!r} "
                                     f"(declared before it: {seen or 'none'})")
        seen.append(name)


class RouteSpec(_Model):
    """A field naming each event's destination, drawn from a weighted mix (fan-out to tables)."""

    field: str = "table"
    mix: dict[str, float]

    @field_validator("mix")
    @classmethod
    def _mix(cls, v: dict[str, float]) -> dict[str, float]:
        if not v or any(w < 0 for w in v.values()) or sum(v.values()) <= 0:
            raise ValueError("mix: give destination: weight pairs, weights >= 0 and not all 0")
        return v


class DriftStep(_Model):
    """From event number `after` on (0-based), fields appear and types widen."""

    after: int = Field(ge=0)
    add: dict[str, FieldSpec] = Field(default_factory=dict)
    # long: integers beyond 32 bits; double: fractional values (int fields) or beyond float32 (float fields).
    widen: dict[str, Literal["long", "double"]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _something(self) -> DriftStep:
        if not self.add and not self.widen:
            raise ValueError("give `add` (new fields) or `widen` (field: long|double), or both")
        return self


class BadRecordsSpec(_Model):
    """Replace a share of the events with records a sink cannot take."""

    ratio: float = Field(ge=0, le=1)
    # A list (equal weights) or kind -> weight; by default every kind the spec can produce.
    kinds: list[BadKind] | dict[BadKind, float] | None = None
    # The numeric field type-mismatch and out-of-range corrupt (default: the first integer field).
    field: str | None = None
    # The field missing-required drops (default: the key field, else the first field).
    required: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _shortcut(cls, v: Any) -> Any:
        return {"ratio": v} if isinstance(v, int | float) and not isinstance(v, bool) else v

    def weights(self) -> dict[str, float] | None:
        if self.kinds is None:
            return None
        if isinstance(self.kinds, dict):
            return dict(self.kinds)
        return dict.fromkeys(self.kinds, 1.0)


class BurstSpec(_Model):
    """The last `duration` seconds of every `every` seconds run at `per_second`."""

    every: float = Field(gt=0)
    duration: float = Field(gt=0)
    per_second: float = Field(gt=0)

    @model_validator(mode="after")
    def _fits(self) -> BurstSpec:
        if self.duration > self.every:
            raise ValueError(f"duration ({self.duration}) is longer than every ({self.every})")
        return self


class RateSpec(_Model):
    per_second: float = Field(ge=0)
    burst: BurstSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _shortcut(cls, v: Any) -> Any:
        return {"per_second": v} if isinstance(v, int | float) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _moves(self) -> RateSpec:
        if self.per_second == 0 and self.burst is None:
            raise ValueError("per_second: 0 only makes sense with a burst")
        return self


class CdcSource(_Model):
    db: str = "inventory"
    table: str = "rows"


class CdcSpec(_Model):
    """Row changes over a key space: inserts take keys that are not live, updates/deletes live ones."""

    op_field: str = "op"
    mix: dict[Literal["I", "U", "D"], float] = Field(default_factory=lambda: {"I": 0.5, "U": 0.4, "D": 0.1})
    # Keys are 1..key_space; None: unbounded, every insert takes the next new key.
    key_space: int | None = Field(None, gt=0)
    format: Literal["flat", "debezium"] = "flat"
    # The first `snapshot` events insert rows (Debezium op "r", flat "I").
    snapshot: int = Field(0, ge=0)
    # Updates change only these fields (default: every field).
    update_fields: list[str] | None = None
    source: CdcSource = Field(default_factory=CdcSource)
    # The change time (Debezium ts_ms): starts here, advances `step` seconds per event.
    start: datetime | Literal["now"] = DEFAULT_START
    step: Step = 1.0

    @field_validator("mix")
    @classmethod
    def _mix(cls, v: dict[str, float]) -> dict[str, float]:
        if any(w < 0 for w in v.values()) or sum(v.values()) <= 0:
            raise ValueError("mix: weights of I, U, D must be >= 0 and not all 0")
        return v


class Spec(_Model):
    """One event stream."""

    name: str
    description: str = ""
    key: str | None = None
    # The timestamp field that dates an event (daily topics); default: the first top-level timestamp.
    time_field: str | None = None
    fields: dict[str, FieldSpec]
    cdc: CdcSpec | None = None
    route: RouteSpec | None = None
    drift: list[DriftStep] = Field(default_factory=list)
    bad_records: BadRecordsSpec | None = None
    rate: RateSpec | None = None
    count: int | None = Field(None, ge=0)
    seed: int = 7
    daily_topics: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> Spec:
        if not self.fields:
            raise ValueError("fields: give at least one field")
        check_templates(self.fields)
        names = set(self.fields)
        if self.cdc is not None:
            self.key = self.key or "id"
            if self.key in names:
                raise ValueError(f"key: {self.key!r} takes its values from cdc.key_space; remove it from fields")
            if self.cdc.op_field in names:
                raise ValueError(f"cdc.op_field: {self.cdc.op_field!r} is already a field")
            unknown = set(self.cdc.update_fields or []) - names
            if unknown:
                raise ValueError(f"cdc.update_fields: {sorted(unknown)} are not fields")
            names = names | {self.key}
        elif self.key is not None and self.key not in names:
            raise ValueError(f"key: {self.key!r} is not a field (fields: {sorted(names)})")
        if self.route is not None and self.route.field in names:
            raise ValueError(f"route.field: {self.route.field!r} is already a field")
        if self.time_field is not None and not isinstance(self.fields.get(self.time_field), TimestampField):
            raise ValueError(f"time_field: {self.time_field!r} is not a timestamp field")
        seen = list(self.fields)
        for i, step in sorted(enumerate(self.drift), key=lambda pair: pair[1].after):
            for name in step.add:
                if name in seen or name in names or (self.route and name == self.route.field):
                    raise ValueError(f"drift[{i}].add: {name!r} already exists before event {step.after}")
            try:
                check_templates(step.add, seen)
            except ValueError as exc:
                raise ValueError(f"drift[{i}].add.{exc}") from None
            for name, to in step.widen.items():
                field = self.fields.get(name)
                if not isinstance(field, NUMERIC) or field.as_string:
                    raise ValueError(f"drift[{i}].widen: {name!r} is not an int, float or sequence field "
                                     "(written as a number)")
                if to == "long" and not isinstance(field, INTEGRAL):
                    raise ValueError(f"drift[{i}].widen: {name!r} is a float; it can only widen to double")
            seen += list(step.add)
        if self.bad_records is not None:
            self._check_bad(self.bad_records)
        return self

    def _check_bad(self, bad: BadRecordsSpec) -> None:
        if bad.field is not None:
            field = self.fields.get(bad.field)
            if not isinstance(field, NUMERIC) or field.as_string:
                raise ValueError(f"bad_records.field: {bad.field!r} is not an int, float or sequence field")
        if bad.required is not None and bad.required not in self.fields and bad.required != self.key:
            raise ValueError(f"bad_records.required: {bad.required!r} is not a field")
        for kind in bad.weights() or {}:
            if kind == "no-table" and self.route is None:
                raise ValueError("bad_records.kinds: no-table needs a `route`")
            if kind == "type-mismatch" and self.mismatch_field() is None:
                raise ValueError("bad_records.kinds: type-mismatch needs a numeric field")
            if kind == "out-of-range" and self.range_field() is None:
                raise ValueError("bad_records.kinds: out-of-range needs an int or sequence field "
                                 "(bad_records.field, if given, must be one)")

    def _numbers(self, integral: bool) -> str | None:
        wanted = INTEGRAL if integral else NUMERIC
        bad = self.bad_records
        if bad is not None and bad.field is not None:
            return bad.field if isinstance(self.fields[bad.field], wanted) else None
        for name, field in self.fields.items():
            if isinstance(field, wanted) and not field.as_string:
                return name
        # A CDC key is an integer from the key space.
        return self.key if self.cdc is not None else None

    def mismatch_field(self) -> str | None:
        """The field type-mismatch writes a word into."""
        return self._numbers(integral=False)

    def range_field(self) -> str | None:
        """The field out-of-range writes a number beyond 64 bits into."""
        return self._numbers(integral=True)

    def required_field(self) -> str:
        """The field missing-required drops."""
        bad = self.bad_records
        if bad is not None and bad.required is not None:
            return bad.required
        return self.key or next(iter(self.fields))

    def bad_kinds(self) -> dict[str, float]:
        """The kinds to draw from, with weights; kinds this spec cannot produce are left out by default."""
        assert self.bad_records is not None
        weights = self.bad_records.weights()
        if weights is not None:
            return weights
        kinds = dict.fromkeys(BAD_KINDS, 1.0)
        if self.route is None:
            del kinds["no-table"]
        if self.mismatch_field() is None:
            del kinds["type-mismatch"]
        if self.range_field() is None:
            del kinds["out-of-range"]
        return kinds

    def time_field_name(self) -> str | None:
        if self.time_field is not None:
            return self.time_field
        return next((n for n, f in self.fields.items() if isinstance(f, TimestampField)), None)


# ---- loading

SPEC_PACKAGE = "sinklab.generators"
SPEC_DIR = "specs"


def builtin_specs() -> list[str]:
    """The names of the specs shipped with sinklab (the files in ``data-generators/``)."""
    folder = resources.files(SPEC_PACKAGE) / SPEC_DIR
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def builtin_text(name: str) -> str:
    path = resources.files(SPEC_PACKAGE) / SPEC_DIR / f"{name}.yaml"
    if not path.is_file():
        raise SpecError(None, f"no built-in generator spec {name!r} (built-in: {', '.join(builtin_specs())})")
    return path.read_text(encoding="utf-8")


def load_spec(source: str | Path | Mapping[str, Any] | Spec, overrides: Mapping[str, Any] | None = None) -> Spec:
    """A Spec from a built-in name (``"pizzas"``), a YAML file, or a mapping; `overrides` replace top-level keys."""
    if isinstance(source, Spec):
        data: dict[str, Any] = source.model_dump(exclude_unset=True)
        where = f"spec {source.name!r}"
    elif isinstance(source, Mapping):
        data, where = dict(source), "spec"
    else:
        text, where = _read(source)
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError(where, f"not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise SpecError(where, f"expected a mapping with `name` and `fields`, got {type(data).__name__}")
    for key, value in (overrides or {}).items():
        if value is not None:
            data[key] = value.model_dump(exclude_unset=True) if isinstance(value, BaseModel) else value
    try:
        return Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(None, f"{where} is invalid:\n" + "\n".join(
            f"  {_location(err['loc'])}: {err['msg']}" for err in exc.errors())) from None


def _read(source: str | Path) -> tuple[str, str]:
    path = Path(source)
    if path.suffix in (".yaml", ".yml") or path.exists():
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except OSError as exc:
            raise SpecError(None, f"cannot read generator spec {path}: {exc.strerror}") from None
    return builtin_text(str(source)), f"built-in spec {source!r}"


def _location(loc: tuple[int | str, ...]) -> str:
    """`fields.store_id.max`, without the kind tags pydantic puts into the location of a tagged union."""
    parts: list[str] = []
    for i, item in enumerate(loc):
        parent = loc[i - 1] if i else None
        # A tag follows a field name (fields.<name>.<tag>) or `items` (array items).
        if item in KINDS and parent is not None and parent not in ("fields", "add"):
            continue
        parts.append(f"[{item}]" if isinstance(item, int) else str(item))
    return ".".join(parts).replace(".[", "[") or "(top level)"
