"""The session-window fast path of Flink's ``WindowOperator``: ``EventTimeSessionWindows``
with a fixed gap, the default ``EventTimeTrigger``, no evictor, no allowed lateness, on the
heap state backend.

Most elements of a session stream open a session of their key or land in (and perhaps extend)
the one session of their key that they touch. For those the work of
``MergingWindowSet.addWindow`` and the merge function is done inline: the key's in-flight
mapping (window -> state window, the ``"merging-window-set"`` entry) gets the new or grown
window (a grown one under its old state window), the contents under the state window take the
element (reduce, aggregate or append), and the trigger's timer is registered or moves from the
old window's max timestamp to the new one's (``EventTimeTrigger.onMerge`` registering,
``clear`` deleting). Every other element -- one that touches two sessions (they merge), one
whose window the current watermark has reached, contents or sets not in plain dicts -- goes
through the operator's general path. Either path leaves the same sets, contents and timers, so
the two mix freely and a checkpoint taken by one restores into the other.
:func:`process_sessions_pure` is the general path applied element by element (the RocksDB
backend's tables take it); the tests compare the loop with it, state and output, after every run.

Not thread-safe: the window operator's task thread only.
"""

from __future__ import annotations

from functools import partial
from typing import Any, List

from raylink.core.window_types import TimeWindow
from raylink.operators.base import MIN_WATERMARK
from raylink.state.state_table import REMOVED

_MISSING = object()
#: ``TimeWindow((start, end))`` without a Python frame
new_window = partial(tuple.__new__, TimeWindow)


def process_sessions(op: Any, values: List[Any], timestamps: Any) -> None:
    """Add ``values`` (with their ``timestamps``) to ``op``'s sessions (see the module doc).

    ``op`` is a ``WindowOperator`` whose ``_sessions`` flag is set; it does not flush."""
    table = op._table
    sets = op._merging_table
    if type(table.live) is not dict or type(sets.live) is not dict:
        process_sessions_pure(op, values, timestamps)
        return
    gap = op.assigner.session_gap
    timers = op.timer_service
    watermark = timers.current_watermark
    register, move = timers.register_event_time_timer, timers.move_event_time_timer
    key_group_of = op.keyed_state_backend.key_group_of
    key_of = op._key_of
    kind = op.contents_kind
    reduce = op._reduce
    add = getattr(op, "_add", None)
    create = getattr(op, "_create_acc", None)
    general = op._general
    contents = table.live
    live_sets = sets.live
    sets_layered, contents_layered = bool(sets.lower), bool(table.lower)
    missing = _MISSING
    for value, ts in zip(values, timestamps):
        end = ts + gap
        if end <= watermark + 1 or ts <= MIN_WATERMARK:  # due at once or late: the trigger fires now
            general(value, ts)
            continue
        key = key_of(value)
        mapping = live_sets.get(key)
        if type(mapping) is not dict:  # none, or a checkpoint's layers hold it (or its tombstone)
            mapping = sets.lookup(key, None, True) if sets_layered else None  # (a copy in live)
        hit = None
        if mapping:  # the key's sessions in flight (rarely more than one): the one [ts, end) touches
            for window in mapping:
                if window[0] <= end and window[1] >= ts:
                    if hit is not None:  # it bridges two sessions, which merge: the general way
                        hit = missing
                        break
                    hit = window
        if hit is None:  # a new session of the key (in-flight sessions never touch each other)
            key_group_of(key)  # validates the key
            window = new_window((ts, end))
            if mapping:
                mapping[window] = window
            else:
                live_sets[key] = {window: window}
            pane = contents.get(window)
            if pane is None:
                pane = contents[window] = {}
            if kind == "reducing":
                pane[key] = value
            elif kind == "aggregating":
                pane[key] = add(value, create())
            else:
                pane[key] = [value]
            register(key, end - 1, window)
            continue
        if hit is missing:
            general(value, ts)
            continue
        start0, end0 = window = hit
        if end0 <= watermark + 1:  # the session is due: the trigger fires at once (the general way)
            general(value, ts)
            continue
        state_window = mapping[window]
        if ts < start0 or end > end0:  # the session grows: same state window, the timer moves
            grown = new_window((start0 if start0 < ts else ts, end0 if end0 > end else end))
            del mapping[window]
            mapping[grown] = state_window
            move(key, end0 - 1, window, grown[1] - 1, grown)
        pane = contents.get(state_window)
        acc = missing if pane is None else pane.get(key, missing)
        if acc is missing or acc is REMOVED:
            # in a checkpoint's layers (copied into live: changed in place below), or none
            acc = table.ns_lookup(state_window, key, missing, True) if contents_layered else missing
            pane = contents.get(state_window)
            if pane is None:
                pane = contents[state_window] = {}
        if kind == "reducing":
            pane[key] = value if acc is missing else reduce(acc, value)
        elif kind == "aggregating":
            pane[key] = add(value, create() if acc is missing else acc)
        elif acc is missing:
            pane[key] = [value]
        else:
            acc.append(value)


def process_sessions_pure(op: Any, values: List[Any], timestamps: Any) -> None:
    """The general path, element by element: what :func:`process_sessions` must leave."""
    for value, ts in zip(values, timestamps):
        op._general(value, ts)


__all__ = ["process_sessions", "process_sessions_pure"]
