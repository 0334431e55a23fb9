"""The window operator: Flink's ``WindowOperator`` and ``EvictingWindowOperator``.

Each element is assigned to windows by the assigner; per (key, window) — a *pane* —
its contents live in the keyed state backend in the namespaced table
``"window-contents"`` (``key -> {window -> contents}``, so they are snapshotted by
key group): a reduced value, an ``AggregateFunction`` accumulator, or the list of
elements (with their timestamps when an evictor is set). The trigger decides per
element and per timer whether to fire (run the window function and emit its
results with timestamp ``window.max_timestamp()``) and/or purge. Timers are
``(timestamp, key, window)`` in the keyed ``InternalTimerService``; every pane also
gets a cleanup timer at ``max_timestamp + allowed_lateness`` (event time) or
``max_timestamp`` (processing time) that drops its state. An element whose windows
are all late (cleanup time <= watermark) and that is itself late (timestamp +
allowed lateness <= watermark) goes to the late-data side output or is counted in
``numLateRecordsDropped``. Merging assigners (sessions) go through a
``MergingWindowSet`` per key, persisted in the ``"merging-window-set"`` table; merged
panes merge their contents and trigger state.

Fast path: tumbling / sliding event-time windows with the default
``EventTimeTrigger`` and no evictor compute window starts inline and touch the
state table directly — per record only the user's key selector and reduce /
aggregate function run; timers are registered when a pane is created. Elements
whose window already fired (allowed lateness) take the general path. Event-time
sessions of a fixed gap (``EventTimeTrigger``, no evictor, no allowed lateness) take
:mod:`raylink.operators.window_sessions`' loop.

Not thread-safe: one instance per subtask, driven by its task thread (timers come
through the task's mailbox).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, List, Optional

from raylink.core.evictors import TimestampedValue
from raylink.core.output_tag import OutputTag
from raylink.core.triggers import EventTimeTrigger
from raylink.core.window_assigners import (
    EventTimeSessionWindows,
    MergingWindowAssigner,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from raylink.core.window_types import MAX_LONG_VALUE, MIN_LONG_VALUE, TimeWindow
from raylink.operators.base import AbstractUdfStreamOperator, EmittingMixin, resolve_key_selector
from raylink.operators.batch import internal_timer_service
from raylink.operators.merging_window_set import MergingWindowSet
from raylink.operators.reduce import reduce_batch
from raylink.operators.window_contexts import AssignerContext, EvictorContext, ProcessWindowContext, TriggerContext
from raylink.operators.window_sessions import process_sessions
from raylink.shuffle.hotpath import NATIVE
from raylink.state.state_backend import keyed_backend_for
from raylink.state.state_table import REMOVED


def min_max_pure(values: List[Any]) -> tuple:
    """``(min(values), max(values))`` (the pure-Python twin of the compiled one-pass ``min_max``)."""
    return min(values), max(values)


min_max = min_max_pure if NATIVE is None else NATIVE.min_max

CONTENTS_STATE = "window-contents"
MERGING_SET_STATE = "merging-window-set"
LATE_RECORDS_DROPPED = "numLateRecordsDropped"

REDUCING, AGGREGATING, LIST = "reducing", "aggregating", "list"
FUNCTION_KINDS = ("pass", "window", "process", "all_window", "process_all")


@dataclass
class WindowOperatorDescriptor:
    """Everything the window operator needs (Flink's ``WindowOperatorBuilder`` result).

    ``contents``: "reducing" (a reduced value per pane), "aggregating" (an
    ``AggregateFunction`` accumulator) or "list" (every element). ``function_kind``:
    "pass" (emit the reduced value / aggregate result), "window"
    (``apply(key, window, inputs)``), "process" (``process(key, context, elements)``),
    "all_window" (``apply(window, inputs)``) or "process_all" (``process(context, elements)``).
    """

    assigner: Any
    trigger: Any
    evictor: Any
    allowed_lateness: int
    late_data_output_tag: Optional[OutputTag]
    contents: str
    reduce_function: Any = None
    aggregate_function: Any = None
    window_function: Any = None
    function_kind: str = "pass"

    def describe(self, function_name: str, all_windows: bool) -> str:
        parts = [repr(self.assigner), type(self.trigger).__name__]
        if self.evictor is not None:
            parts.append(type(self.evictor).__name__)
        parts.append(function_name)
        return f"{'AllWindow' if all_windows else 'Window'}({', '.join(parts)})"


# a pane's "no value": also what a pane holds for a key removed since a checkpoint, so the hot
# loops' one identity check sends both to the full lookup (copy-on-write layers)
_MISSING = REMOVED

_NO_TIMESTAMP = (
    "Record has Long.MIN_VALUE timestamp (= no timestamp marker). Is the time characteristic set to "
    "'ProcessingTime', or did you forget to call 'data_stream.assign_timestamps_and_watermarks(...)'?"
)


# -- the operator -------------------------------------------------------------------------------------
class WindowOperator(EmittingMixin, AbstractUdfStreamOperator):
    """Keyed windows with Flink's semantics; ``descriptor`` is a
    :class:`WindowOperatorDescriptor` (assigner, trigger, evictor,
    allowed lateness, late-data tag, contents kind, user functions)."""

    def __init__(self, descriptor: Any, key_selector: Any, name: str = "", operator_id: str = "") -> None:
        super().__init__(descriptor, name or "Window", operator_id)
        self.descriptor = descriptor
        self.key_selector = key_selector
        self.assigner = descriptor.assigner
        self.trigger = descriptor.trigger
        self.evictor = descriptor.evictor
        self.allowed_lateness = int(descriptor.allowed_lateness or 0)
        self.late_data_output_tag = descriptor.late_data_output_tag
        self.contents_kind = descriptor.contents
        self.function_kind = descriptor.function_kind
        if self.contents_kind not in (REDUCING, AGGREGATING, LIST):
            raise ValueError(f"window operator {self.name!r}: unknown contents kind {self.contents_kind!r}")
        if self.function_kind not in FUNCTION_KINDS:
            raise ValueError(f"window operator {self.name!r}: unknown window function kind {self.function_kind!r}")
        if self.allowed_lateness < 0:
            raise ValueError(f"window operator {self.name!r}: the allowed lateness cannot be negative")
        self.merging = isinstance(self.assigner, MergingWindowAssigner)
        if self.merging and not self.trigger.can_merge():
            raise ValueError(
                f"window operator {self.name!r}: a merging window assigner cannot be used with a trigger "
                f"that does not support merging ({self.trigger!r})"
            )
        self.is_event_time = bool(self.assigner.is_event_time())
        self._pending: List[Any] = []
        self._pending_ts: Optional[int] = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def setup(self, output: Any, runtime_context: Any) -> None:
        super().setup(output, runtime_context)
        self.keyed_state_backend = backend = keyed_backend_for(runtime_context)
        self.timer_service = internal_timer_service(backend, runtime_context.processing_time_service, self)
        kind = "list" if (self.evictor is not None or self.contents_kind == LIST) else self.contents_kind
        self._table = backend.get_namespaced_table(CONTENTS_STATE, kind)
        self._merging_table = backend.get_table(MERGING_SET_STATE, "map") if self.merging else None
        self._merging_sets = self._merging_table.values if self.merging else None
        self._set_key = backend.set_current_key
        self._trigger_ctx = TriggerContext(self)
        self._window_ctx = ProcessWindowContext(self)
        self._assigner_ctx = AssignerContext(self)
        self._evictor_ctx = EvictorContext(self)
        self.num_late_records_dropped = runtime_context.get_metrics_group().counter(LATE_RECORDS_DROPPED)

    def open(self) -> None:
        if self.key_selector is None:
            raise ValueError(f"keyed operator {self.name!r} has no key selector")
        d = self.descriptor
        self._key_of = resolve_key_selector(self.key_selector, self.name)
        self._reduce: Optional[Callable[[Any, Any], Any]] = None
        if self.contents_kind == REDUCING:
            self._reduce = self._resolve(d.reduce_function, "reduce")
        elif self.contents_kind == AGGREGATING:
            agg = d.aggregate_function
            self._create_acc = self._resolve(agg, "create_accumulator")
            self._add = agg.add
            self._get_result = agg.get_result
            self._merge_acc = getattr(agg, "merge", None)
        self._window_fn = self._resolve_window_function()
        self._fn_clear = None
        if self.function_kind in ("process", "process_all"):
            clear = getattr(d.window_function, "clear", None)
            self._fn_clear = clear if callable(clear) else None
        self._open_functions()
        self._fast = (
            self.evictor is None
            and type(self.trigger) is EventTimeTrigger
            and type(self.assigner) in (TumblingEventTimeWindows, SlidingEventTimeWindows)
        )
        self._sliding = type(self.assigner) is SlidingEventTimeWindows
        # event-time sessions of a fixed gap that fire once (window_sessions' loop)
        self._sessions = (
            self.evictor is None
            and type(self.trigger) is EventTimeTrigger
            and type(self.assigner) is EventTimeSessionWindows
            and not self.allowed_lateness
        )
        # a firing that only hands the pane's reduced value on (no lateness, no window function):
        # the window's one timer emits its contents and drops the pane (_on_event_time_fast)
        self._fire_plain = (
            self._fast and not self.allowed_lateness and self._window_fn is None and self.contents_kind == REDUCING
        )
        self._window_cache: dict = {}

    def _resolve_window_function(self) -> Optional[Callable[..., Any]]:
        kind = self.function_kind
        fn = self.descriptor.window_function
        if kind == "pass":
            if self.contents_kind == LIST:
                raise ValueError(f"window operator {self.name!r}: buffered windows need a window function")
            return None
        method = "process" if kind in ("process", "process_all") else "apply"
        return self._resolve(fn, method)

    def close(self) -> None:
        self._flush_pending()
        self.timer_service.close()
        super().close()

    def end_input(self) -> None:
        self._flush_pending()

    # -- output ------------------------------------------------------------------------------------
    def _flush_pending(self) -> None:
        pending = self._pending
        if pending:
            self._pending = []
            rc = self.record_context
            previous = rc.timestamp
            rc.timestamp = self._pending_ts
            self._collect_batch(pending)
            rc.timestamp = previous

    def _emit_window(self, key: Any, window: Any, contents: Any, namespace: Any) -> None:
        """Run the window function on ``contents`` (stored under ``namespace``) and buffer its
        results (timestamp: ``window.max_timestamp()``; consecutive firings of one timestamp go
        out as one batch)."""
        max_ts = window.max_timestamp()
        if max_ts != self._pending_ts:
            self._flush_pending()
            self._pending_ts = max_ts
        if self.evictor is not None:
            self._emit_evicting(key, window, contents, max_ts)
            if not contents:  # everything evicted: the pane holds no state any more
                self._clear_contents(key, namespace)
            return
        kind = self.contents_kind
        if kind == AGGREGATING:
            contents = self._get_result(contents)
        if self._window_fn is None:  # reduce / aggregate without a window function
            self._pending.append(contents)
            return
        inputs = contents if kind == LIST else (contents,)
        self._call_window_function(key, window, inputs, max_ts)

    def _call_window_function(self, key: Any, window: Any, inputs: Any, max_ts: int) -> None:
        kind = self.function_kind
        rc = self.record_context
        previous = rc.timestamp
        rc.timestamp = max_ts  # side outputs of the function carry the window's timestamp
        try:
            if kind == "window":
                result = self._window_fn(key, window, inputs)
            elif kind == "all_window":
                result = self._window_fn(window, inputs)
            else:
                ctx = self._window_ctx
                ctx._window = window
                result = self._window_fn(key, ctx, inputs) if kind == "process" else self._window_fn(ctx, inputs)
            if result is not None:
                self._emit_into(result, self._pending.append)
        finally:
            rc.timestamp = previous

    def _emit_evicting(self, key: Any, window: Any, contents: List[Any], max_ts: int) -> None:
        """Flink's ``EvictingWindowOperator.emitWindowContents``: evict before, run the
        function on what is left, evict after, keep what remains."""
        elements = [TimestampedValue(v, t) for v, t in contents]
        self.evictor.evict_before(elements, len(elements), window, self._evictor_ctx)
        values = [e.value for e in elements]
        kind = self.contents_kind
        if kind == REDUCING:
            if not values:
                result_inputs: Any = ()
            else:
                acc = values[0]
                for v in values[1:]:
                    acc = self._reduce(acc, v)
                result_inputs = (acc,)
        elif kind == AGGREGATING:
            acc = self._create_acc()
            for v in values:
                acc = self._add(v, acc)
            result_inputs = (self._get_result(acc),)
        else:
            result_inputs = values
        if self._window_fn is None:
            self._pending.extend(result_inputs)
        elif result_inputs or kind == LIST:
            self._call_window_function(key, window, result_inputs, max_ts)
        self.evictor.evict_after(elements, len(elements), window, self._evictor_ctx)
        contents[:] = [(e.value, e.timestamp) for e in elements]

    # -- state helpers -----------------------------------------------------------------------------
    def _get_contents(self, key: Any, namespace: Any) -> Any:
        # an evictor changes the contents in place: a copy when a checkpoint shares them
        return self._table.ns_lookup(namespace, key, None, self.evictor is not None)

    def _pop_contents(self, key: Any, namespace: Any) -> Any:
        return self._table.ns_remove(namespace, key, _MISSING)

    def _clear_contents(self, key: Any, namespace: Any) -> None:
        self._pop_contents(key, namespace)

    def _add_contents(self, key: Any, namespace: Any, value: Any, timestamp: Optional[int]) -> None:
        table = self._table
        current = table.ns_lookup(namespace, key, _MISSING, True)  # (in place below: copy-on-write)
        pane = table.live_pane(namespace)
        if current is _MISSING:
            self.keyed_state_backend.key_group_of(key)  # validates the key once per pane
        if self.evictor is not None:
            if current is _MISSING:
                pane[key] = [(value, timestamp)]
            else:
                current.append((value, timestamp))
            return
        kind = self.contents_kind
        if kind == REDUCING:
            pane[key] = value if current is _MISSING else self._reduce(current, value)
        elif kind == AGGREGATING:
            pane[key] = self._add(value, self._create_acc() if current is _MISSING else current)
        elif current is _MISSING:
            pane[key] = [value]
        else:
            current.append(value)

    def _merge_contents(self, key: Any, target: Any, sources: List[Any]) -> None:
        """Flink's ``mergeNamespaces`` on the window contents."""
        merged = _MISSING
        for source in sources:
            value = self._pop_contents(key, source)
            if value is not _MISSING:
                merged = value if merged is _MISSING else self._merge_values(merged, value)
        if merged is not _MISSING:
            table = self._table
            current = table.ns_lookup(target, key, _MISSING, True)
            table.ns_put(target, key, merged if current is _MISSING else self._merge_values(current, merged))

    def _merge_values(self, a: Any, b: Any) -> Any:
        if self.evictor is not None or self.contents_kind == LIST:
            return a + b
        if self.contents_kind == REDUCING:
            return self._reduce(a, b)
        if self._merge_acc is None:
            raise TypeError(f"window operator {self.name!r}: merging windows need AggregateFunction.merge")
        return self._merge_acc(a, b)

    def _merging_window_set(self, key: Any) -> MergingWindowSet:
        mapping = self._merging_sets.get(key)
        if mapping is None:
            mapping = {}
        return MergingWindowSet(self.assigner, mapping)

    def _persist(self, key: Any, merging: MergingWindowSet) -> None:
        if merging.mapping:
            self._merging_sets[key] = merging.mapping
        else:
            self._merging_sets.pop(key, None)

    # -- time helpers ------------------------------------------------------------------------------
    def _cleanup_time(self, window: Any) -> int:
        max_ts = window.max_timestamp()
        if self.is_event_time:
            return min(max_ts + self.allowed_lateness, MAX_LONG_VALUE)
        return max_ts

    def _is_window_late(self, window: Any) -> bool:
        return self.is_event_time and self._cleanup_time(window) <= self.timer_service.current_watermark

    def _register_cleanup_timer(self, key: Any, window: Any) -> None:
        cleanup = self._cleanup_time(window)
        if cleanup == MAX_LONG_VALUE:
            return  # no cleanup at the end of time
        if self.is_event_time:
            self.timer_service.register_event_time_timer(key, cleanup, window)
        else:
            self.timer_service.register_processing_time_timer(key, cleanup, window)

    def _delete_cleanup_timer(self, key: Any, window: Any) -> None:
        cleanup = self._cleanup_time(window)
        if cleanup == MAX_LONG_VALUE:
            return
        if self.is_event_time:
            self.timer_service.delete_event_time_timer(key, cleanup, window)
        else:
            self.timer_service.delete_processing_time_timer(key, cleanup, window)

    # -- elements ----------------------------------------------------------------------------------
    def process_element(self, value: Any) -> None:
        ts = self.record_context.timestamp
        if self._fast or self._sessions:
            self._process_fast([value], (ts,))
        else:
            self._process_one(value, ts, self._key_of(value))
        self._flush_pending()

    def process_batch(self, values: List[Any]) -> None:
        ts = self.record_context.timestamp
        if self._fast or self._sessions:
            self._process_fast(values, [ts] * len(values))
        else:
            key_of = self._key_of
            one = self._process_one
            for value in values:
                one(value, ts, key_of(value))
        self._flush_pending()

    def process_timestamped_batch(self, values: List[Any], timestamps: List[int]) -> None:
        """Records that each carry their own timestamp (a run read from the network)."""
        if self._fast or self._sessions:
            self._process_fast(values, timestamps)
        else:
            rc = self.record_context
            previous = rc.timestamp
            key_of = self._key_of
            one = self._process_one
            for value, ts in zip(values, timestamps):
                rc.timestamp = ts
                one(value, ts, key_of(value))
            rc.timestamp = previous
        self._flush_pending()

    def _process_one(self, value: Any, timestamp: Optional[int], key: Any) -> None:
        """One element, the general way (Flink's ``processElement``)."""
        self._set_key(key)
        element_ts = MIN_LONG_VALUE if timestamp is None else timestamp
        windows = self.assigner.assign_windows(value, element_ts, self._assigner_ctx)
        ctx = self._trigger_ctx
        skipped = True
        if self.merging:
            merging = self._merging_window_set(key)
            for window in windows:
                actual = merging.add_window(window, lambda *args: self._merge(key, *args))
                if self._is_window_late(actual):
                    merging.retire_window(actual)
                    continue
                skipped = False
                state_window = merging.get_state_window(actual)
                if state_window is None:
                    raise RuntimeError(f"Window {window!r} is not in in-flight window set.")
                self._add_contents(key, state_window, value, timestamp)
                ctx.key = key
                ctx.window = actual
                result = self.trigger.on_element(value, element_ts, actual, ctx)
                if result.value[0]:
                    contents = self._get_contents(key, state_window)
                    if contents is None:
                        continue
                    self._emit_window(key, actual, contents, state_window)
                if result.value[1]:
                    self._clear_contents(key, state_window)
                self._register_cleanup_timer(key, actual)
            self._persist(key, merging)
        else:
            for window in windows:
                if self._is_window_late(window):
                    continue
                skipped = False
                self._add_contents(key, window, value, timestamp)
                ctx.key = key
                ctx.window = window
                result = self.trigger.on_element(value, element_ts, window, ctx)
                if result.value[0]:
                    contents = self._get_contents(key, window)
                    if contents is None:
                        continue
                    self._emit_window(key, window, contents, window)
                if result.value[1]:
                    self._clear_contents(key, window)
                self._register_cleanup_timer(key, window)
        if skipped and self._is_element_late(element_ts):
            self._late_element(value, timestamp)

    def _is_element_late(self, timestamp: int) -> bool:
        return self.is_event_time and timestamp + self.allowed_lateness <= self.timer_service.current_watermark

    def _late_element(self, value: Any, timestamp: Optional[int]) -> None:
        tag = self.late_data_output_tag
        if tag is None:
            self.num_late_records_dropped.inc()
            return
        rc = self.record_context
        previous = rc.timestamp
        rc.timestamp = timestamp
        self._emit_side(tag, value)
        rc.timestamp = previous

    def _merge(
        self,
        key: Any,
        merge_result: Any,
        merged_windows: List[Any],
        state_window_result: Any,
        merged_state_windows: List[Any],
    ) -> None:
        """Flink's merge function: check the merged window, merge triggers, drop the merged
        windows' trigger state and cleanup timers, merge the contents."""
        ts = self.timer_service
        if self.is_event_time and merge_result.max_timestamp() + self.allowed_lateness <= ts.current_watermark:
            raise RuntimeError(
                "The end timestamp of an event-time window cannot become earlier than the current watermark "
                f"by merging. Current watermark: {ts.current_watermark} window: {merge_result!r}"
            )
        if not self.is_event_time and merge_result.max_timestamp() <= ts.current_processing_time():
            raise RuntimeError(
                "The end timestamp of a processing-time window cannot become earlier than the current "
                f"processing time by merging. Current processing time: {ts.current_processing_time()} "
                f"window: {merge_result!r}"
            )
        ctx = self._trigger_ctx
        ctx.key = key
        ctx.window = merge_result
        ctx.merged_windows = merged_windows
        try:
            self.trigger.on_merge(merge_result, ctx)
        finally:
            ctx.merged_windows = None
        for window in merged_windows:
            ctx.window = window
            self.trigger.clear(window, ctx)
            self._delete_cleanup_timer(key, window)
        self._merge_contents(key, state_window_result, merged_state_windows)

    # -- the fast path -----------------------------------------------------------------------------
    def _process_fast(self, values: List[Any], timestamps: Any) -> None:
        """Tumbling / sliding event-time windows, ``EventTimeTrigger``, no evictor; event-time
        sessions (:mod:`raylink.operators.window_sessions`)."""
        try:
            if self._sessions:
                process_sessions(self, values, timestamps)
            elif self._sliding:
                self._process_sliding(values, timestamps)
            else:
                self._process_tumbling(values, timestamps)
        except TypeError:
            if any(ts is None for ts in timestamps):
                raise RuntimeError(_NO_TIMESTAMP) from None
            raise

    def _general(self, value: Any, ts: int) -> None:
        """An element whose oldest window is due (it fires at once or is late): the general way."""
        if ts <= MIN_LONG_VALUE:
            raise RuntimeError(_NO_TIMESTAMP)
        rc = self.record_context
        previous = rc.timestamp
        rc.timestamp = ts
        self._process_one(value, ts, self._key_of(value))
        rc.timestamp = previous

    def _new_pane(self, key: Any, window: TimeWindow, value: Any) -> dict:
        """First element of (key, window): its contents, the trigger's timer and the cleanup
        timer. Returns the window's pane (key -> contents) in the live layer."""
        pane = self._table.live_pane(window)
        self.keyed_state_backend.key_group_of(key)  # validates the key
        kind = self.contents_kind
        if kind == REDUCING:
            pane[key] = value
        elif kind == AGGREGATING:
            pane[key] = self._add(value, self._create_acc())
        else:
            pane[key] = [value]
        self._register_pane_timers(key, window)
        return pane

    def _register_pane_timers(self, key: Any, window: TimeWindow) -> None:
        """A new pane's timers: the trigger's at the window's end and, with allowed lateness,
        the cleanup timer."""
        max_ts = window[1] - 1
        register = self.timer_service.register_event_time_timer
        register(key, max_ts, window)
        if self.allowed_lateness:
            register(key, min(max_ts + self.allowed_lateness, MAX_LONG_VALUE), window)

    def _first_reduced(self, window: TimeWindow, key: Any, value: Any) -> Any:
        """``on_miss`` of the rolling reduce: (key, window)'s first element is its reduced value
        (stored by the loop); validates the key and registers the pane's timers."""
        self.keyed_state_backend.key_group_of(key)
        self._register_pane_timers(key, window)
        return value

    def _window(self, start: int) -> TimeWindow:
        window = self._window_cache.get(start)
        if window is None:
            window = self._window_cache[start] = TimeWindow(start, start + self.assigner.size)
        return window

    def _process_tumbling(self, values: List[Any], timestamps: Any) -> None:
        key_of = self._key_of
        table = self._table
        contents = table.live
        older = self._older_contents if table.lower else None
        size = self.assigner.size
        offset = self.assigner.offset
        # a window starting at or before this is due at the current watermark
        due = self.timer_service.current_watermark - size + 1
        if len(values) > 1:  # the usual run: every element in one window that is not due yet
            lowest, highest = min_max(timestamps if type(timestamps) is list else list(timestamps))
            start = lowest - (lowest - offset) % size
            if start > due and highest < start + size:
                self._process_in_window(values, self._window(start))
                return
        reducing = self.contents_kind == REDUCING
        aggregating = self.contents_kind == AGGREGATING
        reduce, add = self._reduce, getattr(self, "_add", None)
        new_pane = self._new_pane
        missing = _MISSING
        last_start = window = None
        pane: Any = None
        for value, ts in zip(values, timestamps):
            start = ts - (ts - offset) % size
            if start != last_start:
                if start <= due:
                    self._general(value, ts)
                    last_start = None  # the general path may have created or dropped panes
                    continue
                window = self._window(start)
                pane = contents.get(window)
                last_start = start
            key = key_of(value)
            acc = missing if pane is None else pane.get(key, missing)
            if acc is missing:
                if older is None:
                    pane = new_pane(key, window, value)
                    continue
                acc, pane = older(key, window)
                if acc is missing:
                    pane = new_pane(key, window, value)
                    continue
            if reducing:
                pane[key] = reduce(acc, value)
            elif aggregating:
                pane[key] = add(value, acc)
            else:
                acc.append(value)

    def _process_in_window(self, values: List[Any], window: TimeWindow) -> None:
        """Elements that all belong to ``window`` alone (not due): one pane, one loop per kind."""
        kind = self.contents_kind
        if kind == REDUCING and self._rolling_reduce(values, window):
            return
        table = self._table
        if table.lower:  # copy-on-write layers since a checkpoint: the general loop's lookups
            self._process_in_window_layered(values, window)
            return
        pane = table.live_pane(window)
        missing = _MISSING
        # a key's pane entry is read by subscript (a miss -- the pane's first element -- raises
        # KeyError once per (key, window)): cheaper per element than a dict.get call
        new_pane = self._new_pane
        pairs = zip(map(self._key_of, values), values)
        if kind == REDUCING:
            reduce = self._reduce
            for key, value in pairs:
                try:
                    acc = pane[key]
                except KeyError:
                    acc = missing
                if acc is missing:
                    new_pane(key, window, value)
                else:
                    pane[key] = reduce(acc, value)
        elif kind == AGGREGATING:
            add = self._add
            for key, value in pairs:
                try:
                    acc = pane[key]
                except KeyError:
                    acc = missing
                if acc is missing:
                    new_pane(key, window, value)
                else:
                    pane[key] = add(value, acc)
        else:
            for key, value in pairs:
                try:
                    acc = pane[key]
                except KeyError:
                    acc = missing
                if acc is missing:
                    new_pane(key, window, value)
                else:
                    acc.append(value)

    def _rolling_reduce(self, values: List[Any], window: TimeWindow) -> bool:
        """A reduce's elements of ``window`` through the keyed reduce's rolling loop (compiled when
        built) into the heap's live pane, reading the window's panes in a checkpoint's older
        layers (newest first: reduced values are replaced, never changed in place); False, with
        nothing done, where a pane is not a dict (RocksDB: the loops below)."""
        table = self._table
        live = table.live_pane(window)
        lower = tuple(p for p in (layer.get(window) for layer in table.lower) if p is not None) if table.lower else ()
        if type(live) is not dict or not all(type(p) is dict for p in lower):
            return False
        if type(values) is not list:
            values = list(values)
        reduce_batch(
            values, self._key_of, live, self._reduce, partial(self._first_reduced, window), lower, REMOVED, emit=False
        )
        return True

    def _process_in_window_layered(self, values: List[Any], window: TimeWindow) -> None:
        """:meth:`_process_in_window` while a checkpoint's layers lie below the live one: a key
        the live pane misses is looked up below (:meth:`_older_contents`)."""
        table = self._table
        pane = table.live.get(window)
        older = self._older_contents
        new_pane = self._new_pane
        key_of = self._key_of
        kind = self.contents_kind
        reduce, add = self._reduce, getattr(self, "_add", None)
        missing = _MISSING
        for value in values:
            key = key_of(value)
            acc = missing if pane is None else pane.get(key, missing)
            if acc is missing:
                acc, pane = older(key, window)
                if acc is missing:
                    pane = new_pane(key, window, value)
                    continue
            if kind == REDUCING:
                pane[key] = reduce(acc, value)
            elif kind == AGGREGATING:
                pane[key] = add(value, acc)
            else:
                acc.append(value)

    def _older_contents(self, key: Any, window: Any) -> tuple:
        """``(contents or _MISSING, the window's live pane)`` for a key the live pane misses:
        contents changed in place are copied into the live pane first (copy-on-write)."""
        table = self._table
        acc = table.ns_lookup(window, key, _MISSING, True)
        return acc, table.live_pane(window)

    def _process_sliding(self, values: List[Any], timestamps: Any) -> None:
        key_of = self._key_of
        table = self._table
        contents = table.live
        older = self._older_contents if table.lower else None
        size = self.assigner.size
        slide = self.assigner.slide
        offset = self.assigner.offset
        due = self.timer_service.current_watermark - size + 1
        reducing = self.contents_kind == REDUCING
        aggregating = self.contents_kind == AGGREGATING
        reduce, add = self._reduce, getattr(self, "_add", None)
        new_pane = self._new_pane
        missing = _MISSING
        panes: dict = {}  # start -> (window, pane) of this batch
        for value, ts in zip(values, timestamps):
            last_start = ts - (ts - offset) % slide
            first_start = last_start - ((last_start - ts + size - 1) // slide) * slide
            if first_start <= due:
                self._general(value, ts)
                panes.clear()  # the general path may have created or dropped panes
                continue
            key = key_of(value)
            for start in range(last_start, first_start - 1, -slide):
                found = panes.get(start)
                if found is None:
                    window = self._window(start)
                    found = panes[start] = (window, contents.get(window))
                window, pane = found
                acc = missing if pane is None else pane.get(key, missing)
                if acc is missing:
                    if older is not None:
                        acc, pane = older(key, window)
                        panes[start] = (window, pane)
                    if acc is missing:
                        panes[start] = (window, new_pane(key, window, value))
                        continue
                if reducing:
                    pane[key] = reduce(acc, value)
                elif aggregating:
                    pane[key] = add(value, acc)
                else:
                    acc.append(value)

    def _prune_window_cache(self, watermark: int) -> None:
        cache = self._window_cache
        if len(cache) > 4096:
            horizon = watermark - self.allowed_lateness
            self._window_cache = {s: w for s, w in cache.items() if w[1] > horizon}

    # -- timers ------------------------------------------------------------------------------------
    def process_watermark(self, timestamp: int) -> None:
        self.current_watermark = timestamp
        self.timer_service.advance_watermark(timestamp)
        self._flush_pending()
        if self._fast:
            self._prune_window_cache(timestamp)
        self.output.emit_watermark(timestamp)  # type: ignore[union-attr]

    def on_event_time(self, timestamp: int, key: Any, window: Any) -> None:
        if self._fast:
            self._on_event_time_fast(timestamp, key, window)
        else:
            self._on_timer(timestamp, key, window, True)

    def on_processing_time(self, timestamp: int, key: Any, window: Any) -> None:
        self._on_timer(timestamp, key, window, False)
        self._flush_pending()

    def _on_event_time_fast(self, timestamp: int, key: Any, window: Any) -> None:
        table = self._table
        live = table.live
        if self._fire_plain and not table.lower and type(live) is dict and timestamp == window[1] - 1:
            # what the general steps below do for this window, in a heap table's only layer
            pane = live.get(window)
            contents = None if pane is None else pane.get(key)
            if contents is None or contents is _MISSING:  # (no tombstone without a layer below)
                return
            del pane[key]
            if not pane:
                del live[window]
            if timestamp != self._pending_ts:
                self._flush_pending()
                self._pending_ts = timestamp
            self._pending.append(contents)
            return
        contents = self._get_contents(key, window)
        if contents is None:
            return
        max_ts = window[1] - 1
        if timestamp == max_ts:
            self._emit_window(key, window, contents, window)
        if timestamp == min(max_ts + self.allowed_lateness, MAX_LONG_VALUE):
            self._table.ns_remove(window, key)
            if self._fn_clear is not None:
                self._clear_function(window)

    def _clear_function(self, window: Any) -> None:
        ctx = self._window_ctx
        ctx._window = window
        self._fn_clear(ctx)

    def _on_timer(self, timestamp: int, key: Any, window: Any, event_time: bool) -> None:
        """Flink's ``onEventTime`` / ``onProcessingTime``."""
        ctx = self._trigger_ctx
        ctx.key = key
        ctx.window = window
        merging = None
        namespace = window
        if self.merging:
            merging = self._merging_window_set(key)
            namespace = merging.get_state_window(window)
            if namespace is None:
                return  # a timer of an already purged window: nothing to do
        if event_time:
            result = self.trigger.on_event_time(timestamp, window, ctx)
        else:
            result = self.trigger.on_processing_time(timestamp, window, ctx)
        if result.value[0]:
            contents = self._get_contents(key, namespace)
            if contents is not None:
                self._emit_window(key, window, contents, namespace)
        if result.value[1]:
            self._clear_contents(key, namespace)
        if self.is_event_time == event_time and timestamp == self._cleanup_time(window):
            self._clear_all_state(key, window, namespace, merging)
        if merging is not None:
            self._persist(key, merging)

    def _clear_all_state(self, key: Any, window: Any, namespace: Any, merging: Optional[MergingWindowSet]) -> None:
        self._clear_contents(key, namespace)
        ctx = self._trigger_ctx
        ctx.window = window
        self.trigger.clear(window, ctx)
        if self._fn_clear is not None:
            self._clear_function(window)
        if merging is not None:
            merging.retire_window(window)


class EvictingWindowOperator(WindowOperator):
    """Flink's ``EvictingWindowOperator``: keeps every element (with its timestamp) and
    lets the evictor remove some before / after the window function."""

    def __init__(self, descriptor: Any, key_selector: Any, name: str = "", operator_id: str = "") -> None:
        if descriptor.evictor is None:
            raise ValueError("EvictingWindowOperator needs an evictor")
        super().__init__(descriptor, key_selector, name, operator_id)


def create_window_operator(descriptor: Any, key_selector: Any) -> WindowOperator:
    """The window operator for ``descriptor`` (evicting when it has an evictor)."""
    if descriptor.evictor is not None:
        return EvictingWindowOperator(descriptor, key_selector)
    return WindowOperator(descriptor, key_selector)


__all__ = [
    "WindowOperator",
    "EvictingWindowOperator",
    "MergingWindowSet",
    "create_window_operator",
    "CONTENTS_STATE",
    "MERGING_SET_STATE",
    "LATE_RECORDS_DROPPED",
]
