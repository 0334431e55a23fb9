#!/usr/bin/env bash
# Set up (if needed) and run the demo job on the embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m raylink demo "$@"
