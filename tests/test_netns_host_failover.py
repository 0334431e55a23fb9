"""Hosts that really fail: a three-host Ray cluster of Linux network namespaces (head and
driver on host 1, one TaskExecutor on each of hosts 2 and 3; ``raylink.bench.netns_cluster``),
a checkpointed keyed count into the exactly-once FileSink on a folder every host sees. A worker
host is lost after a checkpoint, by SIGKILL of every process of it, or by cutting its link for
longer than Ray's health checks take to declare it dead and bringing it back while the job runs
on. Either way the job fails over onto the host left and its committed output equals the
rolling counts computed here by brute force: the cut host's zombie tasks, once reachable again,
wrote nothing that was committed. The head keeps the cluster's tables on a redis-server (Ray's
GCS fault tolerance): every process of the head's host is killed and the head restarted while
the job runs (its driver on a worker host); the job goes on without a restart and ends exact.
Needs root, iproute2 and redis-server (as CI has: scripts/redis.sh). The cluster is made once
for the module and removed at its end, also after a failure.
"""

from __future__ import annotations

import shutil

import pytest

from raylink.bench.host_failover import HEAD_RECORDS, run_driver
from raylink.bench.netns_cluster import NetnsCluster, netns_supported

pytestmark = [pytest.mark.multinode, pytest.mark.netns, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster():
    reason = netns_supported()
    assert reason is None, f"the network-namespace cluster {reason}"
    assert shutil.which("redis-server"), "the head's GCS fault tolerance needs redis-server: bash scripts/redis.sh"
    with NetnsCluster(gcs_redis=True) as made:
        yield made


@pytest.fixture
def hosts(cluster):
    """The module's cluster with a live node on every host (a host an earlier test lost is
    revived, or the cluster made anew when it will not come back)."""
    cluster.restore()
    return cluster


def _assert_failed_over(cluster, report: dict) -> None:
    workers = set(cluster.ips[1:])
    assert set(report["hosts_used"]) == workers, report  # spread over both worker hosts
    assert report["victim"] in workers, report
    assert report["hosts_after"] == sorted(workers - {report["victim"]}), report  # onto the host left
    assert report["finished"] and report["status"] == "FINISHED", report
    assert report["restarts"] >= 1, report
    assert report["first_record_s"] is not None, report
    assert (report["lost"], report["duplicated"]) == (0, 0) and report["exact"], report


def test_a_killed_worker_host_fails_over_to_the_host_left_exactly_once(hosts, tmp_path):
    report = run_driver(hosts, "kill", str(tmp_path))
    _assert_failed_over(hosts, report)


def test_a_worker_host_cut_off_and_back_writes_nothing_into_committed_output(hosts, tmp_path):
    report = run_driver(hosts, "cut", str(tmp_path), cut_s=12.0)
    _assert_failed_over(hosts, report)
    assert report["restored_link_s"] > report["detected_s"], report  # back after it was declared dead


def test_a_head_restarted_with_gcs_fault_tolerance_loses_nothing_and_restarts_nothing(hosts, tmp_path):
    report = run_driver(hosts, "head", str(tmp_path), records=HEAD_RECORDS)
    assert report["victim"] == hosts.ips[0], report
    assert report["running_when_back"], report  # the head came back while the job ran
    assert report["finished"] and report["status"] == "FINISHED", report
    assert report["restarts"] == 0, report  # its TaskExecutors never stopped
    assert report["hosts_after"] == report["hosts_used"] == sorted(hosts.ips[1:]), report
    assert (report["lost"], report["duplicated"]) == (0, 0) and report["exact"], report
    lost, back = report["head_lines"]  # one line when the head went silent, one when it came back
    assert "has not answered" in lost and f"{tmp_path}/checkpoints/" in lost and "/chk-" in lost, lost
    assert "answers again" in back, back
