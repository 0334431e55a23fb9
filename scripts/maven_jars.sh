#!/usr/bin/env bash
# Sourced by scripts/kafka_jars.sh and scripts/spark_jars.sh: `maven_jars` resolves JVM artifacts
# from Maven Central into a cache folder of the checkout (ignored by git): CACHE/libs/ holds the
# jars, CACHE/m2/ Maven's local repository. Idempotent: when CACHE/libs/ holds STAMP it returns at
# once; a run after a partial one resolves offline first (Maven's -o), then online, and libs/ is
# replaced only by a whole new set. Nothing downloads at test or job time. Installs java and mvn
# with apt-get when missing.
#
#   maven_jars CACHE STAMP WHAT DEPENDENCIES [copy-dependencies options ...]
#     CACHE         the cache folder, e.g. .cache/kafka
#     STAMP         a file name in libs/ that marks this set of versions complete
#     WHAT          what is resolved, for the progress line on stderr
#     DEPENDENCIES  the <dependency> elements of the pom (XML)
maven_jars() {
    local cache="$1" stamp="$2" what="$3" dependencies="$4"
    shift 4
    local libs="$cache/libs" pom="$cache/pom.xml"
    if [ -f "$libs/$stamp" ]; then
        return 0
    fi
    if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
        echo "raylink setup: installing Java and Maven for $what" >&2
        local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
        $sudo apt-get update -qq && $sudo apt-get install -y -qq openjdk-17-jre-headless maven >/dev/null
    fi
    mkdir -p "$cache/m2"
    cat > "$pom" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>raylink.setup</groupId>
  <artifactId>$(basename "$cache")</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
$dependencies
  </dependencies>
</project>
POM
    rm -rf "$libs.tmp"
    if ! _maven_copy "$pom" "$cache" "$libs.tmp" -o "$@" >/dev/null 2>&1; then
        echo "raylink setup: resolving $what with Maven" >&2
        rm -rf "$libs.tmp"
        _maven_copy "$pom" "$cache" "$libs.tmp" "$@"
    fi
    rm -rf "$libs"
    mv "$libs.tmp" "$libs"
    touch "$libs/$stamp"
}

_maven_copy() {
    local pom="$1" cache="$2" out="$3"
    shift 3
    mvn -B -q -Dstyle.color=never -f "$pom" -Dmaven.repo.local="$PWD/$cache/m2" dependency:copy-dependencies \
        -DoutputDirectory="$PWD/$out" -DincludeScope=runtime "$@"
}
