"""``raylink loadtest --kafka-bootstrap-servers`` / ``--kafka``: the scenario's records go through a
real Kafka topic (the session broker), produced at a rate outside the job; every produced record
reaches the sink once, latency is measured from the Kafka timestamps and the lag the report shows
is the broker's offsets, as a consumer of the test's own reads them."""

from __future__ import annotations

import json
import socket

import pytest
from confluent_kafka import Consumer, TopicPartition

from raylink.cli import main as cli  # cli.main(argv): the raylink command
from raylink.connectors.kafka.broker import new_topic
from raylink.loadtest import Scenario, run_soak
from raylink.loadtest.functions import identity

pytestmark = pytest.mark.timeout(240)


def broker_offsets(servers: str, topic: str, group: str, partitions: int) -> "tuple[dict, dict]":
    """(log end offset, committed offset of ``group``) per partition, read by the test itself."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False})
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
            for p in range(partitions)
        }
        committed = {
            tp.partition: tp.offset
            for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        }
        return ends, committed
    finally:
        consumer.close()


def topic_values(servers: str, topic: str, partitions: int, counts: dict) -> list:
    """Every value of ``topic``'s first ``counts[p]`` records of each partition."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "loadtest-check", "enable.auto.commit": False})
    values = []
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while len(values) < sum(counts.values()):
            messages = consumer.consume(1000, timeout=10)
            assert messages, f"the topic ended after {len(values)} records"
            values += [int(m.value()) for m in messages]
    finally:
        consumer.close()
    return values


def test_a_chain_through_kafka_reaches_the_sink_once_with_latency_and_lag_from_the_broker(
    ray_session, kafka_broker, tmp_path
):
    servers = kafka_broker.bootstrap_servers
    out = tmp_path / "report"
    argv = ["loadtest", "chain", "--kafka-bootstrap-servers", servers, "--partitions", "3"]
    argv += ["--rate", "3000", "--duration", "2", "--parallelism", "2", "--output", str(out)]
    assert cli.main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    [run] = report["runs"]
    kafka = run["kafka"]
    topic, group, n = kafka["topic"], kafka["groupId"], 6000
    # every planned record produced once, into the partitions j % 3, and read by the job
    assert run["recordsEmitted"] == kafka["recordsProduced"] == n
    assert sorted(topic_values(servers, topic, 3, kafka["stopOffsets"])) == list(range(n))
    # map(x*2) then filter(% 3 != 0): the payloads j with j % 3 != 0 reach the sink, each once
    assert run["recordsAtSink"] == n - (n + 2) // 3
    # latency from the Kafka timestamps: >= 0 and within the run's wall clock
    lat = run["latencyMs"]
    assert 0 <= lat["p50"] <= lat["p99"] <= lat["max"] <= run["wallClockS"] * 1000 and lat["count"] > 1000
    # the lag the report shows is the broker's: the test reads the same offsets itself
    ends, committed = broker_offsets(servers, topic, group, 3)
    final = kafka["final"]
    assert {int(p): v for p, v in final["endOffsets"].items()} == ends == {p: n // 3 for p in range(3)}
    assert {int(p): v for p, v in final["committedOffsets"].items()} == committed == ends
    assert final["committedLag"] == sum(ends[p] - committed[p] for p in ends) == 0
    series = kafka["lagSeries"]
    assert len(series) >= 3 and kafka["maxCommittedLag"] == max(s["committedLag"] for s in series)
    for s in series:
        end_total = sum(s["endOffsets"].values())
        assert 0 <= s["committedLag"] <= end_total <= n
    # the lag plot and the report's Kafka table
    png = (out / "lag.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and "lag.png" in report["plots"]
    md = (out / "report.md").read_text()
    assert "## Kafka" in md and topic in md


@pytest.mark.slow
def test_a_slow_sink_soak_through_kafka_reports_the_rss_while_the_backlog_waits(kafka_broker, tmp_path):
    # a sink taking 1 ms per record behind a producer at 3000 records/s: a backlog builds up in the topic
    scenario = Scenario(
        "slowkafka", "identity to a 1 ms/record sink", lambda env, s: s.map(identity), sink_delay_s=1e-3
    )
    from raylink.loadtest.kafka_driver import KafkaLoad

    load = KafkaLoad(bootstrap_servers=kafka_broker.bootstrap_servers, partitions=2, checkpoint_interval_ms=500)
    local = {"execution.target": "local"}  # the TaskExecutor of this process: its RSS is sampled
    report = run_soak(scenario, 3000, 3.0, str(tmp_path), sample_interval=0.5, conf=local, plots=False, kafka=load)
    n = 9000
    assert report["run"]["recordsEmitted"] == report["run"]["recordsAtSink"] == n
    backlog = report["kafkaBacklog"]
    assert backlog["maxCommittedLag"] > 1000  # records waited in the topic, not in the job
    assert backlog["executors"]
    for figures in backlog["executors"].values():
        assert 10 * 2**20 < figures["peakRssBytes"] < 2**30
        assert figures["samplesUnderBacklog"] >= 1 and figures["maxRssUnderBacklogBytes"] <= figures["peakRssBytes"]
    ends, committed = broker_offsets(
        kafka_broker.bootstrap_servers, report["kafka"]["topic"], report["kafka"]["groupId"], 2
    )
    assert ends == committed == {0: n // 2, 1: n // 2}
    assert "Kafka backlog" in (tmp_path / "report.md").read_text()


@pytest.mark.slow
def test_kafka_starts_a_local_broker_for_the_run_and_stops_it(tmp_path):
    out = tmp_path / "report"
    argv = ["loadtest", "chain", "--kafka", "--records", "300", "--rate", "max", "--partitions", "1"]
    argv += ["--conf", "execution.target=local", "--no-plots", "--output", str(out)]
    assert cli.main(argv) == 0
    [run] = json.loads((out / "report.json").read_text())["runs"]
    assert run["kafka"]["localBroker"] and run["recordsAtSink"] == 200  # 300 minus the 100 multiples of 3
    host, port = run["kafka"]["bootstrapServers"].rsplit(":", 1)
    with pytest.raises(OSError):  # the broker is gone
        socket.create_connection((host, int(port)), timeout=2).close()


def test_kafka_options_name_what_is_wrong(kafka_broker, tmp_path):
    servers = kafka_broker.bootstrap_servers
    base = ["loadtest", "chain", "--output", str(tmp_path), "--no-plots"]  # each fails before Ray or a job starts
    with pytest.raises(SystemExit, match="either --kafka"):
        cli.main(base + ["--kafka", "--kafka-bootstrap-servers", servers])
    with pytest.raises(SystemExit, match="--topic needs"):
        cli.main(base + ["--topic", "t"])
    with pytest.raises(SystemExit, match="no-such-topic.*does not exist"):
        cli.main(base + ["--kafka-bootstrap-servers", servers, "--topic", "no-such-topic", "--records", "10"])
    with pytest.raises(SystemExit, match="--records N"):
        cli.main(base + ["--kafka-bootstrap-servers", servers, "--rate", "max", "--duration", "1"])
    with pytest.raises(SystemExit, match="has a source of its own"):
        cli.main(["loadtest", "spark", "--output", str(tmp_path), "--kafka-bootstrap-servers", servers])


def test_an_existing_topic_gets_the_next_records_and_only_those_are_read(kafka_broker, tmp_path):
    servers = kafka_broker.bootstrap_servers
    topic = new_topic(servers, 2, prefix="loadtest-existing")
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers})
    for i in range(50):  # records before the run: not the run's
        producer.produce(topic, b"-1", partition=i % 2)
    assert producer.flush(30) == 0
    out = tmp_path / "report"
    argv = ["loadtest", "chain", "--kafka-bootstrap-servers", servers, "--topic", topic, "--records", "1000"]
    argv += ["--rate", "2000", "--no-plots", "--conf", "execution.target=local", "--output", str(out)]
    assert cli.main(argv) == 0
    [run] = json.loads((out / "report.json").read_text())["runs"]
    assert {int(p): o for p, o in run["kafka"]["startOffsets"].items()} == {0: 25, 1: 25}
    assert run["recordsAtSink"] == 1000 - 334  # the old records (payload -1 would pass the filter) are not read
    ends, committed = broker_offsets(servers, topic, run["kafka"]["groupId"], 2)
    assert ends == committed == {0: 525, 1: 525}
