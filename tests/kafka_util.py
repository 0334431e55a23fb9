"""Helpers of the Kafka tests: topics on the session's real broker, records produced and read back
with confluent-kafka directly (what a test expects is computed from these, never from the job)."""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from raylink.connectors.kafka.broker import new_topic  # noqa: F401 - the tests' topics


def add_partitions(servers: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_partitions([NewPartitions(topic, total)]).values():
        future.result(30)


def produce(
    servers: str, topic: str, records: Iterable[Tuple[int, Optional[bytes], bytes, Optional[int]]]
) -> Dict[Tuple[int, int], bytes]:
    """Produces (partition, key, value, timestamp ms) records; returns (partition, offset) -> value
    as the broker acknowledged them."""
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5, "enable.idempotence": True})
    acked: Dict[Tuple[int, int], bytes] = {}
    failures: List[str] = []

    def delivered(err, msg):
        if err is not None:
            failures.append(str(err))
        else:
            acked[(msg.partition(), msg.offset())] = msg.value()

    for partition, key, value, timestamp in records:
        kwargs = {"timestamp": timestamp} if timestamp is not None else {}
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition, on_delivery=delivered, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0 and not failures, failures[:3]
    return acked


def committed(servers: str, group: str, topic: str, partitions: int) -> Dict[int, int]:
    """The group's committed offset of each partition (-1001: none)."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {x.partition: x.offset for x in found}
    finally:
        consumer.close()
