#!/usr/bin/env bash
# Idempotent setup: a virtualenv in .venv with raylink (editable) and its pinned
# dependencies, plus a Java runtime for the Spark bridge when none is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if ! command -v java >/dev/null 2>&1; then
    echo "raylink setup: installing a Java runtime (openjdk-17-jre-headless) for Spark" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.raylink-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
    .venv/bin/python -m pip install -q -e ".[dev]" 2>&1 | grep -v '^WARNING: Location' || true
    .venv/bin/python -c "import raylink, ray, msgpack, pytest" && touch "$stamp"
fi
