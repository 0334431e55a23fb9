#!/usr/bin/env bash
# Idempotent setup: a virtualenv in .venv with raylink (editable), its pinned
# dependencies and the extras the tests and the demo use (dev, spark, plots; override
# with RAYLINK_EXTRAS=dev,plots), plus a Java runtime when the spark extra is wanted.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
EXTRAS="${RAYLINK_EXTRAS:-dev,spark,plots}"
# one line on stderr per step that does something; a step's own output only when it fails
step() { echo "raylink setup: $*" >&2; }
quietly() {
    local log rc=0
    log=$(mktemp)
    "$@" >"$log" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] || cat "$log" >&2
    rm -f "$log"
    return "$rc"
}
if [[ ",$EXTRAS," == *,spark,* ]] && ! command -v java >/dev/null 2>&1; then
    echo "raylink setup: installing a Java runtime (openjdk-17-jre-headless) for Spark" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    quietly $SUDO apt-get update -qq && quietly $SUDO apt-get install -y -qq openjdk-17-jre-headless
fi
# The dashboard's browser test (dev extra) drives Debian's chromium through playwright, which
# must not download browsers of its own; without chromium that test is skipped, saying why (with CI set it fails instead).
if [[ ",$EXTRAS," == *,dev,* ]] && ! command -v chromium >/dev/null 2>&1; then
    echo "raylink setup: installing chromium for the dashboard's browser test" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    { quietly $SUDO apt-get update -qq && quietly $SUDO apt-get install -y -qq chromium; } \
        || echo "raylink setup: chromium could not be installed; the browser test will be skipped (it fails with CI set)" >&2
fi
if [ ! -x .venv/bin/python ]; then
    step "creating the virtualenv .venv"
    "$PYTHON" -m venv .venv
fi
# raylink (editable) with its pinned packages, installed by uv (from PyPI, into .venv: it fetches
# and unpacks in parallel, minutes faster than pip on a fresh machine); redone when pyproject.toml
# or the extras change
stamp=.venv/.raylink-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$(cat "$stamp")" != "$EXTRAS" ]; then
    step "installing raylink[$EXTRAS] and its pinned packages into .venv"
    [ -x .venv/bin/uv ] || quietly .venv/bin/python -m pip install -q --disable-pip-version-check "uv>=0.5,<1"
    quietly .venv/bin/uv pip install --python .venv/bin/python -e ".[$EXTRAS]"
    .venv/bin/python -c "import raylink, ray, msgpack" && echo "$EXTRAS" > "$stamp"
fi
# The Kafka broker's jars (Maven, into .cache/kafka/) for the tests' kafka_broker fixture (the dev
# extra) and `raylink kafka start`: resolved once, a no-op afterwards (without the dev extra, e.g.
# for the demo, run `bash scripts/kafka_jars.sh` before `raylink kafka start`). Without Maven
# Central the rest of the setup goes on; the broker then fails to start naming scripts/kafka_jars.sh.
if [[ ",$EXTRAS," == *,dev,* ]]; then
    bash scripts/kafka_jars.sh \
        || echo "raylink setup: the Kafka broker's jars could not be resolved (bash scripts/kafka_jars.sh); Kafka tests will fail" >&2
fi
# Debian's redis-server for the head-restart test with Ray's GCS fault tolerance (the dev extra):
# installed once, its service not started (the test starts its own on a free port).
if [[ ",$EXTRAS," == *,dev,* ]]; then
    bash scripts/redis.sh || echo "raylink setup: redis-server could not be installed (bash scripts/redis.sh); the GCS fault-tolerance test will fail" >&2
fi
# Spark's Delta Lake and Iceberg jars (Maven, into .cache/spark-jars/; raylink's Spark session
# loads them as local jars when the spark extra is installed): resolved once, a no-op afterwards.
if [[ ",$EXTRAS," == *,spark,* ]]; then
    bash scripts/spark_jars.sh
fi
# The compiled per-record path (shuffle/_hotpath.pyx and core/_row.pyx, Cython; setup.py): built
# in place, again whenever a .pyx is newer than its module. Without a C compiler it is left out and
# raylink runs on its pure-Python twins (as with RAYLINK_PURE_PYTHON=1) -- unless
# RAYLINK_REQUIRE_COMPILED=1 (scripts/test.sh, CI): then setup fails, showing the build's output.
require_compiled="${RAYLINK_REQUIRE_COMPILED:-}"
compiled_sources=(shuffle/_hotpath.pyx core/_row.pyx)
compiled_built() {  # every module built from its current .pyx, and importable
    local source so
    for source in "${compiled_sources[@]}"; do
        so=$(ls "${source%.pyx}".*.so 2>/dev/null | head -n 1 || true)
        if [ -z "$so" ] || [ "$source" -nt "$so" ]; then
            return 1
        fi
    done
    RAYLINK_PURE_PYTHON= .venv/bin/python -c "import raylink.shuffle._hotpath, raylink.core._row"
}
if ! compiled_built 2>/dev/null; then
    py_include=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    if ! command -v cc >/dev/null 2>&1 || [ ! -f "$py_include/Python.h" ]; then
        echo "raylink setup: installing a C compiler and Python headers (gcc, python3-dev) for the compiled path" >&2
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        { quietly $SUDO apt-get update -qq && quietly $SUDO apt-get install -y -qq gcc python3-dev; } || true
    fi
    step "building the compiled per-record path (${compiled_sources[*]})"
    quietly .venv/bin/python -m pip install -q --disable-pip-version-check "setuptools>=68" "Cython>=3" || true
    build_log=$(mktemp)
    if ! .venv/bin/python setup.py -q build_ext --inplace >"$build_log" 2>&1 || ! compiled_built 2>>"$build_log"; then
        if [ -n "$require_compiled" ]; then
            cat "$build_log" >&2
            rm -f "$build_log"
            echo "raylink setup: the compiled per-record path did not build (RAYLINK_REQUIRE_COMPILED is set)" >&2
            exit 1
        fi
        echo "raylink setup: the compiled per-record path did not build; raylink runs on its pure-Python path" >&2
    fi
    rm -f "$build_log"
fi
