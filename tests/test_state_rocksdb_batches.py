"""The RocksDB table's batch loops (``reduce_batch``, ``sum_pairs_batch``: the keyed rolling
reduce's per-batch path) against a plain dict running the same contract record by record.

Random batches of records over int, str, tuple, huge-int and invalid keys (None, another
subtask's key group: the first-record check raises there, after the records before it were
stored), with flushes, per-record reads and writes and snapshot -> restore into a new backend
between the batches; after every step the results, the raised error and every stored entry
must equal the dict's. No Ray.
"""

from __future__ import annotations

import cloudpickle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylink.operators import reduce as reduce_loops
from raylink.state.checkpoint_storage import CheckpointStorage, read_state_handle
from raylink.state.rocksdb_keyed_state_backend import RocksDBKeyedStateBackend, RocksDBSettings
from raylink.state.state_backend_loader import bind_shared_files, materialize_snapshot, restore_keyed_state

pytestmark = pytest.mark.timeout(300)

MAX_P = 128
GROUPS = (0, 95)  # some keys belong to another subtask: their first record is refused


def reference_reduce(values, key_of, state, reduce, on_miss):
    """The contract, on a dict: per record ``reduce(stored, record)`` or ``on_miss(key, record)``."""
    out = []
    for value in values:
        key = key_of(value)
        if key in state:
            value = reduce(state[key], value)
        else:
            value = on_miss(key, value)
        state[key] = value
        out.append(value)
    return out


def reference_sum_pairs(values, key_of, state, on_miss):
    out = []
    for index, value in enumerate(values):
        key = key_of(value)
        if key in state:
            value = (state[key][0], state[key][1] + value[1])
        else:
            if type(value) is not tuple or len(value) != 2:
                return out, index
            value = on_miss(key, value)
        state[key] = value
        out.append(value)
    return out, len(values)


keys = st.one_of(
    st.integers(-3, 60),
    st.sampled_from(["a", "b", "é", "", 2**70, None, 1.5, True]),
    st.tuples(st.integers(0, 2), st.sampled_from(["x", "y"])),
)
records = st.one_of(
    st.tuples(keys, st.integers(-5, 5)),
    st.tuples(keys, st.integers(0, 3), st.just("extra")),  # not a pair: sum_pairs stops there
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("reduce"), st.lists(records, max_size=40)),
        st.tuples(st.just("sum_pairs"), st.lists(records, max_size=40)),
        st.tuples(st.just("record"), records),  # the per-record path in between
        st.tuples(st.just("flush"), st.none()),
        st.tuples(st.just("restore"), st.none()),
    ),
    max_size=12,
)


def make(folder, capacity):
    backend = RocksDBKeyedStateBackend(GROUPS, MAX_P, RocksDBSettings(str(folder / "local"), incremental=True))
    backend.cache_capacity = capacity
    return backend


def snapshot_and_restore(backend, folder, checkpoint_id, capacity):
    """``backend``'s state through a completed checkpoint into a new backend."""
    storage = CheckpointStorage(str(folder / "chk"), "job", num_retained=1)
    snapshot, shared, _ = materialize_snapshot({"keyed": backend.snapshot(checkpoint_id)}, storage, checkpoint_id)
    handle = storage.write_state(checkpoint_id, "op", 0, cloudpickle.dumps(snapshot), shared=shared)
    completed = storage.finalize(checkpoint_id, {"op": {0: handle}})
    backend.notify_checkpoint_complete(checkpoint_id)
    state_handle = completed.get_state("op", 0)
    keyed = bind_shared_files(cloudpickle.loads(read_state_handle(state_handle)), state_handle)["keyed"]
    restored = make(folder, capacity)
    restore_keyed_state(restored, [keyed])
    backend.dispose()
    return restored


def run(steps, folder, capacity):
    backend = make(folder, capacity)
    table = backend.get_table("_op_state", "value").values
    expected: dict = {}

    def key_of(record):
        return record[0]

    def on_miss(key, record):
        backend.key_group_of(key)  # raises for None and for another subtask's key
        return (record[0], record[1] + 100)

    def reduce(stored, record):
        return (stored[0], stored[1] * 2 + record[1])

    for n, (op, arg) in enumerate(steps):
        if op in ("reduce", "sum_pairs", "record"):
            batch = [arg] if op == "record" else arg
            outcomes = []
            for target, state in ((table, None), (None, expected)):
                try:
                    if op == "sum_pairs":
                        if target is not None:
                            got = target.sum_pairs_batch(batch, key_of, on_miss, reduce_loops.sum_pairs_batch)
                        else:
                            got = reference_sum_pairs(batch, key_of, state, on_miss)
                    elif op == "reduce":
                        if target is not None:
                            got = target.reduce_batch(batch, key_of, reduce, on_miss, reduce_loops.reduce_batch)
                        else:
                            got = reference_reduce(batch, key_of, state, reduce, on_miss)
                    else:  # what process_element does, through the mapping's get / __setitem__
                        mapping = target if target is not None else state
                        key = key_of(arg)
                        current = mapping.get(key, "absent")
                        got = on_miss(key, arg) if current == "absent" else reduce(current, arg)
                        mapping[key] = got
                    outcomes.append(("ok", got))
                except ValueError as e:
                    outcomes.append(("error", str(e)))
            assert outcomes[0] == outcomes[1], (n, op, arg)
        elif op == "flush":
            backend.flush()
        else:
            backend = snapshot_and_restore(backend, folder, n + 1, capacity)
            table = backend.get_table("_op_state", "value").values
        assert dict(table.items()) == expected
    backend.dispose()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, capacity=st.sampled_from([4, 64, 1 << 14]))
def test_batch_loops_store_and_return_what_a_dict_running_the_contract_does(steps, capacity, tmp_path_factory):
    run(steps, tmp_path_factory.mktemp("batches"), capacity)


def test_a_large_batch_over_many_keys_and_repeated_keys(tmp_path):
    """Batches larger than the cache, keys repeated within a batch and across flushes."""
    backend = make(tmp_path, 1024)
    table = backend.get_table("_op_state", "value").values
    expected: dict = {}

    def on_miss(key, record):
        backend.key_group_of(key)
        return record

    mine = [k for k in range(20000) if backend.start <= _group(k) <= backend.end]
    for round_ in range(3):
        batch = [(k, round_) for k in mine[round_ * 3000 : round_ * 3000 + 5000]] + [(mine[0], 1)] * 10
        got, stop = table.sum_pairs_batch(batch, lambda r: r[0], on_miss, reduce_loops.sum_pairs_batch)
        want, want_stop = reference_sum_pairs(batch, lambda r: r[0], expected, lambda k, r: r)
        assert (got, stop) == (want, want_stop)
    assert dict(table.items()) == expected
    backend.dispose()


def _group(key):
    from raylink.core.key_groups import assign_to_key_group

    return assign_to_key_group(key, MAX_P)
