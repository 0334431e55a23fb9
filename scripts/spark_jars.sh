#!/usr/bin/env bash
# The jars that let RayDP's Spark keep Delta Lake and Apache Iceberg tables
# (raylink.connectors.spark.session hands them to Spark as local jars through spark.jars):
# io.delta:delta-spark_2.12 with delta-storage (the Delta release built on Spark 3.5, the Spark
# that raydp pins) and org.apache.iceberg:iceberg-spark-runtime-3.5_2.12 (shaded, self-contained),
# resolved with Maven into .cache/spark-jars/libs (scripts/maven_jars.sh: idempotent, offline first;
# nothing downloads when a job starts). Only these three jars are copied (no transitive ones):
# Spark, Hadoop and Scala are on RayDP's classpath already.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/maven_jars.sh
DELTA_VERSION="${DELTA_VERSION:-3.3.2}"
ICEBERG_VERSION="${ICEBERG_VERSION:-1.10.1}"
maven_jars .cache/spark-jars ".complete-delta-$DELTA_VERSION-iceberg-$ICEBERG_VERSION" \
    "Delta Lake $DELTA_VERSION's and Iceberg $ICEBERG_VERSION's Spark jars" "
    <dependency><groupId>io.delta</groupId><artifactId>delta-spark_2.12</artifactId><version>$DELTA_VERSION</version></dependency>
    <dependency><groupId>io.delta</groupId><artifactId>delta-storage</artifactId><version>$DELTA_VERSION</version></dependency>
    <dependency><groupId>org.apache.iceberg</groupId><artifactId>iceberg-spark-runtime-3.5_2.12</artifactId><version>$ICEBERG_VERSION</version></dependency>" \
    -DexcludeTransitive=true
