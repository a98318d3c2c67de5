"""A fresh read: pin the table, find where its snapshot ends in Kafka, read and convert the tail, add it.

Pinning is what makes it exact. A sink publishes a table's snapshot and only then commits its group's
offsets, in its Kafka transaction (docs/protocol.md). So the head snapshot S is loaded, then the group's
offsets G, then the head again: unchanged, every record before G that the table takes is in S (G may be
past S's own offsets when the sink's last cycles had nothing for this table). The tail of a partition
starts at the later of the two and ends at its last stable offset, read after the pin.

Everything here is Spark's DataFrame API, the REST catalog's client and a Kafka client: no py4j, so a
Spark Connect client reads fresh as a classic session does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition
from pyiceberg.exceptions import NoSuchTableError
from pyspark.errors import PySparkAttributeError
from pyspark.sql import functions as F

from sinklab.exceptions import ConfigError, SinkError, TableMissing
from sinklab.sink import offsets as off
from sinklab.sink import registry, route
from sinklab.sink.columns import ERROR, KEY_SCHEMA_ID, META, OP, SCHEMA_ID
from sinklab.sink.config import SinkConfig, load_config
from sinklab.sink.convert import newest_changes, preparation, row_columns, to_rows, with_operation, with_payload
from sinklab.sink.offsets import OffsetRange, Offsets, TopicPartition
from sinklab.sink.plan import Planner
from sinklab.sink.reader import read_ranges
from sinklab.sink.tables import SETTINGS_PREFIX, TableState, identifier, load_state, quote

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

    from sinklab.stack import Stack

log = logging.getLogger("sinklab.fresh")
# A pin is tried again when the table moved between its two loads (a commit landed in between); this
# many moves in a row mean something commits without pause.
MAX_PINS = 20
KAFKA_TIMEOUT_S = 30.0


@dataclass
class FreshRead:
    """``df``: the table at ``snapshot_id`` plus every record of its sink's source partitions from
    ``tail_from`` up to ``watermark`` (per partition; every record before ``tail_from`` that the table
    takes is in the snapshot), converted and routed as the sink does; records the sink could not write
    are left out (``left_out``)."""

    df: DataFrame
    table: str
    sink: str
    snapshot_id: int | None
    tail_from: Offsets
    watermark: Offsets
    _bad: DataFrame | None  # None: no tail

    @property
    def tail_offsets(self) -> int:
        """Offsets between the snapshot and the watermark (transaction markers and aborted records occupy some)."""
        return sum(max(0, end - off.get(self.tail_from, tp, end)) for tp, end in off.entries(self.watermark))

    def left_out(self) -> int:
        """Records of the tail for this table that the sink would not write (bad, or to its dead-letter
        topic): counted by a job of its own."""
        return self._bad.count() if self._bad is not None else 0


def read(stack: Stack, table: str, config: SinkConfig | dict[str, Any] | str | Path | None = None, *,
         sink: str | None = None, spark: SparkSession | None = None) -> FreshRead:
    """``table`` as its sink committed it plus what the sink has read of Kafka's committed records
    but not yet committed, each record once.

    ``config``: the sink's config (as ``IcebergSink`` takes it); without it, the settings the sink keeps
    on the table (``sinklab.settings.<sink>``, no credentials in them), of ``sink`` when several sinks
    write the table. ``spark``: the session that reads (the stack's by default, a classic session or a
    Spark Connect client)."""
    spark = spark or stack.spark
    given = config if isinstance(config, SinkConfig) or config is None else load_config(config)
    loaded = _load(stack.catalog, table, given.name if given is not None else sink)
    cfg = _settings(loaded, table, given, sink, stack)
    if not cfg.dynamic_enabled and table not in cfg.tables:
        raise ConfigError(None, f"sink {cfg.name} does not write table {table} (its tables: "
                          f"{', '.join(cfg.tables) or 'none'})")
    kafka_conf = stack.kafka_config()  # as the sink on the stack reads
    consumer = Consumer({**kafka_conf, "logger": stack.client_logger(), "log_level": 4, "group.id": cfg.group_id,
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        planner = Planner(cfg, consumer, stack.bootstrap_servers, KAFKA_TIMEOUT_S)
        partitions = planner.source_partitions()
        state, group = _pin(stack.catalog, planner, cfg, table, partitions)
        low, high = {}, {}
        for tp in partitions:  # the last stable offsets: the consumer reads committed
            low[tp], high[tp] = consumer.get_watermark_offsets(KafkaPartition(*tp), timeout=KAFKA_TIMEOUT_S,
                                                               cached=False)
    finally:
        consumer.close()
    starts = tail_starts(partitions, state.offsets, group, off.of(low), off.of(high), cfg.auto_offset_reset)
    ranges = [OffsetRange(tp.topic, tp.partition, off.get(starts, tp), high[tp]) for tp in partitions
              if high[tp] > off.get(starts, tp)]
    target = f"{stack.info.catalog_name}.{quote(table)}"
    snapshot = (spark.sql(f"SELECT * FROM {target} VERSION AS OF {state.snapshot_id}")
                if state.snapshot_id is not None else spark.table(target).where(F.lit(False)))
    rows, bad = _tail(spark, stack, cfg, table, state, snapshot, kafka_conf, ranges)
    if rows is None or bad is None:
        df, bad = snapshot, None
    elif cfg.row_level:  # as the next commit applies them: each id's newest change, a delete removes the row
        ids = _ids(cfg, table, state)
        newest = newest_changes(rows, ids)
        df = snapshot.join(newest.select(*ids), on=ids, how="left_anti").unionByName(
            newest.where(F.col(OP) != "D").select(*snapshot.columns))
    else:
        df = snapshot.unionByName(rows.select(*snapshot.columns))
    return FreshRead(df, table, cfg.name, state.snapshot_id, starts, off.of(high), bad)


def view(stack: Stack, table: str, name: str, config: SinkConfig | dict[str, Any] | str | Path | None = None, *,
         sink: str | None = None, spark: SparkSession | None = None) -> FreshRead:
    """``read``, and its DataFrame as the temporary view ``name`` for SQL, pinned as it was read: read
    again for newer records."""
    fresh = read(stack, table, config, sink=sink, spark=spark)
    fresh.df.createOrReplaceTempView(name)
    return fresh


def tail_starts(partitions: list[TopicPartition], snapshot: Offsets, group: Offsets, low: Offsets, high: Offsets,
                reset: str) -> Offsets:
    """Where each partition's tail starts: past both the snapshot's offsets and the group's (pinned
    together, see the module's docstring). A partition the sink never read starts where its first
    cycle will: the low watermark (``auto.offset.reset`` earliest), else the end (latest: nothing the
    sink will write is there yet). Clamped to what the broker has."""
    out: Offsets = {}
    for tp in partitions:
        start = max(off.get(snapshot, tp), off.get(group, tp))
        if start < 0:
            start = off.get(low, tp) if reset == "earliest" else off.get(high, tp)
        off.put(out, tp, min(max(start, off.get(low, tp)), off.get(high, tp)))
    return out


# ---- the pieces
def _load(catalog: Catalog, table: str, sink: str | None) -> Table:
    try:
        return catalog.load_table(identifier(table))
    except NoSuchTableError:
        by = f"sink {sink}" if sink else "its sink"
        raise TableMissing(f"table {table} does not exist yet: {by} creates it with its first commit "
                           f"(iceberg.tables.auto-create-enabled), and a fresh read reads a table", sink=sink,
                           table=table) from None


def _settings(loaded: Table, table: str, config: SinkConfig | None, sink: str | None, stack: Stack) -> SinkConfig:
    """The sink's config: as given, else the settings it keeps on the table. A registry's URL the
    settings lack is the stack's, as a sink on the stack takes it."""
    if config is not None:
        cfg = config
    else:
        kept = {k.removeprefix(SETTINGS_PREFIX): v for k, v in loaded.properties.items()
                if k.startswith(SETTINGS_PREFIX)}
        if sink is not None and sink not in kept:
            raise ConfigError(None, f"table {table} keeps no settings of sink {sink} (it keeps: "
                              f"{', '.join(sorted(kept)) or 'none'}): pass the sink's config")
        if sink is None and len(kept) != 1:
            raise ConfigError(None, f"table {table} keeps the settings of {len(kept)} sinks "
                              f"({', '.join(sorted(kept)) or 'none: no sinklab sink has written it'}): "
                              f"name one (sink=...) or pass a config")
        cfg = SinkConfig.model_validate_json(kept[sink or next(iter(kept))])
    for framed in (cfg.value_registry, cfg.key_registry):
        if framed is not None and not framed.registry_url:
            framed.registry_url = stack.info.schema_registry_url
    return cfg


def _pin(catalog: Catalog, planner: Planner, cfg: SinkConfig, table: str,
         partitions: list[TopicPartition]) -> tuple[TableState, Offsets]:
    """The table's head and the group's offsets, read with no commit of the table in between."""
    branch = cfg.table_branch(table)
    for _ in range(MAX_PINS):
        state = load_state(catalog, table, branch, cfg.name)
        group = planner.group_offsets(partitions)
        again = load_state(catalog, table, branch, cfg.name)
        if again.snapshot_id == state.snapshot_id:
            return state, group
    raise SinkError(f"table {table} moved under {MAX_PINS} pins in a row: something commits to branch "
                    f"{branch} without pause", sink=cfg.name, table=table)


def _tail(spark: SparkSession, stack: Stack, cfg: SinkConfig, table: str, state: TableState, snapshot: DataFrame,
          kafka_conf: dict[str, Any], ranges: list[OffsetRange]) -> tuple[DataFrame | None, DataFrame | None]:
    """The tail's rows for ``table`` in the snapshot's columns (with META, and OP for row-level tables),
    and its records the sink would not write; (None, None) without a tail. A record no table could take
    (undecodable, malformed) has no route: every table's read counts it as left out."""
    if not ranges:
        return None, None
    framed, framed_key = registry.decoder(cfg.value_registry, "value"), registry.decoder(cfg.key_registry, "key")
    decoders = [d for d in (framed, framed_key) if d is not None]
    for d in decoders:
        d.prime({r.topic for r in ranges})
    raw = read_ranges(spark, kafka_conf, ranges, timeout_s=KAFKA_TIMEOUT_S, parallelism=_cores(spark, ranges))

    def prepared() -> DataFrame:
        return preparation(cfg.schemas_enable, cfg.transforms, cfg.route_field, cfg.cdc_field,
                           cfg.default_id_columns if cfg.row_level else None, framed, framed_key,
                           cfg.key_envelope).apply(raw)

    records = prepared()
    if decoders:  # writer schemas new to the decoders are learned, and the records prepared again
        sets = [F.collect_set(SCHEMA_ID if d.side == "value" else KEY_SCHEMA_ID).alias(d.side) for d in decoders]
        seen = records.select(*sets).first()
        if seen is not None and any([d.learn(set(seen[d.side])) for d in decoders]):
            records = prepared()
    records = with_payload(records)
    if not cfg.row_level:  # tombstones are skipped, except that a row-level table deletes the row they name
        records = records.where(F.col("value").isNotNull())
    mine = route.records_for(cfg, records.where(F.col(ERROR).isNull()), table)
    schema = snapshot.schema
    rows = to_rows(mine, schema, cfg.schema_case_insensitive, cfg.variant_value,
                   row_columns(schema, cfg.schema_case_insensitive, cfg.variant_value))
    if cfg.row_level:
        rows = with_operation(rows, _ids(cfg, table, state), cfg.cdc_field)
    bad = records.where(F.col(ERROR).isNotNull()).select(*META, ERROR).unionByName(
        rows.where(F.col(ERROR).isNotNull()).select(*META, ERROR))
    return rows.where(F.col(ERROR).isNull()), bad


def _ids(cfg: SinkConfig, table: str, state: TableState) -> list[str]:
    ids = cfg.table_id_columns(table)
    if not ids and state.table is not None:
        ids = list(state.table.schema().identifier_field_names())
    if not ids:
        raise ConfigError(None, f"table {table}: sink {cfg.name} writes row-level changes but names no id "
                          f"columns and the table has no identifier fields")
    return ids


def _cores(spark: SparkSession, ranges: list[OffsetRange]) -> int:
    """The read's tasks: the session's cores, or for a Spark Connect client (no SparkContext to ask) one
    per partition read."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except PySparkAttributeError:
        return len(ranges)
