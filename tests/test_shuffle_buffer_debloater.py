"""Buffer debloating: the size a gate asks for follows what its task consumes per busy second."""

import pytest

from raylink.shuffle.buffer_debloater import MIN_BUFFER_SIZE, BufferDebloater, DebloatSettings
from raylink.shuffle.record_writer import RecordWriter
from raylink.shuffle.result_partition import ResultPartition

pytestmark = pytest.mark.timeout(30)

MS = 1_000_000


def settings():
    return DebloatSettings(max_size=32 * 1024)


@pytest.mark.parametrize("as_configuration", [False, True])
def test_defaults_are_flinks_and_remote_buffers_start_small(as_configuration):
    from raylink.api import Configuration
    from raylink.runtime.task.task_executor import NetworkSettings

    def network(**conf):
        if not as_configuration:
            return NetworkSettings(conf)
        configuration = Configuration()
        for key, value in conf.items():
            configuration.set_string(key, value)
        return NetworkSettings(configuration)

    s = network().debloat
    assert (s.enabled, s.target_ms, s.period_ms, s.samples, s.threshold) == (True, 1000, 200, 20, 0.25)
    assert s.initial_size == 4096 and s.max_size == 32 * 1024
    assert not network(**{"taskmanager.network.memory.buffer-debloat.enabled": "false"}).debloat.enabled
    assert network(**{"taskmanager.network.memory.buffer-debloat.target": "500"}).debloat.target_ms == 500
    with pytest.raises(ValueError, match="target"):
        network(**{"taskmanager.network.memory.buffer-debloat.target": "0"})


def test_size_holds_target_time_of_data_in_the_gates_buffers():
    d = BufferDebloater(settings(), num_buffers=64)
    # 64 KiB consumed in 500 ms of busy time: 128 KiB/s; 1 s of it over 64 buffers = 2 KiB each
    assert d.measure(64 * 1024, 500 * MS) == 2048
    # a fast consumer: capped at the segment size
    fast = BufferDebloater(settings(), num_buffers=64)
    assert fast.measure(10 * 2**20, 100 * MS) == 32 * 1024
    # a crawling one: never below Flink's minimum segment size
    slow = BufferDebloater(settings(), num_buffers=64)
    assert slow.measure(100, 1000 * MS) == MIN_BUFFER_SIZE


def test_idle_periods_and_small_changes_announce_nothing():
    d = BufferDebloater(settings(), num_buffers=64)
    assert d.measure(64 * 1024, 500 * MS) == 2048
    assert d.measure(64 * 1024, 502 * MS) is None  # 2 ms busy: idle, nothing learned
    # the same rate again: the average does not move, nor does the size
    assert d.measure(128 * 1024, 1000 * MS) is None
    # twice as fast from now on: the average (20 samples) moves by ~10 % a measurement
    total, busy, sizes = 128 * 1024, 1000 * MS, []
    for _ in range(10):
        total += 128 * 1024
        busy += 500 * MS
        sizes.append(d.measure(total, busy))
    announced = [s for s in sizes if s is not None]
    assert announced and all(b >= a * 1.25 for a, b in zip([2048] + announced, announced))
    assert d.buffer_size == announced[-1] <= 4096


def test_a_writer_cuts_the_buffers_of_a_subpartition_at_the_size_its_reader_asked_for():
    partition = ResultPartition(2, "PIPELINED_BOUNDED")
    writer = RecordWriter(partition, buffer_size=32 * 1024)
    partition.subpartitions[1].set_buffer_size(1024)
    for channel in (0, 1):
        for i in range(10_000):
            writer.emit_to(channel, ("word", i))
    sizes = [[len(r.buffer) for r in iter(sub.poll_buffer, None)] for sub in partition.subpartitions]
    assert sizes[0] == [32 * 1024] * 2  # untouched: whole segments (the rest waits for a flush)
    assert len(sizes[1]) > 60 and set(sizes[1]) == {1024}
