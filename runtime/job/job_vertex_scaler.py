"""The parallelism a vertex should run at: Flink's ``JobVertexScaler`` with its
``ParallelismAligner`` (BALANCED mode) and ``DelayedScaleDown`` (``org.apache.flink.autoscaler``).

:func:`compute_scale_target_parallelism` for one vertex, from its evaluated metrics
(:mod:`raylink.runtime.job.scaling_metrics`):

1. ``scale factor = target capacity at utilization.target (with the restart's backlog) / true
   processing rate``; no change when either is not a number;
2. clamped to ``[1 - scale-down.max-factor, 1 + scale-up.max-factor]``;
3. ``new = ceil(factor * parallelism)`` within ``[min(current, vertex.min-parallelism),
   min(max parallelism, max(current, vertex.max-parallelism))]``;
4. aligned (:func:`align`) when an input is hash-partitioned: the first parallelism from
   ``new`` up that divides the vertex's max parallelism (its key groups) or gives each subtask
   fewer key groups than ``new`` would; ``new`` itself when none does (Flink's BALANCED mode);
5. a scale-down waits (:class:`DelayedScaleDown`): it is carried out once it has been
   recommended for ``scale-down.interval`` and then takes the highest parallelism recommended
   within that interval; a scale-up or no change clears it.

:func:`outside_utilization_bound` is the per-vertex test whether the job scales at all (Flink's
``JobVertexScaler.outsideUtilizationBound``). :func:`unify_forward` gives vertices tied by a
FORWARD edge the same (highest) parallelism: a forward edge needs equal parallelism at both ends.

Pure functions plus one small stateful class (:class:`DelayedScaleDown`, one per autoscaler,
used from its control-loop thread only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Optional

from raylink.runtime.job.scaling_metrics import (
    SCALE_DOWN_RATE_THRESHOLD,
    SCALE_UP_RATE_THRESHOLD,
    TRUE_PROCESSING_RATE,
    JobTopology,
    Settings,
    VertexInfo,
    target_capacity,
)


def outside_utilization_bound(metrics: Mapping[str, float]) -> bool:
    """The vertex processes slower than its scale-up threshold or faster than its scale-down one."""
    tpr = metrics[TRUE_PROCESSING_RATE]
    return tpr < metrics[SCALE_UP_RATE_THRESHOLD] or tpr > metrics[SCALE_DOWN_RATE_THRESHOLD]


def align(target: int, current: int, upper: int, groups: int) -> int:
    """BALANCED alignment of ``target`` to ``groups`` key groups (Flink's ``ParallelismAligner``)."""
    if groups <= 0 or target == current:
        return target
    bound = min(groups, upper) if target > current else min(current, groups, upper)
    per_subtask = groups // target
    for p in range(target, bound + 1):
        if groups % p == 0 or groups // p < per_subtask:
            return p
    return target


def compute_scale_target_parallelism(
    info: VertexInfo, metrics: Mapping[str, float], settings: Settings, current: Optional[int] = None
) -> int:
    """The parallelism the vertex should run at (steps 1-4 above)."""
    current = info.parallelism if current is None else current
    tpr = metrics[TRUE_PROCESSING_RATE]
    capacity = target_capacity(metrics, settings, settings.target_utilization, with_restart=True)
    if math.isnan(tpr) or math.isnan(capacity):
        return current
    if math.isinf(tpr):  # nothing to process, or never busy: as little as the bounds allow
        factor = 0.0
    else:
        factor = capacity / tpr
    factor = min(max(factor, 1.0 - settings.max_scale_down_factor), 1.0 + settings.max_scale_up_factor)
    lower = min(current, settings.min_parallelism)
    upper = min(info.max_parallelism, max(current, settings.max_parallelism))
    new = min(max(lower, math.ceil(factor * current)), upper)
    if new == current:
        return current
    return align(new, current, upper, info.max_parallelism) if info.hash_input else new


@dataclass
class DelayedScaleDown:
    """Scale-downs waiting for ``scale-down.interval`` (Flink's ``DelayedScaleDown``)."""

    first_trigger: dict[str, float] = field(default_factory=dict)
    recommended: dict[str, list[tuple[float, int]]] = field(default_factory=dict)

    def apply(self, vertex: str, current: int, new: int, now: float, interval_s: float) -> int:
        """The parallelism to use now for a recommendation of ``new`` (``current`` while waiting)."""
        if new >= current:
            self.clear(vertex)
            return new
        if interval_s <= 0:
            return new
        first = self.first_trigger.setdefault(vertex, now)
        window = self.recommended.setdefault(vertex, [])
        window.append((now, new))
        window[:] = [(t, p) for t, p in window if t >= now - interval_s]
        if now - interval_s < first:
            return current
        return max(p for _t, p in window)

    def waiting_since(self, vertex: str) -> Optional[float]:
        return self.first_trigger.get(vertex)

    def clear(self, vertex: Optional[str] = None) -> None:
        if vertex is None:
            self.first_trigger.clear()
            self.recommended.clear()
        else:
            self.first_trigger.pop(vertex, None)
            self.recommended.pop(vertex, None)


def unify_forward(topology: JobTopology, parallelism: dict[str, int]) -> dict[str, int]:
    """``parallelism`` with every FORWARD-connected group of vertices at its highest value."""
    out = dict(parallelism)
    seen: set[str] = set()
    for vid in topology.vertices:
        if vid in seen:
            continue
        group, stack = [], [vid]
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            group.append(v)
            stack.extend(topology.vertices[v].forward)
        if len(group) > 1:
            top = max(out[v] for v in group if v in out)
            for v in group:
                out[v] = min(top, topology.vertices[v].max_parallelism)
    return out


__all__ = [
    "DelayedScaleDown",
    "align",
    "compute_scale_target_parallelism",
    "outside_utilization_bound",
    "unify_forward",
]
