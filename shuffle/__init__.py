"""raylink's network stack (Flink's ``runtime.io.network`` + stream element serialization).

Modules, producer to consumer:

* ``elements``        — Watermark, WatermarkStatus, LatencyMarker, CheckpointBarrier, EndOfPartition
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

Pure Python (msgpack, mmh3, stdlib); no Ray import here — a Ray transport
plugs in between ``credit.CreditBasedSequenceNumberingViewReader`` and
``credit.CreditBasedInputChannel``.
"""
