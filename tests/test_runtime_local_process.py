"""The local target's process settings while a job runs (``LocalProcessTuning``): a TaskExecutor's
young-generation threshold and switch interval, task threads on one CPU, and the program's own
settings back once the last local job has ended."""

from __future__ import annotations

import gc
import os
import sys
import threading

import pytest

from raylink.api import Configuration, StreamExecutionEnvironment

pytestmark = pytest.mark.timeout(60)

CAN_PIN = hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2
#: set by the test to let the long job of the two-jobs test end
release_long_job = threading.Event()


def observe(_value):
    """What a task thread sees of its process: threshold, switch interval, its CPUs."""
    cpus = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    return (gc.get_threshold()[0], sys.getswitchinterval(), cpus)


def wait_for_release(value):
    if not release_long_job.wait(30):
        raise TimeoutError("the test never released the long job")
    return value


def local_env(**options) -> StreamExecutionEnvironment:
    conf = Configuration().set_string("execution.target", "local")
    for key, value in options.items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    return env


def observed(stream) -> set:
    """What the map subtasks saw, once the job has ended (its resources released)."""
    with stream.map(observe).execute_and_collect() as results:
        seen = set(results)
        assert results.job_execution_result is not None
    return seen


def program_settings():
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return gc.get_threshold(), sys.getswitchinterval(), cpus


def test_task_threads_run_with_a_task_executor_s_settings_on_one_cpu_and_the_program_s_come_back():
    before = program_settings()
    seen = observed(local_env().from_collection(list(range(8))).rebalance())
    assert {(threshold, interval) for threshold, interval, _ in seen} == {(50_000, 0.001)}
    if CAN_PIN:  # both map subtasks (two threads) on the same single CPU
        assert len({cpus for _, _, cpus in seen}) == 1 and len(next(iter(seen))[2]) == 1
    assert program_settings() == before


@pytest.mark.skipif(not CAN_PIN, reason="threads can be pinned on Linux with 2+ CPUs only")
def test_pinning_can_be_turned_off_and_settings_follow_the_options():
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    env = local_env(
        **{
            "raylink.local.pin-task-threads": "false",
            "raylink.taskmanager.gc-threshold": "20000",
            "raylink.taskmanager.switch-interval": "2 ms",
        }
    )
    seen = observed(env.from_collection(list(range(8))).rebalance())
    assert seen == {(20_000, 0.002, allowed)}


def test_the_program_s_settings_come_back_only_when_the_last_of_two_running_jobs_ends():
    before = program_settings()
    release_long_job.clear()
    env = local_env()
    env.from_collection([1, 2]).map(wait_for_release).add_sink(lambda _: None)
    long_job = env.execute_async("long")
    try:
        seen = observed(local_env().from_collection([1, 2, 3]))
        assert {(t, i) for t, i, _ in seen} == {(50_000, 0.001)}
        assert (gc.get_threshold()[0], sys.getswitchinterval()) == (50_000, 0.001)  # the long job still runs
    finally:
        release_long_job.set()
    assert long_job.get_job_execution_result(30) is not None
    assert program_settings() == before


def test_the_node_registry_spreads_pinned_processes_over_the_cpus_and_forgets_ended_ones(tmp_path):
    import subprocess

    from raylink.runtime.process_tuning import NodeCpuRegistry

    if not CAN_PIN:
        assert NodeCpuRegistry(str(tmp_path / "claims.json")).claim() is None
        return
    allowed = sorted(os.sched_getaffinity(0))
    registry = NodeCpuRegistry(str(tmp_path / "claims.json"))
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = int(ended.stdout)
    live = [os.getpid(), os.getppid()]  # two processes that outlive the test
    assert registry.claim(gone) == frozenset(allowed[:1])
    assert registry.claim(live[0]) == frozenset(allowed[:1])  # the ended process's claim is dropped
    assert registry.claim(live[1]) == frozenset(allowed[1:2])  # the least used CPU
    registry.release(live[0])
    assert registry.claim(live[0]) == frozenset(allowed[:1])  # free again
    assert registry.claim(live[0]) == frozenset(allowed[:1])  # claiming again replaces its own claim
