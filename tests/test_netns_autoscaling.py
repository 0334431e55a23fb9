"""The autoscaler with Ray's autoscaler (issue 47): a Ray head in a network namespace runs Ray's
autoscaler with its fake multi-node provider -- what ``ray.cluster_utils.AutoscalingCluster``
starts, which cannot be used itself here: Ray 2.60's wheel lacks the ``fake_multi_node/example.yaml``
it reads, and its ``start()``/``shutdown()`` run ``ray stop --force``, which would end every Ray
on the machine (the test session's too). The head has no CPUs; Ray may add two nodes of 2 CPUs
and removes idle ones after 6 s.

A keyed count into the exactly-once FileSink (``bench/autoscale.py``: one CPU per TaskExecutor)
gets a rate that steps up 5x and back down, with ``job.autoscaler.enabled``: the job scales out,
Ray adds the node its new TaskExecutors need, the backlog (records due by the schedule minus records
committed, counted in the sink's files) drains once the new parallelism runs, and after the rate
dropped the job scales in (its TaskExecutors packed on one node) and Ray removes the node left
idle. The committed output equals the rolling counts computed here, with the same job id and no
restart. Needs root and iproute2, as CI has; the cluster's processes are ended by namespace."""

from __future__ import annotations

import pytest

from raylink.bench.autoscale import autoscaling_cluster, run_driver
from raylink.bench.netns_cluster import netns_supported

pytestmark = [pytest.mark.multinode, pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(900)]


def test_the_job_and_the_cluster_scale_out_with_the_rate_and_back_in_exactly_once(tmp_path):
    reason = netns_supported()
    assert reason is None, f"the network-namespace cluster {reason}"
    with autoscaling_cluster() as cluster:
        report = run_driver(cluster, str(tmp_path))
    timeline = "\n".join(str(s) for s in report["timeline"])
    assert report["status"] == "FINISHED" and report["job_id_kept"] and report["restarts"] == 0, report["status"]
    assert (report["lost"], report["duplicated"]) == (0, 0) and report["exact"]
    # out: parallelism 1 -> 4 while the rate is high, on a node Ray added for it
    assert report["peak_parallelism"] == 4, timeline
    assert report["nodes_at_peak"] == report["nodes_before"] + 1, timeline
    # in: after the rate dropped, a lower parallelism, and Ray removed the idle node
    assert report["final_parallelism"] < report["peak_parallelism"], timeline
    assert report["scaled_in_s"] is not None and report["node_removed_s"] is not None, timeline
    # the backlog drained once the peak parallelism ran (how fast, against the catch-up duration, is
    # bench/autoscale.py's figure: a wall-clock time, which CI's load moves)
    assert report["drained_s"] is not None, timeline
    scalings = [e for e in report["events"] if e["reason"] == "ScalingReport"]
    assert all(
        e["message"].startswith("Scaling execution enabled, begin scaling vertices:{ Vertex ID ") for e in scalings
    )
