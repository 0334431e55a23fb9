#!/usr/bin/env bash
# The jars of a single-node Apache Kafka broker (KRaft), for the tests' kafka_broker fixture and
# `raylink kafka start` (raylink.connectors.kafka.broker): resolved with Maven from Maven Central
# into .cache/kafka/ (ignored by git): libs/ holds the broker's runtime classpath (org.apache.kafka:
# kafka_2.13 and what it depends on, plus log4j's slf4j binding so the broker logs), m2/ Maven's
# local repository. Idempotent: when libs/ is complete for this version it returns at once; a run
# after a partial one resolves offline first (Maven's -o), then online. Nothing downloads at test time.
# Needs java and mvn (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
LOG4J_VERSION="2.25.5"
CACHE=".cache/kafka"
LIBS="$CACHE/libs"
STAMP="$LIBS/.complete-$KAFKA_VERSION"
if [ -f "$STAMP" ] && [ -f "$LIBS/kafka_2.13-$KAFKA_VERSION.jar" ]; then
    exit 0
fi
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    echo "raylink setup: installing Java and Maven for the Kafka broker's jars" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq openjdk-17-jre-headless maven >/dev/null
fi
mkdir -p "$CACHE/m2"
POM="$CACHE/pom.xml"
cat > "$POM" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>raylink.setup</groupId>
  <artifactId>kafka-broker-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
rm -rf "$LIBS.tmp"
resolve() {
    mvn -B -q -Dstyle.color=never "$@" -f "$POM" -Dmaven.repo.local="$PWD/$CACHE/m2" dependency:copy-dependencies \
        -DoutputDirectory="$PWD/$LIBS.tmp" -DincludeScope=runtime
}
if ! resolve -o >/dev/null 2>&1; then
    echo "raylink setup: resolving Apache Kafka $KAFKA_VERSION's broker jars with Maven" >&2
    rm -rf "$LIBS.tmp"
    resolve
fi
rm -rf "$LIBS"
mv "$LIBS.tmp" "$LIBS"
touch "$STAMP"
