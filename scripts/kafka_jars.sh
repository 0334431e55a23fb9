#!/usr/bin/env bash
# The jars of a single-node Apache Kafka broker (KRaft), for the tests' kafka_broker fixture and
# `raylink kafka start` (raylink.connectors.kafka.broker): the broker's runtime classpath
# (org.apache.kafka:kafka_2.13 and what it depends on, plus log4j's slf4j binding so the broker
# logs), resolved with Maven into .cache/kafka/libs (scripts/maven_jars.sh: idempotent, offline
# first; nothing downloads at test time).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/maven_jars.sh
KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
LOG4J_VERSION="2.25.5"
maven_jars .cache/kafka ".complete-$KAFKA_VERSION" "Apache Kafka $KAFKA_VERSION's broker jars" "
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$LOG4J_VERSION</version></dependency>"
