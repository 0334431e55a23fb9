"""The Nexmark generator as a checkpointable, rescalable source (Flink nexmark's
``NexmarkSource``/``NexmarkSourceReader``): ``env.from_source(NexmarkSource(config), ...)``.

Subtask ``i`` of ``p`` emits the event indices ``i, i + p, i + 2p, ...`` below
``config.max_events`` (all subtasks walk one timeline side by side, so their event times stay
close), each event computed from its index (``generator.event_at``). Its state is the
arithmetic progressions ``[next, stride, stop]`` it has left and the wall-clock base of its
rate; restored at another parallelism ``q``, every old progression is dealt out as ``q``
progressions of ``q`` times the stride, one to each new subtask, so the restored job emits
exactly the events the old one had not (as ``from_sequence``'s source does).

Pacing: with ``config.max_emit_speed`` (Nexmark's default) events are emitted as fast as
the job takes them; without, each event is emitted once its wall-clock time
(``wall base + dateTime - base_time``) has come, which is ``events_per_second`` over all
subtasks. A bounded config (``events=N``) ends; an unbounded one runs until cancelled.

Replay (``NexmarkSource(config, replay=path)``): the events are read from ``path``, a pickled
list of ``config``'s events (``write_replay``), instead of computed: the same stream without
the generator's cost (a Python generator takes far longer per event than most queries), for a
benchmark of the queries; ``path`` must be readable where the subtasks run. A process reads a
file once and keeps its events (until it reads another or the file changes).

Everything here is built on ``operators.sources.SourceOperator``; no runtime code knows
about Nexmark (the source reaches the job as a connector source, ``create_operator``).
Thread-safety: one operator per subtask, driven by its task thread.
"""

from __future__ import annotations

import functools
import os
import pickle
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from raylink.bench.nexmark.generator import (
    AUCTION_FIELDS,
    BID_FIELDS,
    EVENT_FIELDS,
    PERSON_FIELDS,
    NexmarkConfig,
    event_at,
)
from raylink.core.row import make_row
from raylink.operators.connector import CONNECTOR_SOURCE
from raylink.operators.sources import DEFAULT_BATCH_SIZE, SourceOperator

#: the longest an unpaced step waits for the next event's wall-clock time (s)
_MAX_WAIT_S = 0.005


class NexmarkSource:
    """Nexmark's events as a parallel source; ``config`` (a ``NexmarkConfig``) or its fields."""

    def __init__(self, config: Optional[NexmarkConfig] = None, replay: Optional[str] = None, **fields: Any) -> None:
        if config is not None and fields:
            raise ValueError("NexmarkSource: pass a NexmarkConfig or its fields, not both")
        self.config = config if config is not None else NexmarkConfig(**fields)
        if replay is not None and self.config.events is None:
            raise ValueError("NexmarkSource: replay needs a bounded config (events=N)")
        self.replay = replay

    def get_boundedness(self) -> str:
        """Flink's ``Boundedness`` name: BOUNDED with ``events=N``, else CONTINUOUS_UNBOUNDED."""
        return "BOUNDED" if self.config.events is not None else "CONTINUOUS_UNBOUNDED"

    def _raylink_source_spec(self) -> tuple:
        """(operator kind, function, parameters, non-parallel) for ``env.from_source``."""
        return CONNECTOR_SOURCE, self, {}, False

    def create_operator(self, _spec: Any) -> "NexmarkSourceOperator":
        return NexmarkSourceOperator(self.config, replay=self.replay)

    def __repr__(self) -> str:
        return (
            f"NexmarkSource({self.config!r})"
            if self.replay is None
            else f"NexmarkSource({self.config!r}, replay={self.replay!r})"
        )


def write_replay(config: NexmarkConfig, path: str, evs: Optional[List[Any]] = None) -> None:
    """Write ``config``'s events (``evs``, or generated here) to ``path`` for ``replay``."""
    if config.events is None:
        raise ValueError("write_replay: needs a bounded config (events=N)")
    evs = evs if evs is not None else [event_at(config, index) for index in range(config.events)]
    if len(evs) != config.events:
        raise ValueError(f"write_replay: {len(evs)} events given for a config of {config.events}")
    # plain values (unpickled far faster than Rows): (kind, the nested row's values, dateTime)
    plain = [(e[0], list(e[1 + e[0]]), e[4]) for e in evs]
    with open(path, "wb") as out:
        pickle.dump(plain, out, protocol=pickle.HIGHEST_PROTOCOL)


_NESTED_FIELDS = (PERSON_FIELDS, AUCTION_FIELDS, BID_FIELDS)


#: path -> ((size, mtime), events): a process reads a replay file once (a benchmark's jobs after
#: its warm-up one find their events loaded, as the loop it sets them against has them in memory)
_REPLAYS: Dict[str, Tuple[Tuple[int, int], List[Any]]] = {}
_REPLAYS_LOCK = threading.Lock()


def _read_replay(config: NexmarkConfig, path: str) -> List[Any]:
    stat = os.stat(path)
    version = (stat.st_size, stat.st_mtime_ns)
    with _REPLAYS_LOCK:
        cached = _REPLAYS.get(path)
        if cached is not None and cached[0] == version and len(cached[1]) == config.max_events:
            return cached[1]
        evs = _load_replay(config, path)
        _REPLAYS.clear()  # one file at a time
        _REPLAYS[path] = (version, evs)
        return evs


def _load_replay(config: NexmarkConfig, path: str) -> List[Any]:
    with open(path, "rb") as data:
        plain = pickle.load(data)
    if not isinstance(plain, list) or len(plain) != config.max_events:
        raise ValueError(
            f"NexmarkSource: replay file {path} does not hold the {config.max_events} events of its config"
        )
    evs = []
    for kind, values, timestamp in plain:
        outer = [kind, None, None, None, timestamp]
        outer[1 + kind] = make_row(_NESTED_FIELDS[kind], values)
        evs.append(make_row(EVENT_FIELDS, outer))
    return evs


def deal_out(progressions: List[List[int]], subtask: int, parallelism: int) -> List[List[int]]:
    """New subtask ``subtask``'s share of ``progressions``: from each ``[next, stride, stop]``,
    the elements at positions ``subtask, subtask + parallelism, ...``."""
    mine = []
    for start, stride, stop in progressions:
        first = start + subtask * stride
        if first < stop:
            mine.append([first, stride * parallelism, stop])
    return mine


class NexmarkSourceOperator(SourceOperator):
    """Emits its share of the Nexmark events (see the module doc)."""

    def __init__(
        self, config: NexmarkConfig, name: str = "", operator_id: str = "", replay: Optional[str] = None
    ) -> None:
        super().__init__(None, name, operator_id)
        self.config = config
        self.replay = replay
        self._event = functools.partial(event_at, config)
        self._progressions: List[List[int]] = []
        self._replayed: Optional[List[Any]] = None  # the events of ``replay``, once open
        self._wall_base: Optional[float] = None  # wall-clock time (s) of event time base_time

    def open(self) -> None:
        rc = self.runtime_context
        stop = self.config.max_events
        index, parallelism = rc.subtask_index, rc.parallelism
        self._progressions = [[index, parallelism, stop]] if index < stop else []
        if self.replay is not None:
            self._replayed = _read_replay(self.config, self.replay)
            self._event = self._replayed.__getitem__

    def emit_next(self, max_records: int = DEFAULT_BATCH_SIZE) -> bool:
        if self.finished or self.cancelled:
            return False
        progressions = self._progressions
        if not progressions:
            self._finish()
            return False
        config = self.config
        bound = None
        if not config.max_emit_speed:  # the newest event time that is due now
            now = time.time()
            if self._wall_base is None:
                self._wall_base = now - (config.timestamp_for_event(progressions[0][0]) - config.base_time) / 1000.0
            bound = config.base_time + int((now - self._wall_base) * 1000.0)
            first = min(p[0] for p in progressions)
            due = config.timestamp_for_event(config.adjusted_event_number(first))
            if due > bound:
                time.sleep(min(_MAX_WAIT_S, (due - bound) / 1000.0))
                return True
        batch = self._take(max_records, bound)
        if batch:
            self.record_context.timestamp = None
            self._collect_batch(batch)
        if not progressions:
            self._finish()
            return False
        return True

    def _take(self, max_records: int, bound: Optional[int]) -> List[Any]:
        """Up to ``max_records`` events in index order (due by ``bound`` when pacing)."""
        config = self.config
        progressions = self._progressions
        event = self._event
        out: List[Any] = []
        if len(progressions) == 1:
            current = progressions[0]
            start, stride, stop = current
            index = start
            end = min(stop, start + stride * max_records)
            if bound is None and self._replayed is not None:  # replayed at full speed: one slice
                out = self._replayed[index:end:stride]
                index += stride * len(out)
            while index < end:
                if bound is not None and config.timestamp_for_event(config.adjusted_event_number(index)) > bound:
                    break
                out.append(event(index))
                index += stride
            current[0] = index
        else:  # restored from a rescale: merge the progressions by index
            while len(out) < max_records and progressions:
                current = min(progressions, key=lambda p: p[0])
                index = current[0]
                if bound is not None and config.timestamp_for_event(config.adjusted_event_number(index)) > bound:
                    break
                out.append(event(index))
                current[0] = index + current[1]
                if current[0] >= current[2]:
                    progressions.remove(current)
        if progressions and progressions[0][0] >= progressions[0][2]:
            del progressions[0]
        return out

    def snapshot_operator_state(self, _checkpoint_id: int) -> dict:
        return {"progressions": [list(p) for p in self._progressions], "wall_base": self._wall_base}

    def restore_operator_state(self, state: dict) -> None:
        self._progressions = [list(p) for p in state["progressions"]]
        self._wall_base = state.get("wall_base")

    def restore_rescaled_operator_state(self, states: List[Optional[dict]], subtask: int, parallelism: int) -> None:
        """Every old subtask's remaining events, dealt out evenly over ``parallelism`` subtasks."""
        remaining = [p for state in states if state is not None for p in state["progressions"]]
        self._progressions = deal_out(remaining, subtask, parallelism)
        bases = [state.get("wall_base") for state in states if state is not None and state.get("wall_base")]
        self._wall_base = min(bases) if bases else None


__all__ = ["NexmarkSource", "NexmarkSourceOperator", "deal_out", "write_replay"]
