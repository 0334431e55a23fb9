"""A program's next job runs on its previous job's TaskExecutors (Flink's
``resourcemanager.taskmanager-timeout``, :mod:`raylink.actors.warm_executors`): the same
processes, nothing of the previous job left in them, results exact; a job needing fewer
executors runs on part of the set and gives it back whole; a job asking for other
resources, the timeout, a failed job and a timeout of 0 each release them; ``raylink debug
memory`` finds a job on reused executors by its own id."""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from raylink.actors.ray_actors import find_task_executors
from raylink.actors.warm_executors import WARM_EXECUTORS
from raylink.api import Encoder, FileSink
from raylink.bench.failover import committed_lines
from raylink.tests.runtime_jobs import make_env

pytestmark = pytest.mark.timeout(180)

KEYS = 5


def count(a, b):
    return (a[0], a[1] + b[1])


def expected_rolling_counts(n: int) -> Counter:
    """The lines a fresh job's rolling count per key writes for 0..n-1: brute force."""
    out, totals = Counter(), Counter()
    for v in range(n):
        totals[v % KEYS] += 1
        out[f"{v % KEYS},{totals[v % KEYS]}"] += 1
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:  # a zombie waiting for its parent counts as gone
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:  # it exited meanwhile
        return False


def wait_gone(pids: set, timeout: float = 30.0) -> set:
    """The pids still alive after waiting up to ``timeout`` for them to exit."""
    deadline = time.monotonic() + timeout
    left = {p for p in pids if alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the processes' exit with a deadline
        left = {p for p in left if alive(p)}
    return left


def run_job(n: int, folder=None, parallelism: int = 2, config=None):
    """Runs a keyed rolling count over 0..n-1 to its end (into ``folder`` when given); (its
    committed lines, its TaskExecutor pids, whether it reused executors)."""
    env = make_env("ray", parallelism, config)
    counts = env.from_collection(list(range(n))).map(lambda v: (v % KEYS, 1)).key_by(lambda kv: kv[0]).reduce(count)
    if folder is None:
        counts.add_sink(lambda v: None)
    else:
        counts.map(lambda kv: f"{kv[0]},{kv[1]}").sink_to(
            FileSink.for_row_format(str(folder), Encoder.simple_string_encoder()).build()
        )
    client = env.execute_async("warm executors")
    pids = {loc["pid"] for loc in client.locations.values()}
    reused = client.reused_executors
    client.get_job_execution_result(120)
    return (committed_lines(str(folder)) if folder is not None else None), pids, reused


def test_the_next_job_of_the_same_shape_runs_on_the_same_processes_with_nothing_left_of_the_first(
    ray_session, tmp_path
):
    first, first_pids, _ = run_job(3_000, tmp_path / "first")
    assert first == expected_rolling_counts(3_000)
    reused_before = WARM_EXECUTORS.reused
    second, second_pids, reused = run_job(5_000, tmp_path / "second")
    assert reused and WARM_EXECUTORS.reused == reused_before + 1, "the second job started executors of its own"
    assert second_pids == first_pids  # the same TaskExecutor processes
    # keyed state starts empty on the reused executors: the counts start from 1 again
    assert second == expected_rolling_counts(5_000)


def test_a_job_needing_fewer_executors_runs_on_part_of_the_set_and_gives_it_back_whole(ray_session, tmp_path):
    _, first_pids, _ = run_job(1_000, parallelism=2)  # a source and a keyed subtask in each of two
    env = make_env("ray", 1)  # one chain, one TaskExecutor
    env.from_sequence(1, 2_000).map(lambda v: v * 3).sink_to(
        FileSink.for_row_format(str(tmp_path / "lower"), Encoder.simple_string_encoder()).build()
    )
    client = env.execute_async("fewer executors")
    lower_pids = {loc["pid"] for loc in client.locations.values()}
    assert client.reused_executors and lower_pids < first_pids, (lower_pids, first_pids)
    client.get_job_execution_result(120)
    assert committed_lines(str(tmp_path / "lower")) == Counter(str(v * 3) for v in range(1, 2_001))
    again, again_pids, again_reused = run_job(3_000, tmp_path / "again", parallelism=2)
    assert again_reused and again_pids == first_pids, "the idle executor was not kept for the next job"
    assert again == expected_rolling_counts(3_000)


def test_debug_memory_finds_a_job_on_reused_executors_by_its_own_id(ray_session):
    run_job(1_000)
    env = make_env("ray", 2)
    env.from_sequence(1, 10**9).map(lambda v: (v % KEYS, 1)).key_by(lambda kv: kv[0]).reduce(count).add_sink(
        lambda v: None
    )
    client = env.execute_async("warm executors, running")
    try:
        assert client.reused_executors
        found = find_task_executors(client.get_job_id()[:10])
        assert sorted(found) == sorted(client.handles), (sorted(found), sorted(client.handles))
    finally:
        client.cancel()
        client.wait(60)


def test_a_job_asking_for_other_resources_releases_the_warm_executors_first(ray_session):
    _, pids, _ = run_job(1_000, parallelism=2)
    _, other, reused = run_job(1_000, parallelism=1, config={"taskmanager.cpu.cores": 0.05})
    assert not reused
    assert not (other & pids)
    assert wait_gone(pids) == set(), "the first job's executors outlived a job that could not use them"


def test_idle_executors_end_after_the_timeout(ray_session):
    _, pids, _ = run_job(1_000, config={"resourcemanager.taskmanager-timeout": "500 ms"})
    assert wait_gone(pids) == set()
    assert WARM_EXECUTORS.idle() == 0


def test_a_timeout_of_zero_and_a_failed_job_keep_nothing(ray_session):
    WARM_EXECUTORS.release()
    _, pids, _ = run_job(1_000, config={"resourcemanager.taskmanager-timeout": "0"})
    assert WARM_EXECUTORS.idle() == 0
    assert wait_gone(pids) == set()

    def boom(v):
        raise ValueError("bad record")

    env = make_env("ray", 2, {"restart-strategy.type": "none"})
    env.from_collection([1, 2, 3]).map(boom).add_sink(lambda v: None)
    client = env.execute_async("warm executors, failing")
    pids = {loc["pid"] for loc in client.locations.values()}
    with pytest.raises(Exception, match="bad record"):
        client.get_job_execution_result(120)
    assert WARM_EXECUTORS.idle() == 0
    assert wait_gone(pids) == set()
