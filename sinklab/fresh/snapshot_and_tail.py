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

from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaPartition
from pyiceberg.exceptions import NoSuchTableError
from pyspark.errors import PySparkAttributeError
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sinklab.exceptions import ConfigError, SinkError, TableMissing
from sinklab.sink.config import SinkConfig, load_config
from sinklab.sink.cycle import Planner
from sinklab.sink.records import (
    ERROR,
    META,
    OP,
    FramedDecoder,
    Preparation,
    RowColumns,
    decoder,
    id_sets,
    newest_changes,
    preparation,
    read_ranges,
    route,
    row_columns,
    to_rows,
    with_operation,
    with_payload,
)
from sinklab.sink.tables import SETTINGS_PREFIX, TableState, identifier, load_state, quote, row_ids
from sinklab.sink.wire import OffsetRange, Offsets, TopicPartition
from sinklab.sink.wire import offsets as off

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyspark.sql import DataFrame, SparkSession

    from sinklab.stack import Stack

# A pin is tried again when the table moved between its two loads (a commit landed in between); this
# many moves in a row mean something commits without pause.
MAX_PINS = 20
# A Reader merges this many cached tail pieces of one size tier into one of the next (Reader._merge).
PIECES_PER_MERGE = 4
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


class Reader:
    """Fresh reads of one table, again and again: each converts only the records that arrived since the
    last one (the tail converted so far is kept as local checkpoints, the part the sink has committed
    since let go of), so a read costs the new records, not the whole tail (bench/README.md, "Fresh
    reads"). ``read()`` pins anew each time. Close it (or use ``with``) to let go of the kept tail.

    ``config``: the sink's config (as ``IcebergSink`` takes it); without it, the settings the sink keeps
    on the table (``sinklab.settings.<sink>``, no credentials in them), of ``sink`` when several sinks
    write the table. ``spark``: the session that reads (the stack's by default, a classic session or a
    Spark Connect client). ``cache`` False keeps nothing between reads (``fresh.read``, one read)."""

    def __init__(self, stack: Stack, table: str, config: SinkConfig | dict[str, Any] | str | Path | None = None, *,
                 sink: str | None = None, spark: SparkSession | None = None, cache: bool = True):
        self.stack, self.table, self.cache = stack, table, cache
        self.spark = spark or stack.spark
        given = config if isinstance(config, SinkConfig) or config is None else load_config(config)
        self._given, self._sink = given, sink
        self.config: SinkConfig | None = None  # the sink's, found at the first read (the table must be there)
        self._pieces: list[_Piece] = []  # the tail converted so far, in the order read
        self._schema = ""  # of the snapshot the pieces were converted into: another schema converts anew
        self._consumer: Consumer | None = None
        self._decoders: list[FramedDecoder] = []
        self._framed: tuple[FramedDecoder | None, FramedDecoder | None] = (None, None)
        # What does not change between reads, built once as a sink's Worker keeps it (bench/README.md, "Fresh
        # reads"): the preparation (without a registry, whose decoders learn) and the rows' columns for the
        # schema the pieces are converted into.
        self._preparation: Preparation | None = None
        self._row_columns: RowColumns | None = None

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        # A piece let go of is freed by Spark (the driver's cleaner; a Spark Connect client releases it on
        # the server): a local checkpoint, not a cached plan, since the next query did not take persisted
        # pieces from the cache (measured, bench/README.md "Fresh reads").
        self._pieces = []
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def read(self) -> FreshRead:
        stack, table = self.stack, self.table
        catalog = stack.catalog
        if self.config is None:
            loaded = _load(catalog, table, self._given.name if self._given is not None else self._sink)
            cfg = self.config = _settings(loaded, table, self._given, self._sink, stack)
            if not cfg.dynamic_enabled and table not in cfg.tables:
                raise ConfigError(None, f"sink {cfg.name} does not write table {table} (its tables: "
                                  f"{', '.join(cfg.tables) or 'none'})")
            self._framed = (decoder(cfg.value_registry, "value"), decoder(cfg.key_registry, "key"))
            self._decoders = [d for d in self._framed if d is not None]
            self._consumer = Consumer({**stack.kafka_config(), "logger": stack.client_logger(), "log_level": 4,
                                       "group.id": cfg.group_id, "enable.auto.commit": False,
                                       "isolation.level": "read_committed"})
        cfg, consumer = self.config, self._consumer
        assert consumer is not None
        planner = Planner(cfg, consumer, stack.bootstrap_servers, KAFKA_TIMEOUT_S)
        partitions = planner.source_partitions()
        state, group = _pin(catalog, planner, cfg, table, partitions)
        low, high = {}, {}
        for tp in partitions:  # the last stable offsets: the consumer reads committed
            low[tp], high[tp] = consumer.get_watermark_offsets(KafkaPartition(*tp), timeout=KAFKA_TIMEOUT_S,
                                                               cached=False)
        starts = tail_starts(partitions, state.offsets, group, off.of(low), off.of(high), cfg.auto_offset_reset)
        target = f"{stack.info.catalog_name}.{quote(table)}"
        snapshot = (self.spark.sql(f"SELECT * FROM {target} VERSION AS OF {state.snapshot_id}")
                    if state.snapshot_id is not None else self.spark.table(target).where(F.lit(False)))
        tail = self._tail(state, snapshot, starts, off.of(high), partitions)
        if tail is None:
            df, bad = snapshot, None
        else:
            rows, bad = tail.where(F.col(ERROR).isNull()), tail.where(F.col(ERROR).isNotNull()).select(*META, ERROR)
            if cfg.row_level:  # as the next commit applies them: each id's newest change, a delete removes the row
                ids = row_ids(cfg, state)
                newest = newest_changes(rows, ids)
                df = snapshot.join(newest.select(*ids), on=ids, how="left_anti").unionByName(
                    newest.where(F.col(OP) != "D").select(*snapshot.columns))
            else:
                df = snapshot.unionByName(rows.select(*snapshot.columns))
        return FreshRead(df, table, cfg.name, state.snapshot_id, starts, off.of(high), bad)

    def _tail(self, state: TableState, snapshot: DataFrame, starts: Offsets, ends: Offsets,
              partitions: list[TopicPartition]) -> DataFrame | None:
        """The tail from ``starts`` to ``ends`` converted (the table's rows with ERROR, bad records too):
        kept pieces where they cover it, the rest converted now and kept. None: no tail."""
        schema = snapshot.schema
        # Converted anew: for another schema, when the topic was recreated (a piece past the end), or when the
        # tail starts before what is kept (a table rolled back to an older snapshot).
        kept_from = {tp: min([off.get(p.begins, tp) for p in self._pieces if off.get(p.ends, tp) >= 0],
                             default=-1) for tp in partitions}
        converted_into = schema.json()
        another_schema = converted_into != self._schema
        if another_schema:
            self._row_columns = None  # built for the schema before
        if another_schema or any(off.get(starts, tp) < kept_from[tp] for tp in partitions) or any(
                off.get(p.ends, tp) > off.get(ends, tp) for p in self._pieces for tp in partitions):
            self._pieces, self._schema = [], converted_into
        # Pieces wholly before the tail's start hold only what the sink has committed since.
        self._pieces = [p for p in self._pieces
                        if any(off.get(p.ends, tp, 0) > off.get(starts, tp) for tp in partitions)]
        converted = {tp: max([off.get(p.ends, tp) for p in self._pieces], default=-1) for tp in partitions}
        ranges = []
        for tp in partitions:
            begin = max(off.get(starts, tp), converted[tp])
            if off.get(ends, tp) > begin:
                ranges.append(OffsetRange(tp.topic, tp.partition, begin, off.get(ends, tp)))
        if ranges:
            piece = self._convert(state, schema, ranges)
            if self.cache:  # converted now, once: later reads take it from the executors' memory
                piece = piece.localCheckpoint(eager=True)
            self._pieces.append(_Piece(off.of((r.tp, r.start) for r in ranges), off.of((r.tp, r.end) for r in ranges),
                                       piece))
            self._merge(_cores(self.spark, ranges))
        if not any(off.get(ends, tp) > off.get(starts, tp) for tp in partitions):
            return None
        past = [(F.col("topic") == tp.topic) & (F.col("partition") == tp.partition)
                & (F.col("offset") >= off.get(starts, tp)) & (F.col("offset") < off.get(ends, tp))
                for tp in partitions if off.get(ends, tp) > off.get(starts, tp)]
        return _union([p.df for p in self._pieces]).where(reduce(lambda a, b: a | b, past))

    def _merge(self, tasks: int) -> None:
        """Keeps the query's plan small and each merge cheap, by size tiers: ``PIECES_PER_MERGE`` pieces of
        one tier in a row become one piece of the next. A read merges at most what the last few reads
        added, not the whole tail each time (bench/README.md, "Fresh reads")."""
        while len(self._pieces) >= PIECES_PER_MERGE and len({p.tier for p in self._pieces[-PIECES_PER_MERGE:]}) == 1:
            run = self._pieces[-PIECES_PER_MERGE:]
            merged = _union([p.df for p in run]).coalesce(tasks).localCheckpoint(eager=True)
            ends = reduce(off.merge_max, (p.ends for p in run))  # every partition a piece of the run read
            begins = off.of((tp, min(off.get(p.begins, tp) for p in run if off.get(p.ends, tp) >= 0))
                            for tp, _ in off.entries(ends))
            self._pieces[-PIECES_PER_MERGE:] = [_Piece(begins, ends, merged, run[0].tier + 1)]

    def _convert(self, state: TableState, schema: T.StructType, ranges: list[OffsetRange]) -> DataFrame:
        """Records of ``ranges`` as the sink converts and routes them for this table: its rows (ERROR null),
        rows it could not make and records no table could take (ERROR set, their columns meaningless)."""
        cfg, table = self.config, self.table
        assert cfg is not None
        raw = read_ranges(self.spark, self.stack.kafka_config(), ranges, timeout_s=KAFKA_TIMEOUT_S,
                          parallelism=_cores(self.spark, ranges))
        framed, framed_key = self._framed
        for d in self._decoders:
            d.prime({r.topic for r in ranges})

        def prepared() -> DataFrame:
            kept = self._preparation
            if kept is None:
                kept = preparation(cfg.schemas_enable, cfg.transforms, cfg.route_field, cfg.cdc_field,
                                   cfg.default_id_columns if cfg.row_level else None, framed, framed_key,
                                   cfg.key_envelope)
                if not self._decoders:
                    self._preparation = kept
            return kept.apply(raw)

        records = prepared()
        if self._decoders:  # writer schemas new to the decoders are learned, and the records prepared again
            seen = records.select(*id_sets(self._decoders)).first()
            if seen is not None and any([d.learn(set(seen[f"{d.side}_ids"])) for d in self._decoders]):
                records = prepared()
        records = with_payload(records)
        if not cfg.row_level:  # tombstones are skipped, except that a row-level table deletes the row they name
            records = records.where(F.col("value").isNotNull())
        # This table's records and those no table could take, in one pass: a union of the two read the
        # tail from Kafka twice (bench/README.md, "Fresh reads").
        mine = records.where(F.col(ERROR).isNotNull() | route.routed_to(cfg, table))
        if self._row_columns is None:
            self._row_columns = row_columns(schema, cfg.schema_case_insensitive, cfg.variant_value)
        rows = to_rows(mine, schema, cfg.schema_case_insensitive, cfg.variant_value, self._row_columns,
                       prior_error=True)
        if cfg.row_level:
            rows = with_operation(rows, row_ids(cfg, state), cfg.cdc_field)
        return rows.select(*schema.fieldNames(), *META, ERROR, *([OP] if cfg.row_level else []))


@dataclass
class _Piece:
    """Converted records kept by a ``Reader``: per partition read, from ``begins`` to ``ends``."""

    begins: Offsets
    ends: Offsets
    df: DataFrame
    tier: int = 0  # merged from PIECES_PER_MERGE pieces of the tier below


def read(stack: Stack, table: str, config: SinkConfig | dict[str, Any] | str | Path | None = None, *,
         sink: str | None = None, spark: SparkSession | None = None) -> FreshRead:
    """``table`` as its sink committed it plus what the sink has read of Kafka's committed records
    but not yet committed, each record once: one read (``Reader`` for reads again and again)."""
    with Reader(stack, table, config, sink=sink, spark=spark, cache=False) as reader:
        return reader.read()


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


def _union(frames: list[DataFrame]) -> DataFrame:
    return reduce(lambda a, b: a.unionByName(b), frames)


def _cores(spark: SparkSession, ranges: list[OffsetRange]) -> int:
    """The read's tasks: the session's cores, or for a Spark Connect client (no SparkContext to ask) one
    per partition read."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except PySparkAttributeError:
        return len(ranges)
