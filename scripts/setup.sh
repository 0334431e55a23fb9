#!/usr/bin/env bash
# Idempotent setup: a virtualenv in .venv with raylink (editable), its pinned
# dependencies and the extras the tests and the demo use (dev, spark, plots; override
# with RAYLINK_EXTRAS=dev,plots), plus a Java runtime when the spark extra is wanted.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
EXTRAS="${RAYLINK_EXTRAS:-dev,spark,plots}"
if [[ ",$EXTRAS," == *,spark,* ]] && ! command -v java >/dev/null 2>&1; then
    echo "raylink setup: installing a Java runtime (openjdk-17-jre-headless) for Spark" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.raylink-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$(cat "$stamp")" != "$EXTRAS" ]; then
    .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
    .venv/bin/python -m pip install -q -e ".[$EXTRAS]" 2>&1 | grep -v '^WARNING: Location' || true
    .venv/bin/python -c "import raylink, ray, msgpack" && echo "$EXTRAS" > "$stamp"
fi
