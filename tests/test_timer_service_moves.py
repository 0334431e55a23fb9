"""Keyed event-time timers registered, deleted and moved (a session that grew), against a
brute-force model: every registered timer fires once, when the watermark reaches it, in
timestamp order (Flink's timer queue orders by timestamp alone); a snapshot (which leaves
copy-on-write layers under the next operations) lists exactly the registered timers, and a
restore of it fires the same."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylink.operators import ManualProcessingTimeService
from raylink.operators.timer_service import InternalTimerService
from raylink.state.state_backend import HeapKeyedStateBackend

KEYS = ("a", "b", "c")


class _Fired:
    def __init__(self) -> None:
        self.timers: list = []

    def on_event_time(self, timestamp, key, namespace) -> None:
        self.timers.append((timestamp, key, namespace))


def _service():
    fired = _Fired()
    backend = HeapKeyedStateBackend.for_subtask(128, 1, 0)
    return InternalTimerService(backend, ManualProcessingTimeService(), fired), fired


class _Model:
    """The registered timers, fired by brute force."""

    def __init__(self) -> None:
        self.timers: set = set()  # (ts, key, namespace)

    def register(self, timer) -> None:
        self.timers.add(timer)

    def advance(self, watermark) -> list:
        due = sorted((t for t in self.timers if t[0] <= watermark), key=_order)
        self.timers.difference_update(due)
        return due


def _order(timer):
    return timer[0], repr(timer)


def _in_order(fired: list) -> list:
    """``fired`` as the model lists it, once its timestamps are seen to be in order."""
    assert [t[0] for t in fired] == sorted(t[0] for t in fired)
    return sorted(fired, key=_order)


operation = st.one_of(
    st.tuples(st.just("register"), st.sampled_from(KEYS), st.integers(0, 60), st.integers(0, 3)),
    st.tuples(st.just("delete"), st.sampled_from(KEYS), st.integers(0, 60), st.integers(0, 3)),
    st.tuples(st.just("move"), st.sampled_from(KEYS), st.integers(0, 60), st.integers(-10, 30)),
    st.tuples(st.just("advance"), st.integers(0, 8)),
    st.tuples(st.just("snapshot")),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=80))
def test_registered_deleted_and_moved_timers_fire_as_the_model_says(operations):
    service, fired = _service()
    model = _Model()
    watermark = -1
    expected: list = []
    for op in operations:
        if op[0] == "register":
            _, key, ts, ns = op
            service.register_event_time_timer(key, ts, ns)
            model.register((ts, key, ns))
        elif op[0] == "delete":
            _, key, ts, ns = op
            service.delete_event_time_timer(key, ts, ns)
            model.timers.discard((ts, key, ns))
        elif op[0] == "move":  # a key's registered timer (the first of the model's) moves by ``shift``
            _, key, _, shift = op
            mine = sorted((t for t in model.timers if t[1] == key), key=_order)
            if not mine:
                continue
            ts, _, ns = mine[0]
            new = (max(ts + shift, watermark + 1), key, ns + 1)
            service.move_event_time_timer(key, ts, ns, new[0], new[2])
            model.timers.remove((ts, key, ns))
            model.register(new)
        elif op[0] == "advance":
            watermark += op[1]
            before = len(fired.timers)
            service.advance_watermark(watermark)
            fired.timers[before:] = _in_order(fired.timers[before:])
            expected += model.advance(watermark)
        else:
            timers = sorted((t for groups in service.snapshot().values() for t in groups["event"]), key=repr)
            assert timers == sorted(model.timers, key=repr)
        assert fired.timers == expected
    # a checkpoint of what is left restores into another service, which fires it all
    restored, restored_fired = _service()
    restored.restore(dict(service.snapshot()))
    restored.advance_watermark(1 << 40)
    before = len(fired.timers)
    service.advance_watermark(1 << 40)
    left = model.advance(1 << 40)
    assert _in_order(fired.timers[before:]) == left and fired.timers[:before] == expected
    assert _in_order(restored_fired.timers) == left
    assert service.num_event_time_timers() == 0
