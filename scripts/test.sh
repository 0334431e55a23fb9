#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# the compiled per-record path must build here: setup fails without it, and its twin tests
# (tests/test_shuffle_hotpath.py) fail instead of skipping
export RAYLINK_REQUIRE_COMPILED=1
bash scripts/setup.sh
.venv/bin/ruff check . && .venv/bin/ruff format --check .  # lint and format (pyproject.toml [tool.ruff])
.venv/bin/python -m pytest tests -q "$@"
# the hot-path tests once more on the pure-Python twins (the run above takes the compiled path when it is built)
RAYLINK_PURE_PYTHON=1 exec .venv/bin/python -m pytest -q tests/test_shuffle_hotpath.py tests/test_shuffle_partitioners.py \
    tests/test_shuffle_serializer.py tests/test_operators_basic.py tests/test_operators_keyed.py \
    tests/test_shuffle_codec_collect.py tests/test_collect_buffer.py tests/test_state_rocksdb_batches.py \
    tests/test_bad_input_keys.py tests/test_shuffle_codec_any_str.py
