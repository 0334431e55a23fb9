"""The real Kafka broker the Kafka tests and ``raylink kafka start`` run: it answers a client's
produce and consume, its folder goes away when it stops, and a missing jar folder is named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from raylink.connectors.kafka.broker import KafkaBroker, KafkaBrokerError, is_broker_process

pytestmark = pytest.mark.timeout(180)


def test_the_session_broker_round_trips_records_through_a_topic(kafka_broker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "broker-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    sent = [f"v{i}".encode() for i in range(50)]
    for i, value in enumerate(sent):
        producer.produce(topic, value=value, partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": topic})
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    got = []
    try:
        while len(got) < len(sent):
            batch = consumer.consume(100, 10)
            assert batch, f"nothing more within 10 s after {len(got)} records"
            got.extend(m.value() for m in batch if m.error() is None)
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)
    assert kafka_broker.bootstrap_servers.startswith("127.0.0.1:")
    assert is_broker_process(kafka_broker.pid, kafka_broker.workdir)


def test_a_missing_jar_folder_is_named_with_the_script_that_fills_it(tmp_path):
    broker = KafkaBroker(libs_dir=str(tmp_path / "nothing"))
    with pytest.raises(KafkaBrokerError, match=r"jars are missing .*nothing.*scripts/kafka_jars\.sh"):
        broker.start()
    assert broker.workdir is None and broker.pid is None


@pytest.mark.slow
def test_raylink_kafka_start_prints_an_address_that_answers_and_stop_ends_it(tmp_path):
    from confluent_kafka.admin import AdminClient

    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path))
    os.chmod(tmp_path, 0o700)
    cli = [sys.executable, "-m", "raylink", "kafka"]
    started = subprocess.run([*cli, "start"], env=env, capture_output=True, text=True, timeout=150)
    assert started.returncode == 0, started.stderr
    address = started.stdout.strip()
    state = json.loads((tmp_path / "raylink" / "kafka" / "broker.json").read_text())
    try:
        assert address == state["bootstrap_servers"]
        assert AdminClient({"bootstrap.servers": address}).list_topics(timeout=10).brokers
        assert is_broker_process(state["pid"], state["workdir"])
    finally:
        stopped = subprocess.run([*cli, "stop"], env=env, capture_output=True, text=True, timeout=60)
    assert stopped.returncode == 0 and "stopped" in stopped.stderr, stopped.stderr
    assert not is_broker_process(state["pid"], state["workdir"])
    assert not os.path.exists(state["workdir"])
    assert not (tmp_path / "raylink" / "kafka" / "broker.json").exists()
