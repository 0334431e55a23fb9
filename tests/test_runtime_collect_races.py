"""``execute_and_collect`` when a session cluster's executors move on to the next job.

A session gives a job's executors back (reset) before the job's end is published, so a
reader can find its sink's buffer gone without having seen it close, and a late take can
reach an executor that already runs another job's sinks. Neither may hang the reader or
hand it another job's records.
"""

from __future__ import annotations

import pytest

from raylink.operators.collect import CollectBuffer
from raylink.runtime.task.task_executor import TaskExecutor
from raylink.tests.runtime_jobs import make_env


@pytest.mark.timeout(60)
def test_a_take_only_returns_the_asking_jobs_sinks():
    te = TaskExecutor("te-races")
    cond = te._collect_cond
    mine, other = CollectBuffer(cond), CollectBuffer(cond)
    mine.add(["m1", "m2"])
    other.add(["o1"])
    te._collect_buffers.update({"attempt-mine": {"c": mine}, "attempt-other": {"c": other}})
    assert te.take_collected(0.05, ["attempt-mine"]) == [("attempt-mine", "c", ["m1", "m2"], False)]
    assert len(other) == 1, "the other job's record was taken"
    assert te.take_collected(0.05, ["attempt-gone"]) == []  # none of its sinks here: nothing
    assert te.take_collected(0.05) == [("attempt-other", "c", ["o1"], False)]


@pytest.mark.timeout(60)
def test_a_reader_whose_sink_was_reset_before_it_saw_the_close_gets_every_record_and_ends():
    env = make_env("local", 2)
    results = env.from_collection(list(range(1000))).map(lambda x: x * 3).execute_and_collect()
    client = results.job_client
    assert client.wait(30), "the job did not finish"
    # what a session's reset does to a released executor: its sinks' buffers are gone (their
    # last records went with the tasks' final reports)
    client.task_executor._collect_buffers.clear()
    assert sorted(results) == [3 * i for i in range(1000)]
