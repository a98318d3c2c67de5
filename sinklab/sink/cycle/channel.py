"""The channel: the sink's Kafka side. It owns the transactional producer (whose start fences every
older instance of the sink), the group consumer whose offsets say which cycle completed last, and
the control topic; every cycle's Kafka transaction goes through ``transaction``.

In a cycle's transaction (docs/protocol.md): ``start`` publishes ``commit-start`` and flushes it
before any table moves (a fenced zombie fails here); dead letters go out with the cycle; ``complete``
puts the group's offsets and ``commit-complete`` in the transaction, which commits when the block ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaPartition

from sinklab.exceptions import AccessDenied, ConfigError, KafkaUnavailable, SinkError, SinkFenced, StuckCall
from sinklab.security import denied, probe, refused
from sinklab.sink.config import keys
from sinklab.sink.records import dead_letters
from sinklab.sink.wire import control
from sinklab.sink.wire import offsets as off

if TYPE_CHECKING:
    from sinklab.sink.config.sink_config import SinkConfig
    from sinklab.sink.records.dead_letters import DeadLetter
    from sinklab.sink.wire.control import Chore, CommitComplete, CommitStart
    from sinklab.sink.wire.offsets import Offsets

log = logging.getLogger("sinklab.sink")
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
# librdkafka's transactional calls can block well past their timeout when the broker of a coordinator
# (the transaction's, or the group's for send_offsets_to_transaction) dies: confluentinc/librdkafka
# #3779, #5456, #5511. A sink waiting there neither commits nor fails; one fault-matrix run stalled
# so for minutes. Past twice the call's own timeout and this much more, the cycle fails as Kafka away:
# a call that does give up may take two of its timeouts (measured: 10.7 s for 5 s, the transaction
# coordinator's broker SIGKILLed before send_offsets_to_transaction).
TXN_GRACE_S = 5.0


def bounded(what: str, timeout_s: float, call: Callable[[], Any]) -> Any:
    """``call()`` in a thread of its own, waited for at most 2 x ``timeout_s`` + TXN_GRACE_S; past that,
    ``StuckCall`` (a ``KafkaUnavailable``) and the thread is left where it waits: the producer it is
    in must then never be used again (``Channel.stuck``), and a new one fences it."""
    done = threading.Event()
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which raises it
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name=f"sinklab-kafka-{what}", daemon=True).start()
    limit = 2 * timeout_s + TXN_GRACE_S
    if not done.wait(limit):
        raise StuckCall(f"Kafka's {what} did not return within {limit:.0f}s (its own timeout {timeout_s:.0f}s): "
                        f"a coordinator's broker is gone and librdkafka waits for it")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


class Channel:
    def __init__(self, config: SinkConfig, kafka_conf: dict[str, Any]):
        self.config = config
        self.kafka_conf = kafka_conf
        # Each Kafka step of the commit waits at most the commit timeout: a broker that is down fails
        # the cycle in bounded time instead of holding the transaction open.
        self.timeout_s = max(5.0, config.commit_timeout_ms / 1000)
        # A refused login or connection stops the sink here, named, not as a timeout of a later call.
        probe(kafka_conf, self.timeout_s, sink=config.name)
        self._refuse_apache_control_topic()  # before anything is opened that would need closing
        self.group = Consumer({**kafka_conf, "group.id": config.group_id, "enable.auto.commit": False,
                               "isolation.level": "read_committed"})
        self.stuck = False  # a transactional call of self.producer never returned (``bounded``)
        self.producer = Producer({
            # A transaction call waits for its request, whose own timeout (librdkafka's socket.timeout.ms,
            # 60 s) overrides the call's: with the broker gone, send_offsets_to_transaction took 60 s (measured).
            "socket.timeout.ms": int(self.timeout_s * 1000),
            **kafka_conf,
            "transactional.id": config.transactional_id,
            # The transaction stays open while tables commit.
            "transaction.timeout.ms": max(60_000, 2 * config.commit_timeout_ms),
        })
        try:
            try:
                # A newer instance's init fences every older one with the same transactional id.
                self._txn("init_transactions", 30, self.producer.init_transactions, 30)
            except KafkaException as exc:
                raise self._fenced_or(exc, "(starting)") from exc
            self._ensure_topic(config.control_topic)
            if config.dlq_topic:
                self._ensure_topic(config.dlq_topic)
        except BaseException:
            # A channel that never started keeps no client reconnecting (its producer may be fatal: no flush).
            self.group.close()
            del self.producer
            raise

    def close(self) -> None:
        self.group.close()
        if not self.stuck:  # a thread of its own is still inside it
            self.producer.flush(5)
        # A failed cycle's frames hold this channel for as long as its exception is kept (a notebook's
        # last error, a test report). Dropped here, the producer goes now, and stops reconnecting to a
        # broker that may be gone; its destructor does not wait for the broker, where Producer.close()
        # blocks for good on a transaction it cannot abort (measured).
        del self.producer

    def _refuse_apache_control_topic(self) -> None:
        """Apache's sink fails on any record of its control topic that is not its own event, so a control
        topic that carries its events is refused before sinklab writes one there (docs/protocol.md)."""
        topic = self.config.control_topic
        groups = control.apache_groups(self.kafka_conf, topic)
        if groups:
            raise ConfigError(keys.CONTROL_TOPIC_KEY, (
                f"{topic} carries events of Apache's Iceberg sink (group {', '.join(sorted(groups))}): that sink's "
                f"tasks fail on any other record there, sinklab's included. Give sink {self.config.name} a control "
                f"topic of its own (the default is {keys.CONTROL_TOPIC})"))

    def _ensure_topic(self, topic: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        # Its one informational line at close ("Purging 1 unserved events") is no news to a notebook.
        admin = AdminClient({"log_level": 4, **self.kafka_conf})
        if topic not in admin.list_topics(timeout=10).topics:
            # The broker's default replication (3 on a replicated cluster): the log must outlive a broker.
            futures = admin.create_topics([NewTopic(topic, 1, -1)])
            try:
                futures[topic].result(30)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise

    # ---- a cycle's transaction
    @contextmanager
    def transaction(self, commit_id: str) -> Iterator[None]:
        """The block runs inside one Kafka transaction, committed when it ends; aborted when it raises
        (a Kafka failure is raised as ``SinkFenced`` or ``KafkaUnavailable``)."""
        try:
            self._txn("begin_transaction", self.timeout_s, self.producer.begin_transaction)
        except KafkaException as exc:
            raise self._fenced_or(exc, commit_id) from exc
        try:
            yield
            self._txn("commit_transaction", self.timeout_s, self.producer.commit_transaction, self.timeout_s)
        except BaseException as exc:
            self._abort()
            if isinstance(exc, KafkaException):
                raise self._fenced_or(exc, commit_id) from exc
            raise

    def start(self, event: CommitStart) -> None:
        """``commit-start``, flushed: a fenced instance learns it here, before any table moves."""
        self._produce(event)
        remaining = self.producer.flush(self.timeout_s)
        if remaining:
            raise KafkaUnavailable(f"sink {self.config.name}: {remaining} control events not delivered to "
                                   f"{self.config.control_topic} within {self.timeout_s:.0f}s; is the broker "
                                   f"({self.kafka_conf.get('bootstrap.servers')}) up?", sink=self.config.name)

    def dead_letters(self, letters: Sequence[DeadLetter]) -> int:
        return dead_letters.produce(self.producer, self.config, letters)

    def complete(self, ends: Offsets, event: CommitComplete) -> None:
        """The group's offsets at the cycle's ends and ``commit-complete``, in the transaction."""
        positions = [KafkaPartition(tp.topic, tp.partition, end) for tp, end in off.entries(ends)]
        self._txn("send_offsets_to_transaction", self.timeout_s, self.producer.send_offsets_to_transaction,
                  positions, self.group.consumer_group_metadata(), self.timeout_s)
        self._produce(event)

    def record_maintenance(self, reports: Sequence[Chore], delay_ms: int) -> None:
        """Maintenance run between cycles, in the control log; a transaction of its own (the producer is
        transactional), so a fenced instance learns it here too."""
        runs: dict[str, list[Chore]] = {}
        counters = {"delay_ms": delay_ms}
        for report in reports:
            runs.setdefault(report.table, []).append(report)
            for key, value in report.counts.items():
                counters[f"{report.operation}.{key}"] = counters.get(f"{report.operation}.{key}", 0) + value
        event = control.Maintenance(
            sink=self.config.name, commit_id=control.new_commit_id(), ts_ms=int(time.time() * 1000),
            counters=counters, duration_ms=sum(r.duration_ms for r in reports), tables=[
                control.TableCommit(table=name, branch="main", snapshot_id=chores[-1].snapshot_id or -1, records=0,
                                    data_files=[], delete_files=[],
                                    bytes=sum(r.counts.get("rewritten_bytes", 0) for r in chores), offsets={},
                                    vtts_ms=None, write_ms=sum(r.duration_ms for r in chores), commit_ms=0)
                for name, chores in runs.items()])
        with self.transaction(event.commit_id):
            self._produce(event)

    # ---- the producer's calls
    def _produce(self, event: control.ControlEvent) -> None:
        self.producer.produce(self.config.control_topic, control.encode(event), event.commit_id.encode())

    def _abort(self) -> None:
        if self.stuck:  # the next channel's producer fences this one's transaction
            return
        try:
            self._txn("abort_transaction", self.timeout_s, self.producer.abort_transaction, self.timeout_s)
        except (KafkaException, StuckCall) as exc:
            log.warning("aborting the Kafka transaction failed: %s", exc)

    def _txn(self, what: str, timeout_s: float, call: Callable[..., Any], *args: Any) -> Any:
        """A transactional call of the producer, bounded (``bounded``); once one is stuck, the producer
        is this channel's no more."""
        try:
            return bounded(what, timeout_s, lambda: call(*args))
        except StuckCall as exc:
            self.stuck = True
            raise StuckCall(f"sink {self.config.name}: {exc}; the cycle is tried again with a new producer, whose "
                            f"start fences this one (transactional.id {self.config.transactional_id})",
                            sink=self.config.name) from None

    def _fenced_or(self, exc: KafkaException, commit_id: str) -> SinkError | AccessDenied:
        err = exc.args[0] if exc.args else None
        name = self.config.name
        resource = {"group": self.config.group_id, "transactional-id": self.config.transactional_id,
                    "topic": self.config.control_topic}.get(refused(exc) or "")
        if (refusal := denied(exc, self.kafka_conf, resource, sink=name)) is not None:
            return refusal
        if err is not None and hasattr(err, "code") and err.code() in FENCED:
            return SinkFenced(f"sink {name} was fenced: a newer instance with transactional.id "
                              f"{self.config.transactional_id} started; this instance stops ({err.str()})", sink=name)
        what = err.str() if err is not None and hasattr(err, "str") else str(exc)
        return KafkaUnavailable(
            f"sink {name}: the Kafka transaction of cycle {commit_id} failed ({what}; broker "
            f"{self.kafka_conf.get('bootstrap.servers')}). Its offsets were not committed: the next run reads the "
            f"cycle again, and each table's recorded sinklab.offsets keep what it already holds from landing twice",
            sink=name)
