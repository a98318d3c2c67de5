"""A sink connector's offsets (KIP-875) are its consumer group's committed offsets.

The sink commits them inside each cycle's Kafka transaction, so what ``GET /connectors/x/offsets``
shows is exactly where the next cycle starts. Altering or resetting them only happens while the
connector is STOPPED (checked by the herder): the group then has no member and no open transaction.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

TIMEOUT_S = 15


class GroupOffsets:
    def __init__(self, kafka_config: dict[str, Any]):
        self.admin = AdminClient(kafka_config)

    def get(self, group: str) -> dict[tuple[str, int], int]:
        futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                         request_timeout=TIMEOUT_S)
        result = futures[group].result(TIMEOUT_S)
        # A partition without a committed offset comes back as a negative sentinel.
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}

    def alter(self, group: str, offsets: dict[tuple[str, int], int | None]) -> None:
        if any(o is None for o in offsets.values()):
            # The Python client has no OffsetDelete: forget the whole group and commit back the
            # offsets of every partition that keeps one.
            kept = {tp: o for tp, o in self.get(group).items() if tp not in offsets}
            kept.update({tp: o for tp, o in offsets.items() if o is not None})
            self.reset(group)
            offsets = dict(kept)
        if not offsets:
            return
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])
        futures = self.admin.alter_consumer_group_offsets([request], request_timeout=TIMEOUT_S)
        futures[group].result(TIMEOUT_S)

    def reset(self, group: str) -> None:
        futures = self.admin.delete_consumer_groups([group], request_timeout=TIMEOUT_S)
        try:
            futures[group].result(TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                raise

    def cluster_id(self) -> str | None:
        try:
            return self.admin.describe_cluster(request_timeout=5).result(5).cluster_id
        except KafkaException:
            return None
