"""raylink's network stack (Flink's ``runtime.io.network`` + stream element serialization).

Modules, producer to consumer:

* ``elements``        — Watermark, WatermarkStatus, LatencyMarker, CheckpointBarrier, CancelCheckpointMarker,
  EndOfPartition
* ``codec``           — msgpack wire codec (StreamElementSerializer / EventSerializer)
* ``serializer``      — RecordSerializer / RecordDeserializer (spanning records over fixed-size buffers)
* ``key_groups``      — KeyGroupRangeAssignment, stable key hashing
* ``partitioners``    — StreamPartitioner subclasses + ``create_partitioner(ship_strategy)``
* ``buffer_pool``     — NetworkBufferPool / LocalBufferPool (permits, availability futures)
* ``result_partition``— ResultPartitionType, ResultPartition, Pipelined/BoundedBlocking subpartitions
* ``record_writer``   — RecordWriter (+ broadcast), OutputFlusher
* ``input_gate``      — InputChannel, LocalInputChannel, InputGate, UnionInputGate, StreamTaskNetworkInput
* ``credit``          — credit-based flow control: sender view reader, CreditBasedInputChannel, local transport
* ``watermark_valve`` — StatusWatermarkValve
* ``barrier_handler`` — CheckpointBarrierHandler (aligned barriers: blocks channels, triggers the snapshot)
* ``ray_transport``   — the remote transport between a sender view reader and a
  ``CreditBasedInputChannel`` (the only module here that imports Ray)

Everything else is pure Python (msgpack, mmh3, stdlib).
"""
