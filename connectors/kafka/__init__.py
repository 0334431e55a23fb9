"""raylink.connectors.kafka: the Kafka connector, whole -- its API classes and their runtime side
(Flink's ``flink-connector-kafka``; PyFlink programs import it from
``raylink.api.connectors.kafka``, PyFlink's ``pyflink.datastream.connectors.kafka``).

Client library: confluent-kafka (librdkafka) -- see :mod:`raylink.connectors.kafka.client`.

Module layout (each API module imports its runtime module lazily, never the other way round):

* ``broker`` -- ``KafkaBroker``: a real single-node KRaft broker (tests' ``kafka_broker``
  fixture, ``raylink kafka start|stop``); jars from ``scripts/kafka_jars.sh``.
* ``client`` -- shared client helpers: consumer/producer/admin configuration from the
  builders' properties, metadata with a timeout naming servers and topics.
* ``offsets`` -- the value types source configuration and runtime share: ``KafkaTopicPartition``,
  ``KafkaOffsetResetStrategy``, ``KafkaOffsetsInitializer``, ``Boundedness``, ``ConsumerRecord``.
* ``source`` -- the source's configuration: ``KafkaSource``, ``KafkaSourceBuilder``,
  ``KafkaRecordDeserializationSchema`` (plain, picklable, read-only once built).
* ``source_reader`` -- the source's runtime (Flink's ``KafkaSourceEnumerator``'s split
  ownership and discovery, ``KafkaPartitionSplit``, ``KafkaSourceReader``): the source operator.
* ``legacy`` -- the deprecated ``FlinkKafkaConsumer`` / ``FlinkKafkaProducer`` / ``Semantic``,
  configuration mapped onto ``KafkaSource`` / ``KafkaSink``.
* ``sink_config`` -- the sink's configuration: ``KafkaSink``, ``KafkaSinkBuilder``,
  ``KafkaRecordSerializationSchema`` (+ builder), ``DeliveryGuarantee``. ``KafkaSink``'s Sink V2
  methods (``create_writer`` / ``restore_writer`` / ``create_committer``) import the runtime from
  ``sink_writer`` (``KafkaWriter``) and ``sink_committer`` (``KafkaCommitter``) -- the sink's
  runtime modules.
"""
