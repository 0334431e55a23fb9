"""RecordWriter and OutputFlusher.

Mirrors Flink's ``RecordWriter`` / ``ChannelSelectorRecordWriter`` /
``BroadcastRecordWriter`` and the ``OutputFlusher`` thread.

A ``RecordWriter`` owns one ``RecordSerializer`` per subpartition of a
``ResultPartition`` (a broadcast writer owns a single serializer whose
buffers go to every subpartition, like Flink's shared broadcast buffer), all
encoding with one set of packers (``RecordPackers``: the writer's calls never
overlap), and a ``StreamPartitioner``. Flush rules (Flink's ``RecordWriter`` / ``OutputFlusher``):

* a full buffer is handed to its subpartition at once (the reader is notified
  when the subpartition's queue becomes non-empty);
* ``buffer_timeout_ms == 0`` (``flush_always``): every emit call flushes the
  channels it wrote to, so each record (or batch) is visible immediately;
* ``flush_all()`` hands over every partial buffer — call it every
  ``buffer_timeout_ms`` (default 100; -1 = only full buffers) from the task
  thread, e.g. by posting ``flush_all`` as a mail from an ``OutputFlusher``;
* events (``broadcast_event``: checkpoint barrier, EndOfPartition) flush every
  channel first and travel in their own buffer;
* ``finish()`` flushes and appends EndOfPartition to every subpartition.

Batches: ``emit_batch`` splits a batch per channel with the partitioner's ``bucket`` (channel
selection and bucketing in one pass, compiled for keyed exchanges when the compiled per-record
path is built: ``shuffle.hotpath``), then serializes each channel's share in one call.

Back pressure: ``emit*`` never blocks; when the output pool is exhausted the
buffers are overdrafted and ``is_available()`` turns False. The task must check
``is_available()`` before taking more input and otherwise wait on
``get_available_future()``.

Not thread safe: all methods except ``is_available``/``get_available_future``
belong to the task thread.
"""

from __future__ import annotations

import random
import threading
from concurrent.futures import Future
from typing import Any, Callable, Iterable, List, Optional

from raylink.shuffle.codec import DeclaredFlatType
from raylink.shuffle.elements import STREAM_ELEMENT_TYPES, Watermark
from raylink.shuffle.partitioners import (
    ForwardPartitioner,
    RebalancePartitioner,
    StreamPartitioner,
    bucket_pairs_by_channel,
)
from raylink.shuffle.result_partition import ResultPartition
from raylink.shuffle.serializer import DEFAULT_BUFFER_SIZE, RecordPackers, RecordSerializer

__all__ = ["RecordWriter", "OutputFlusher", "DEFAULT_BUFFER_TIMEOUT_MS"]

#: Flink's ``execution.buffer-timeout`` default
DEFAULT_BUFFER_TIMEOUT_MS = 100

_INLINE = STREAM_ELEMENT_TYPES


class RecordWriter:
    """Serializes records into the subpartitions of one ResultPartition.

    ``emit(value)``, ``emit_batch(values)``, ``emit_timestamped(value, ts)``,
    ``emit_timestamped_batch(values, timestamps)``, ``emit_to(channel, value)``,
    ``broadcast_emit(value_or_element)`` (a record or watermark/status/latency
    marker to every channel, inline), ``random_emit(element)``,
    ``broadcast_event(event)``, ``flush_all()``, ``finish()``.
    Metrics: ``num_records_out``, ``num_buffers_out``, ``num_bytes_out``.
    ``flat_records``: the stream's declared flat type (``TypeInformation`` with
    ``is_flat``), or None: records are checked against it (a mismatch is a
    ``RecordTypeError`` naming the field and the value's type) and batches are
    packed by msgspec in one call (see ``codec.DeclaredFlatType``).
    """

    def __init__(
        self,
        partition: ResultPartition,
        partitioner: Optional[StreamPartitioner] = None,
        buffer_timeout_ms: int = DEFAULT_BUFFER_TIMEOUT_MS,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        name: str = "",
        flat_records: Any = None,
    ) -> None:
        n = partition.num_subpartitions
        if partitioner is None:
            partitioner = ForwardPartitioner() if n == 1 else RebalancePartitioner()
        partitioner.setup(n)
        self.partition = partition
        self.partitioner = partitioner
        self.name = name
        self.num_channels = n
        self.buffer_timeout_ms = buffer_timeout_ms
        self.flush_always = buffer_timeout_ms == 0
        self.is_broadcast = partitioner.is_broadcast
        self.num_records_out = 0
        if flat_records not in (None, False, True):
            flat_records = DeclaredFlatType.of(flat_records)  # compiled once for every channel
        packers = RecordPackers()  # the writer's calls never overlap: one set of packers for all channels
        if self.is_broadcast:
            self._broadcast_serializer = RecordSerializer(
                buffer_size, partition.broadcast_sink(), partition.flush_all, flat_records, packers
            )
            self._serializers: List[RecordSerializer] = [self._broadcast_serializer]
        else:
            self._broadcast_serializer = None
            self._serializers = [
                RecordSerializer(
                    buffer_size, partition.sink(i), partition.subpartitions[i].flush, flat_records, packers
                )
                for i in range(n)
            ]
        if self.is_broadcast:  # one serializer for all: the smallest size any reader asks for
            self._requested_sizes = [buffer_size] * n
            for i in range(n):
                partition.subpartitions[i].buffer_size_listener = lambda size, i=i: self._set_broadcast_buffer_size(
                    i, size
                )
        else:
            for i in range(n):
                partition.subpartitions[i].buffer_size_listener = self._serializers[i].set_buffer_size
        self._select = None if self.is_broadcast else partitioner.select_channel
        self._select_batch = None if self.is_broadcast else partitioner.select_channels
        # channel selection and bucketing of a batch (compiled for keyed exchanges: shuffle.hotpath)
        self._bucket = None if self.is_broadcast else partitioner.bucket
        single = self.is_broadcast or (n == 1 and not partitioner.reads_records)
        self._single = self._serializers[0] if single else None
        self._flusher: Optional[OutputFlusher] = None

    def hand_over_objects(self, subpartitions: Optional[Iterable[int]] = None) -> None:
        """The readers of these subpartitions (None: all) of this writer's pipelined
        partition are threads of this process, each alone on its channel: flat batches for
        them travel as objects (``RecordSerializer``). A broadcast writer shares its buffers
        between readers and keeps encoding."""
        if self.is_broadcast or not self.partition.partition_type.is_pipelined:
            return
        serializers = self._serializers
        for index in range(len(serializers)) if subpartitions is None else subpartitions:
            serializers[index].hand_over_objects = True

    def _set_broadcast_buffer_size(self, index: int, size: int) -> None:
        self._requested_sizes[index] = size
        self._broadcast_serializer.set_buffer_size(min(self._requested_sizes))

    # -- records ---------------------------------------------------------------------
    def emit(self, value: Any) -> None:
        """Emit one record to the channel(s) the partitioner selects."""
        self.num_records_out += 1
        s = self._single
        if s is None:
            s = self._serializers[self._select(value)]
        s.add_record(value)
        if self.flush_always:
            s.flush()

    def emit_timestamped(self, value: Any, timestamp: int) -> None:
        self.num_records_out += 1
        s = self._single
        if s is None:
            s = self._serializers[self._select(value)]
        s.add_timestamped_record(value, timestamp)
        if self.flush_always:
            s.flush()

    def emit_batch(self, values: List[Any]) -> None:
        """Emit many records: channels are selected for the whole batch, then each
        channel's share is serialized in one call."""
        if type(values) is not list:
            values = list(values)
        if not values:
            return
        self.num_records_out += len(values)
        s = self._single
        if s is not None:
            s.add_records(values)
            if self.flush_always:
                s.flush()
            return
        flush = self.flush_always
        for ser, bucket in zip(self._serializers, self._bucket(values)):
            if bucket:
                ser.add_records(bucket)
                if flush:
                    ser.flush()

    def emit_timestamped_batch(self, values: List[Any], timestamps: "List[int] | int") -> None:
        """Emit many timestamped records; ``timestamps`` is one per value or one int for all."""
        if type(values) is not list:
            values = list(values)
        shared = type(timestamps) is int
        if not shared and len(values) != len(timestamps):
            raise ValueError(f"{len(values)} values but {len(timestamps)} timestamps")
        if not values:
            return
        self.num_records_out += len(values)
        s = self._single
        if s is not None:
            s.add_timestamped_records(values, timestamps)
            if self.flush_always:
                s.flush()
            return
        n = self.num_channels
        if shared or n == 1:  # one channel: the partitioner reads every record, the run stays whole
            vb = self._bucket(values)
            tb: List[Any] = [timestamps] * n
        else:
            if type(timestamps) is not list:
                timestamps = list(timestamps)
            vb, tb = bucket_pairs_by_channel(values, timestamps, self._select_batch(values), n)
        for ser, bv, bt in zip(self._serializers, vb, tb):
            if bv:
                ser.add_timestamped_records(bv, bt)
                if self.flush_always:
                    ser.flush()

    def emit_to(self, channel: int, value: Any) -> None:
        """Emit one record to a given channel (bypasses the partitioner)."""
        self.num_records_out += 1
        s = self._single if self.is_broadcast else self._serializers[channel]
        s.add_record(value)
        if self.flush_always:
            s.flush()

    def broadcast_emit(self, value: Any) -> None:
        """A record — or an inline watermark / status / latency marker — to every channel."""
        inline = isinstance(value, _INLINE)
        if not inline:
            self.num_records_out += 1
        for s in self._serializers:
            if inline:
                s.add_element(value)
            else:
                s.add_record(value)
            if self.flush_always:
                s.flush()

    def emit_watermark(self, watermark: "Watermark | int") -> None:
        """Broadcast a watermark inline (Flink: ``RecordWriterOutput.emitWatermark``)."""
        self.broadcast_emit(watermark if isinstance(watermark, Watermark) else Watermark(watermark))

    def random_emit(self, element: Any) -> None:
        """A latency marker (or record) to one random channel (broadcast writers: all)."""
        if self.is_broadcast or self.num_channels == 1:
            s = self._serializers[0]
        else:
            s = self._serializers[random.randrange(self.num_channels)]
        if isinstance(element, _INLINE):
            s.add_element(element)
        else:
            self.num_records_out += 1
            s.add_record(element)
        if self.flush_always:
            s.flush()

    # -- events / flushing -------------------------------------------------------------
    def broadcast_event(self, event: Any) -> None:
        """Flush every channel, then send ``event`` to each in its own buffer."""
        for s in self._serializers:
            s.add_event(event)

    def flush_all(self) -> None:
        """Hand over every partial buffer (buffer timeout / end of input)."""
        for s in self._serializers:
            s.flush()

    def flush(self, channel: int) -> None:
        (self._single or self._serializers[channel]).flush()

    def finish(self) -> None:
        """Flush everything and send EndOfPartition to every subpartition."""
        self.flush_all()
        self.partition.finish()
        self.close()

    def close(self) -> None:
        """Stop the output flusher (if one was started)."""
        if self._flusher is not None:
            self._flusher.terminate()
            self._flusher = None

    # -- availability ------------------------------------------------------------------
    def is_available(self) -> bool:
        """False while the output buffer pool is exhausted (back pressure)."""
        return self.partition.is_available()

    def get_available_future(self) -> Future:
        return self.partition.get_available_future()

    # -- metrics -----------------------------------------------------------------------
    @property
    def num_buffers_out(self) -> int:
        return self.partition.num_buffers_out

    @property
    def num_bytes_out(self) -> int:
        return self.partition.num_bytes_out

    @property
    def pending_bytes(self) -> int:
        return sum(s.pending_bytes for s in self._serializers)

    def start_output_flusher(
        self,
        schedule: Optional[Callable[[Callable[[], None]], None]] = None,
    ) -> "Optional[OutputFlusher]":
        """Start a flusher every ``buffer_timeout_ms`` (none for 0 or -1).

        ``schedule(fn)`` must run ``fn`` in the task thread (post a mail); with
        ``schedule=None`` ``flush_all`` is called from the flusher thread, which
        is only safe if nothing else writes concurrently (tests, tools).
        """
        if self.buffer_timeout_ms is None or self.buffer_timeout_ms <= 0:
            return None
        action = self.flush_all if schedule is None else (lambda: schedule(self.flush_all))
        self._flusher = OutputFlusher(action, self.buffer_timeout_ms, name=f"OutputFlusher {self.name}")
        self._flusher.start()
        return self._flusher


class OutputFlusher(threading.Thread):
    """Calls ``action()`` every ``timeout_ms`` until ``terminate()`` (no busy loop).

    An exception from ``action`` stops the flusher and is kept in ``error``.
    """

    def __init__(self, action: Callable[[], None], timeout_ms: int, name: str = "OutputFlusher") -> None:
        super().__init__(name=name, daemon=True)
        if timeout_ms <= 0:
            raise ValueError(f"flush timeout must be > 0 ms, got {timeout_ms}")
        self._action = action
        self._interval = timeout_ms / 1000.0
        self._stop_event = threading.Event()
        self.error: Optional[BaseException] = None
        self.num_flushes = 0

    def run(self) -> None:
        while not self._stop_event.wait(self._interval):
            try:
                self._action()
                self.num_flushes += 1
            except BaseException as e:  # surfaced by the owner
                self.error = e
                return

    def terminate(self, timeout: float = 1.0) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)
