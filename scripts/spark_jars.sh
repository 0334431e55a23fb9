#!/usr/bin/env bash
# The jars that let RayDP's Spark keep Delta Lake and Apache Iceberg tables
# (raylink.connectors.spark.session hands them to Spark as local jars through spark.jars):
# io.delta:delta-spark_2.12 with delta-storage (the Delta release built on Spark 3.5, the Spark
# that raydp pins) and org.apache.iceberg:iceberg-spark-runtime-3.5_2.12 (shaded, self-contained),
# resolved with Maven from Maven Central into .cache/spark-jars/ (ignored by git): libs/ holds the
# jars, m2/ Maven's local repository. Only these three jars are copied: Spark, Hadoop and Scala are
# on RayDP's classpath already. Idempotent: when libs/ is complete for these versions it returns
# at once; a run after a partial one resolves offline first (Maven's -o), then online. Nothing
# downloads when a job starts. Needs java and mvn (installed with apt-get when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
DELTA_VERSION="${DELTA_VERSION:-3.3.2}"
ICEBERG_VERSION="${ICEBERG_VERSION:-1.10.1}"
CACHE=".cache/spark-jars"
LIBS="$CACHE/libs"
STAMP="$LIBS/.complete-delta-$DELTA_VERSION-iceberg-$ICEBERG_VERSION"
if [ -f "$STAMP" ] && [ -f "$LIBS/delta-spark_2.12-$DELTA_VERSION.jar" ] \
    && [ -f "$LIBS/iceberg-spark-runtime-3.5_2.12-$ICEBERG_VERSION.jar" ]; then
    exit 0
fi
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    echo "raylink setup: installing Java and Maven for Spark's Delta and Iceberg jars" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq openjdk-17-jre-headless maven >/dev/null
fi
mkdir -p "$CACHE/m2"
POM="$CACHE/pom.xml"
cat > "$POM" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>raylink.setup</groupId>
  <artifactId>spark-table-formats</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>io.delta</groupId>
      <artifactId>delta-spark_2.12</artifactId>
      <version>$DELTA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>io.delta</groupId>
      <artifactId>delta-storage</artifactId>
      <version>$DELTA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.iceberg</groupId>
      <artifactId>iceberg-spark-runtime-3.5_2.12</artifactId>
      <version>$ICEBERG_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
rm -rf "$LIBS.tmp"
resolve() {
    mvn -B -q -Dstyle.color=never "$@" -f "$POM" -Dmaven.repo.local="$PWD/$CACHE/m2" dependency:copy-dependencies \
        -DoutputDirectory="$PWD/$LIBS.tmp" -DexcludeTransitive=true -DincludeScope=runtime
}
if ! resolve -o >/dev/null 2>&1; then
    echo "raylink setup: resolving Delta Lake $DELTA_VERSION's and Iceberg $ICEBERG_VERSION's Spark jars with Maven" >&2
    rm -rf "$LIBS.tmp"
    resolve
fi
rm -rf "$LIBS"
mv "$LIBS.tmp" "$LIBS"
touch "$STAMP"
