"""User-defined metrics (PyFlink's ``pyflink.metrics``): ``MetricGroup`` and the metrics it
registers — ``Counter``, ``Meter``, ``Distribution`` (and raylink's ``Gauge``). A function gets
its operator's group from ``runtime_context.get_metrics_group()``; the values appear in the
job's metrics (``JobClient.get_metrics()``, ``JobExecutionResult.task_metrics``, under
``"operators"``) and on the Prometheus endpoint (``metrics.port``). See
:mod:`raylink.metrics.metricbase`."""

from raylink.metrics.metricbase import Counter, Distribution, Gauge, Meter, Metric, MetricGroup, MetricGroupType

__all__ = ["MetricGroup", "Metric", "Counter", "Meter", "Distribution", "Gauge", "MetricGroupType"]
