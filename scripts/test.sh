#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite.
#
# Without arguments the suite runs in two pytest processes side by side: one runs the
# in-process tests, then the tests on Ray with Kafka or with Spark through RayDP (on a Ray of
# its own), then the hot-path tests once more on the pure-Python twins; the other the remaining
# tests on a local Ray (multi-node clusters last). The Ray tests mostly wait on the processes they
# started, so on CI's two cores each half fits beside the other. With arguments (e.g.
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
    tests/test_bad_input_keys.py tests/test_shuffle_codec_any_str.py)
if [ $# -gt 0 ]; then
    .venv/bin/python -m pytest tests -q "$@"
    # the hot-path tests once more on the pure-Python twins (the run above takes the compiled path when it is built)
    RAYLINK_PURE_PYTHON=1 exec .venv/bin/python -m pytest -q "${PURE_TWIN_TESTS[@]}"
fi
work=$(mktemp -d /tmp/raylink-tests.XXXXXX)
(
    status=0
    .venv/bin/python -m pytest tests -q -m "not ray" --basetemp "$work/in-process" || status=$?
    .venv/bin/python -m pytest tests -q -m "ray and (spark or kafka)" --basetemp "$work/spark-kafka" || status=$?
    RAYLINK_PURE_PYTHON=1 .venv/bin/python -m pytest -q --basetemp "$work/pure" "${PURE_TWIN_TESTS[@]}" || status=$?
    exit $status
) >"$work/first-half.log" 2>&1 &
first_half=$!
status=0
echo "== the tests on a local Ray without Spark or Kafka (the others run beside them; their output follows) =="
.venv/bin/python -m pytest tests -q -m "ray and not spark and not kafka" --basetemp "$work/ray" || status=$?
wait "$first_half" || status=$?
echo "== the in-process tests, the tests on Ray with Kafka or Spark, then the hot-path tests on the pure-Python twins =="
cat "$work/first-half.log"
rm -rf "$work"
exit $status
