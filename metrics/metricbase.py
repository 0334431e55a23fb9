"""User-defined metrics: PyFlink's ``pyflink.metrics.metricbase`` (Flink's ``MetricGroup``,
``SimpleCounter``, ``Gauge``, ``MeterView`` and PyFlink's ``Distribution``).

A :class:`MetricGroup` is a named container of metrics and of further groups; every
operator has one (``RuntimeContext.get_metrics_group()``, Flink's ``OperatorMetricGroup``)
and a user function registers its metrics there, usually in ``open``:

* ``counter(name)`` → :class:`Counter` (``inc(n=1)``, ``dec(n=1)``, ``get_count()``);
* ``gauge(name, obj)``: ``obj()`` is read whenever the metrics are reported;
* ``meter(name, time_span_in_seconds=60)`` → :class:`Meter` (``mark_event(n=1)``,
  ``get_count()``, ``get_rate()``: events per second over the last time span, Flink's ``MeterView``);
* ``distribution(name)`` → :class:`Distribution` (``update(value)``: count, sum, min, max, mean);
* ``add_group(name)`` a nested group; ``add_group(key, value)`` a key group holding a value
  group (Flink's key/value groups: the value becomes the ``key`` variable, a Prometheus label).

Asking again for a metric of the same name and kind returns the registered one (as PyFlink's
Beam-backed metrics do); a name already used by another kind of metric raises ``ValueError``.

:meth:`MetricGroup.report` reads every metric of the group and its subgroups into
``{"group.sub.metric": value}`` — the names Flink's REST API shows below an operator.

Thread-safety: metrics are updated by their task's thread; the TaskExecutor reads them from
other threads (reads of Python numbers are atomic; a gauge's callable runs on the reading
thread, as under Flink's reporters). Registering happens on the task thread.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Any, Callable, Dict, Optional, Tuple


class MetricGroupType(Enum):
    """What a group is: a plain group, the key or the value of a key/value pair."""

    generic = 0
    key = 1
    value = 2


class Metric:
    """Base of every metric."""

    __slots__ = ()

    def value(self) -> Any:
        """What the metric reports right now."""
        raise NotImplementedError


class Counter(Metric):
    """A count that goes up and down (Flink's ``SimpleCounter``)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        self.count += n

    def dec(self, n: int = 1) -> None:
        self.count -= n

    def get_count(self) -> int:
        return self.count

    def value(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"Counter({self.count})"


class Gauge(Metric):
    """A value read from a callable when the metrics are reported (Flink's ``Gauge``)."""

    __slots__ = ("supplier",)

    def __init__(self, supplier: Callable[[], Any]) -> None:
        if not callable(supplier):
            raise TypeError(f"a gauge needs a callable returning its value, got {supplier!r}")
        self.supplier = supplier

    def get_value(self) -> Any:
        return self.supplier()

    __call__ = get_value

    def value(self) -> Any:
        value = self.supplier()
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        return str(value)  # Flink's REST API shows a gauge's value as text, too


class Meter(Metric):
    """Events and their rate per second over the last ``time_span_in_seconds`` (Flink's
    ``MeterView``). The rate is measured when it is read: the events since the latest earlier
    reading at least one time span before, per second since then; while the meter is younger
    than its time span, the events so far per time span (as Flink's, whose window starts empty)."""

    __slots__ = ("count", "time_span_ns", "_history")

    def __init__(self, time_span_in_seconds: int = 60) -> None:
        if time_span_in_seconds <= 0:
            raise ValueError(f"a meter's time span must be positive, got {time_span_in_seconds} s")
        self.count = 0
        self.time_span_ns = int(time_span_in_seconds * 1e9)
        self._history = [(time.monotonic_ns(), 0)]  # (when, count) of earlier readings

    def mark_event(self, value: int = 1) -> None:
        self.count += value

    def get_count(self) -> int:
        return self.count

    def get_rate(self) -> float:
        now, count = time.monotonic_ns(), self.count
        history = self._history
        cutoff = now - self.time_span_ns
        base = None
        keep = 0
        for index, sample in enumerate(history):  # the newest reading a whole span ago, if any
            if sample[0] <= cutoff:
                base, keep = sample, index
        del history[:keep]
        if now - history[-1][0] >= 1_000_000_000:
            history.append((now, count))  # at most one reading per second is remembered
        if base is None:
            return count * 1e9 / self.time_span_ns
        return (count - base[1]) * 1e9 / (now - base[0])

    def value(self) -> Dict[str, Any]:
        return {"count": self.count, "rate": self.get_rate()}

    def __repr__(self) -> str:
        return f"Meter(count={self.count})"


class Distribution(Metric):
    """Count, sum, minimum, maximum and mean of the values given to ``update`` (PyFlink's
    ``Distribution``; Flink reports it as a gauge of these figures)."""

    __slots__ = ("count", "sum", "min", "max")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0
        self.min: Any = None
        self.max: Any = None

    def update(self, value: Any) -> None:
        self.count += 1
        self.sum += value
        if self.min is None or value < self.min:
            self.min = value
        if self.max is None or value > self.max:
            self.max = value

    def get_count(self) -> int:
        return self.count

    def get_sum(self) -> Any:
        return self.sum

    def get_min(self) -> Any:
        return self.min

    def get_max(self) -> Any:
        return self.max

    def get_mean(self) -> float:
        return self.sum / self.count if self.count else 0.0

    def value(self) -> Dict[str, Any]:
        return {"count": self.count, "sum": self.sum, "min": self.min, "max": self.max, "mean": self.get_mean()}

    def __repr__(self) -> str:
        return f"Distribution(count={self.count}, sum={self.sum}, min={self.min}, max={self.max})"


#: where :meth:`MetricGroup.report` puts a metric of a key/value group: its name without the
#: values (Flink's logical scope) and the variables the values define
Scope = Tuple[str, Dict[str, str]]


class MetricGroup:
    """A named container of metrics and subgroups (PyFlink's ``MetricGroup``)."""

    def __init__(
        self,
        name: str = "",
        parent: Optional["MetricGroup"] = None,
        group_type: MetricGroupType = MetricGroupType.generic,
    ) -> None:
        self.name = name
        self._parent = parent
        self._group_type = group_type
        self._metrics: Dict[str, Metric] = {}
        self._groups: Dict[Tuple[str, MetricGroupType], "MetricGroup"] = {}

    # -- registering --------------------------------------------------------------------------
    def add_group(self, name: str, extra: Optional[str] = None) -> "MetricGroup":
        """A subgroup ``name`` (the same one when asked again). With ``extra``: the key group
        ``name`` holding the value group ``extra``, which is returned; its metrics carry the
        variable ``name`` = ``extra``."""
        if extra is None:
            return self._add_group(str(name), MetricGroupType.generic)
        return self._add_group(str(name), MetricGroupType.key)._add_group(str(extra), MetricGroupType.value)

    def _add_group(self, name: str, group_type: MetricGroupType) -> "MetricGroup":
        group = self._groups.get((name, group_type))
        if group is None:
            group = self._groups[(name, group_type)] = MetricGroup(name, self, group_type)
        return group

    def _register(self, name: str, kind: type, create: Callable[[], Metric]) -> Any:
        existing = self._metrics.get(name)
        if existing is not None:
            if type(existing) is not kind:
                raise ValueError(
                    f"metric {self._scoped(name)!r} is already a {type(existing).__name__}; "
                    f"it cannot also be a {kind.__name__} (give the {kind.__name__.lower()} another name)"
                )
            return existing
        metric = self._metrics[name] = create()
        return metric

    def counter(self, name: str) -> Counter:
        return self._register(name, Counter, Counter)

    def gauge(self, name: str, obj: Callable[[], Any]) -> None:
        """Register ``obj`` (a callable) as gauge ``name``; a gauge registered again under the
        same name reads the new callable."""
        existing = self._metrics.get(name)
        if existing is not None and type(existing) is not Gauge:
            self._register(name, Gauge, lambda: Gauge(obj))  # raises, naming both kinds
        self._metrics[name] = Gauge(obj)

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter:
        return self._register(name, Meter, lambda: Meter(time_span_in_seconds))

    def distribution(self, name: str) -> Distribution:
        return self._register(name, Distribution, Distribution)

    # -- scope ----------------------------------------------------------------------------------
    def get_scope_components(self) -> list:
        """The names of the user groups from the operator's group down to this one."""
        if self._parent is None:
            return []
        return self._parent.get_scope_components() + [self.name]

    def get_all_variables(self) -> Dict[str, str]:
        """``{key: value}`` of the key/value groups from the operator's group down to this one."""
        variables = {} if self._parent is None else self._parent.get_all_variables()
        if self._group_type is MetricGroupType.value and self._parent is not None:
            variables[self._parent.name] = self.name
        return variables

    def get_metric_identifier(self, metric_name: str) -> str:
        """The metric's name below its operator: the group names and ``metric_name`` joined by dots."""
        return self._scoped(metric_name)

    def _scoped(self, name: str) -> str:
        return ".".join(self.get_scope_components() + [name])

    # -- reading ---------------------------------------------------------------------------------
    @property
    def counters(self) -> Dict[str, Counter]:
        return {n: m for n, m in self._metrics.items() if type(m) is Counter}

    @property
    def gauges(self) -> Dict[str, Gauge]:
        """The gauges of this group (each callable: calling one reads its value)."""
        return {n: m for n, m in self._metrics.items() if type(m) is Gauge}

    @property
    def groups(self) -> Dict[str, "MetricGroup"]:
        return {name: group for (name, _type), group in self._groups.items()}

    def report(
        self, values: Optional[Dict[str, Any]] = None, scopes: Optional[Dict[str, Scope]] = None
    ) -> Dict[str, Any]:
        """Read every metric of this group and its subgroups into ``values``
        (``{"group.sub.metric": value}``; a counter's count, a gauge's value, a meter's
        ``{"count", "rate"}``, a distribution's ``{"count", "sum", "min", "max", "mean"}``).
        Metrics below a key/value group also go into ``scopes`` as ``(logical name, variables)``:
        the name without the values, and ``{key: value}``. A gauge that raises is left out."""
        out: Dict[str, Any] = {} if values is None else values
        self._report((), (), {}, out, scopes)
        return out

    def _report(
        self,
        path: tuple,
        logical: tuple,
        variables: Dict[str, str],
        out: Dict[str, Any],
        scopes: Optional[Dict[str, Scope]],
    ) -> None:
        for name, metric in list(self._metrics.items()):
            try:
                value = metric.value()
            except Exception:  # noqa: BLE001 - a failing gauge is not reported (as in Flink)
                continue
            dotted = ".".join(path + (name,))
            out[dotted] = value
            if variables and scopes is not None:
                scopes[dotted] = (".".join(logical + (name,)), dict(variables))
        for (name, group_type), group in list(self._groups.items()):
            if group_type is MetricGroupType.value:
                group._report(path + (name,), logical, {**variables, self.name: name}, out, scopes)
            else:
                group._report(path + (name,), logical + (name,), variables, out, scopes)

    def __repr__(self) -> str:
        return f"MetricGroup({self.name!r}, metrics={sorted(self._metrics)}, groups={sorted(self.groups)})"


__all__ = ["MetricGroup", "MetricGroupType", "Metric", "Counter", "Gauge", "Meter", "Distribution"]
