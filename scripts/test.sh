#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite.
#
# Without arguments the two tiers run side by side: the in-process tests (then the hot-path
# tests once more on the pure-Python twins) in one pytest, the tests on a local Ray (Spark,
# Kafka, multi-node clusters) in another. The Ray tier mostly waits on the processes it
# started, so on CI's two cores the in-process tier fits beside it. With arguments (e.g.
# `-m "not slow"`) one pytest runs them over the whole suite, as before.
set -euo pipefail
cd "$(dirname "$0")/.."
# the compiled per-record path must build here: setup fails without it, and its twin tests
# (tests/test_shuffle_hotpath.py) fail instead of skipping
export RAYLINK_REQUIRE_COMPILED=1
bash scripts/setup.sh
.venv/bin/ruff check . && .venv/bin/ruff format --check .  # lint and format (pyproject.toml [tool.ruff])
PURE_TWIN_TESTS=(tests/test_shuffle_hotpath.py tests/test_shuffle_partitioners.py
    tests/test_shuffle_serializer.py tests/test_operators_basic.py tests/test_operators_keyed.py
    tests/test_shuffle_codec_collect.py tests/test_collect_buffer.py tests/test_state_rocksdb_batches.py
    tests/test_bad_input_keys.py tests/test_shuffle_codec_any_str.py tests/test_core_row_twins.py)
if [ $# -gt 0 ]; then
    .venv/bin/python -m pytest tests -q "$@"
    # the hot-path tests once more on the pure-Python twins (the run above takes the compiled path when it is built)
    RAYLINK_PURE_PYTHON=1 exec .venv/bin/python -m pytest -q "${PURE_TWIN_TESTS[@]}"
fi
work=$(mktemp -d /tmp/raylink-tests.XXXXXX)
(
    status=0
    .venv/bin/python -m pytest tests -q -m "not ray" --basetemp "$work/in-process" || status=$?
    RAYLINK_PURE_PYTHON=1 .venv/bin/python -m pytest -q --basetemp "$work/pure" "${PURE_TWIN_TESTS[@]}" || status=$?
    exit $status
) >"$work/in-process.log" 2>&1 &
in_process=$!
status=0
echo "== the tests on a local Ray (the in-process tests run beside them; their output follows) =="
.venv/bin/python -m pytest tests -q -m ray --durations=30 --basetemp "$work/ray" || status=$?
wait "$in_process" || status=$?
echo "== the in-process tests, then the hot-path tests on the pure-Python twins =="
cat "$work/in-process.log"
rm -rf "$work"
exit $status
