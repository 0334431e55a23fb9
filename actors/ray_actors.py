"""The Ray actor classes: thin wrappers over the plain runtime classes.

``TaskExecutorActor`` is a threaded actor (control calls, the transport's
``receive_buffers`` / ``add_credit`` / ``request_partition`` and the JobMaster's
long poll run concurrently) around a :class:`TaskExecutor` and its
:class:`~raylink.actors.ray_transport.RayTransport`.
"""

from __future__ import annotations

import gc
from typing import Any

import cloudpickle
import ray

from raylink.runtime.task_executor import NetworkSettings, TaskExecutor
from raylink.actors.ray_transport import DEFAULT_MAX_BATCH_DELAY_MS, RayTransport

#: ``raylink.taskmanager.gc-threshold``: allocations between two young-generation
#: collections in a TaskExecutor process (Python's default: 700)
DEFAULT_GC_THRESHOLD = 50_000


def tune_gc(threshold: int) -> None:
    """Collect the young generation every ``threshold`` allocations (0: Python's default).

    A task keeps a batch of thousands of records alive while it processes it;
    with Python's default every 700 allocations traverse the whole batch again,
    which costs a keyed task ~10 % of its time. Cycles are still collected.
    """
    if threshold > 0:
        gc.freeze()  # what the process imported is never garbage: keep it out of every collection
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(threshold, gen1, gen2)


@ray.remote
class TaskExecutorActor:
    def __init__(self, executor_id: str, settings: dict, max_batch_bytes: int) -> None:
        tune_gc(int(settings.get("raylink.taskmanager.gc-threshold", DEFAULT_GC_THRESHOLD)))
        network = NetworkSettings(settings)
        self.transport = RayTransport(
            executor_id, self._partition, buffer_size=network.buffer_size, max_batch_bytes=max_batch_bytes,
            max_batch_delay_ms=float(settings.get("raylink.network.max-batch-delay", DEFAULT_MAX_BATCH_DELAY_MS)),
        )
        self.te = TaskExecutor(executor_id, network, self.transport)

    def _partition(self, partition_id: str) -> Any:
        return self.te.partitions[partition_id]

    # -- control (JobMaster) ------------------------------------------------------------------
    def location(self) -> dict:
        ctx = ray.get_runtime_context()
        import os

        return {"node_id": ctx.get_node_id(), "pid": os.getpid()}

    def register_peers(self, peers: dict) -> None:
        self.transport.register_peers(peers)

    def deploy(self, descriptors: list) -> list:
        return [self.te.deploy(tdd) for tdd in descriptors]

    def start(self) -> None:
        self.te.start()

    def cancel(self) -> None:
        self.te.cancel()

    # records and accumulators go back pickled by the same cloudpickle that shipped the user's
    # code: a class defined in the job's ``__main__`` then comes back as the driver's own class
    def next_events(self, timeout: float) -> bytes:
        return cloudpickle.dumps(self.te.next_events(timeout))

    def take_collected(self, timeout: float) -> bytes:
        return cloudpickle.dumps(self.te.take_collected(timeout))

    def trigger_checkpoint(self, checkpoint_id: int, timestamp: int) -> None:
        self.te.trigger_checkpoint(checkpoint_id, timestamp)

    def notify_checkpoint(self, checkpoint_id: int, complete: bool) -> None:
        self.te.notify_checkpoint(checkpoint_id, complete)

    def metrics(self) -> list:
        return self.te.metrics()

    def stats(self) -> dict:
        return self.te.stats()

    def shutdown(self) -> None:
        self.te.shutdown()

    # -- transport (other TaskExecutors): no task events, they would cost the GCS a report per call --
    @ray.method(enable_task_events=False)
    def request_partition(self, consumer_id: str, channel_id: str, partition_id: str,
                          subpartition_index: int, initial_credit: int) -> None:
        self.transport.request_partition(consumer_id, channel_id, partition_id, subpartition_index, initial_credit)

    @ray.method(enable_task_events=False)
    def receive_buffers(self, producer_id: str, seq: int, batch: list) -> None:
        self.transport.receive_buffers(producer_id, seq, batch)

    @ray.method(enable_task_events=False)
    def add_credit(self, consumer_id: str, credits: list) -> None:
        self.transport.add_credit(consumer_id, credits)

    @ray.method(enable_task_events=False)
    def set_buffer_size(self, consumer_id: str, sizes: list) -> None:
        self.transport.set_buffer_size(consumer_id, sizes)
