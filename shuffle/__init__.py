"""raylink's network stack (Flink's ``runtime.io.network`` + stream element serialization).

Modules, producer to consumer:

* ``elements``        — Watermark, WatermarkStatus, LatencyMarker, CheckpointBarrier, CancelCheckpointMarker,
  EndOfPartition
* ``codec``           — msgpack wire codec (StreamElementSerializer / EventSerializer)
* ``serializer``      — RecordSerializer / RecordDeserializer (spanning records over fixed-size buffers)
* ``partitioners``    — StreamPartitioner subclasses + ``create_partitioner(ship_strategy)`` (key groups:
  :mod:`raylink.core.key_groups`)
* ``buffer_pool``     — NetworkBufferPool / LocalBufferPool (permits, availability futures)
* ``result_partition``— ResultPartitionType, ResultPartition, Pipelined/BoundedBlocking subpartitions
* ``record_writer``   — RecordWriter (+ broadcast), OutputFlusher
* ``input_gate``      — InputChannel, LocalInputChannel, InputGate, UnionInputGate, StreamTaskNetworkInput
* ``credit``          — credit-based flow control: sender view reader, CreditBasedInputChannel, local transport
* ``watermark_valve`` — StatusWatermarkValve
* ``barrier_handler`` — CheckpointBarrierHandler (aligned barriers: blocks channels, triggers the snapshot)

The remote transport between a sender view reader and a ``CreditBasedInputChannel`` over Ray
actor calls lives in :mod:`raylink.actors.ray_transport`.

May import: only itself, ``raylink.core`` (declared types, ``Row``, key groups, options),
``raylink.errors`` and pure-Python libraries (msgpack, msgspec, mmh3, stdlib). Never Ray.
"""
