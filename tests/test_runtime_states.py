"""Typed job and task states: ``JobStatus`` and ``ExecutionState`` (Flink's names and moves),
the events a TaskExecutor reports (``TaskStateEvent`` & co.), and what a job shows of them
end to end (in-process executor; the Ray executor runs the same JobMaster code and is
covered by the runtime suites)."""

from __future__ import annotations

import json
import pickle

import cloudpickle
import pytest

from raylink.api import JobStatus, RaylinkError
from raylink.api.functions import MapFunction
from raylink.errors import IllegalStateTransitionError
from raylink.runtime.client.job_result import JobExecutionException
from raylink.runtime.execution_state import ExecutionState
from raylink.runtime.task.operator_chain import OperatorError
from raylink.runtime.task.task_events import (
    AcknowledgeCheckpoint,
    DeclineCheckpoint,
    FinalCheckpointRequest,
    RemoteTraceback,
    TaskStateEvent,
    portable_error,
)
from raylink.tests.runtime_jobs import CountingSource, make_env, reset_signal, signal, wait_for

pytestmark = pytest.mark.timeout(60)

J = JobStatus
E = ExecutionState


# -- JobStatus -------------------------------------------------------------------------------------
def test_job_status_is_a_string_with_flinks_names():
    assert [s.value for s in JobStatus] == [
        "INITIALIZING",
        "CREATED",
        "RUNNING",
        "FAILING",
        "FAILED",
        "CANCELLING",
        "CANCELED",
        "FINISHED",
        "RESTARTING",
        "SUSPENDED",
        "RECONCILING",
    ]
    assert J.FAILED == "FAILED" and "FAILED" == J.FAILED and J.FAILED in ("FINISHED", "FAILED")
    assert str(J.CANCELLING) == "CANCELLING" and f"{J.CANCELLING}" == "CANCELLING"
    assert f"job {J.RUNNING.lower()}" == "job running"
    assert json.dumps({"status": J.FINISHED}) == '{"status": "FINISHED"}'
    assert pickle.loads(pickle.dumps(J.RESTARTING)) is J.RESTARTING
    assert cloudpickle.loads(cloudpickle.dumps(J.RESTARTING)) is J.RESTARTING
    assert JobStatus("RUNNING") is J.RUNNING


def test_job_status_terminal_states_as_pyflink():
    assert {s for s in JobStatus if s.is_globally_terminal_state()} == {J.FINISHED, J.CANCELED, J.FAILED}
    assert {s for s in JobStatus if s.is_terminal_state()} == {J.FINISHED, J.CANCELED, J.FAILED, J.SUSPENDED}


@pytest.mark.parametrize(
    "old,new",
    [
        (J.INITIALIZING, J.CREATED),
        (J.CREATED, J.RUNNING),
        (J.RUNNING, J.FINISHED),
        (J.RUNNING, J.FAILING),
        (J.FAILING, J.FAILED),
        (J.RUNNING, J.CANCELLING),
        (J.CANCELLING, J.CANCELED),
        (J.RUNNING, J.RESTARTING),
        (J.RESTARTING, J.RUNNING),
        (J.RESTARTING, J.FAILING),
        (J.FAILING, J.RESTARTING),
        (J.RESTARTING, J.CANCELLING),
        (J.CANCELLING, J.FAILING),
        (J.FAILING, J.CANCELLING),
        (J.CREATED, J.FAILED),
        (J.RUNNING, J.SUSPENDED),
        (J.RECONCILING, J.RUNNING),
    ],
)
def test_job_status_moves_flink_makes(old, new):
    assert old.can_transition_to(new)
    assert old.transition_to(new) is new
    assert old.transition_to(new.value) is new  # a name works too


@pytest.mark.parametrize(
    "old,new",
    [
        (J.FINISHED, J.RUNNING),
        (J.CANCELED, J.CANCELLING),
        (J.FAILED, J.RESTARTING),
        (J.SUSPENDED, J.RUNNING),
        (J.CREATED, J.FINISHED),
        (J.RUNNING, J.CANCELED),
        (J.RUNNING, J.CREATED),
        (J.CANCELLING, J.RUNNING),
        (J.RUNNING, J.INITIALIZING),
    ],
)
def test_job_status_rejects_other_moves_naming_both_states(old, new):
    assert not old.can_transition_to(new)
    with pytest.raises(IllegalStateTransitionError) as info:
        old.transition_to(new)
    assert str(info.value) == f"illegal job status transition {old} -> {new}"
    assert isinstance(info.value, RaylinkError) and isinstance(info.value, RuntimeError)
    assert pickle.loads(pickle.dumps(info.value)).args == info.value.args


def test_moving_to_the_same_state_is_a_no_op():
    for status in JobStatus:
        assert status.transition_to(status) is status
    for state in ExecutionState:
        assert state.transition_to(state) is state


def test_an_unknown_name_is_a_value_error():
    with pytest.raises(ValueError):
        J.RUNNING.transition_to("DONE")


# -- ExecutionState --------------------------------------------------------------------------------
def walk(*states: ExecutionState) -> ExecutionState:
    state = states[0]
    for new in states[1:]:
        state = state.transition_to(new)
    return state


def test_execution_state_names_and_terminal_states():
    assert {s.value for s in ExecutionState} == {
        "CREATED",
        "SCHEDULED",
        "DEPLOYING",
        "INITIALIZING",
        "RUNNING",
        "FINISHED",
        "CANCELING",
        "CANCELED",
        "FAILED",
        "RECONCILING",
    }
    assert {s for s in ExecutionState if s.is_terminal()} == {E.FINISHED, E.CANCELED, E.FAILED}
    assert json.dumps([E.RUNNING]) == '["RUNNING"]' and f"{E.CANCELING}" == "CANCELING"


def test_the_lifecycles_of_a_task_and_of_an_execution():
    assert walk(E.CREATED, E.DEPLOYING, E.INITIALIZING, E.RUNNING, E.FINISHED) is E.FINISHED  # Flink's Task
    assert (
        walk(E.CREATED, E.SCHEDULED, E.DEPLOYING, E.INITIALIZING, E.RUNNING, E.CANCELING, E.CANCELED) is E.CANCELED
    )  # the JobMaster's Execution
    for live in (E.DEPLOYING, E.INITIALIZING, E.RUNNING):  # a task unwinds or fails from any live state
        assert live.can_transition_to(E.CANCELED) and live.can_transition_to(E.FAILED)
    assert E.DEPLOYING.can_transition_to(E.FINISHED)  # finished before its RUNNING update came


@pytest.mark.parametrize(
    "old,new",
    [
        (E.CREATED, E.RUNNING),
        (E.DEPLOYING, E.RUNNING),
        (E.SCHEDULED, E.RUNNING),
        (E.FINISHED, E.RUNNING),
        (E.CANCELING, E.FINISHED),
        (E.CANCELING, E.RUNNING),
        (E.FAILED, E.CANCELED),
        (E.RUNNING, E.DEPLOYING),
    ],
)
def test_execution_state_rejects_other_moves(old, new):
    with pytest.raises(IllegalStateTransitionError, match=f"illegal execution state transition {old} -> {new}"):
        old.transition_to(new)


def test_terminal_states_go_nowhere():
    for old in (E.FINISHED, E.CANCELED, E.FAILED):
        assert [new for new in ExecutionState if new != old and old.can_transition_to(new)] == []
    for old in (J.FINISHED, J.CANCELED, J.FAILED, J.SUSPENDED):
        assert [new for new in JobStatus if new != old and old.can_transition_to(new)] == []


# -- task events -----------------------------------------------------------------------------------
class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("no pickling here")


def test_task_state_event_crosses_processes_and_decodes_its_error_once():
    event = TaskStateEvent(
        "a1", "Map (1/2)", E.FAILED, portable_error(ValueError("bad record 7")), {}, {"task": "Map (1/2)"}
    )
    assert isinstance(event.error, bytes)
    copy = cloudpickle.loads(cloudpickle.dumps([event]))[0]
    assert (copy.attempt_id, copy.task, copy.state) == ("a1", "Map (1/2)", E.FAILED)
    cause = copy.failure_cause()
    assert isinstance(cause, ValueError) and str(cause) == "bad record 7"
    assert copy.failure_cause() is cause
    assert TaskStateEvent("a2", "Sink (1/1)", E.FINISHED).failure_cause() is None


def test_an_error_that_cannot_be_pickled_travels_as_its_text():
    cause = cloudpickle.loads(portable_error(Unpicklable("kept as text")))
    assert type(cause) is RuntimeError
    assert str(cause).startswith("Unpicklable: kept as text (the error itself could not be shipped")


def test_checkpoint_events_pickle():
    events = [
        AcknowledgeCheckpoint("a", 3, {"op": {0: "handle"}}, {"size": 10}),
        DeclineCheckpoint("a", 4, "task Map (1/1) has already finished"),
        FinalCheckpointRequest("b"),
    ]
    assert cloudpickle.loads(cloudpickle.dumps(events)) == events


# -- end to end (in process) -------------------------------------------------------------------------
class BlockingOpen(MapFunction):
    """``open`` waits for the test's signal: the task stays INITIALIZING until then."""

    def __init__(self, name: str) -> None:
        self.name = name

    def open(self, runtime_context):
        signal(self.name + "-opening").set()
        signal(self.name).wait(30)

    def map(self, value):
        return value


def task_states(client) -> dict:
    return {m["task"]: m["state"] for m in client.get_metrics()}


def test_a_finished_job_reports_typed_states():
    env = make_env("local", 2)
    env.from_collection(list(range(100))).map(lambda v: v + 1).add_sink(lambda v: None)
    client = env.execute_async("states")
    assert client.wait(30)
    assert client.get_job_status() is J.FINISHED and client.get_job_status() == "FINISHED"
    executions = [ev.current_execution for ev in client.execution_graph.all_vertices()]
    assert {e.state for e in executions} == {E.FINISHED}
    assert {e.assigned_location for e in executions} == {"local"}
    states = [m["state"] for m in client.get_metrics()]
    assert states and set(states) == {"FINISHED"} and all(type(s) is str for s in states)
    json.dumps(client.get_metrics())  # what the CLI prints


def test_a_task_is_initializing_while_its_operators_open_then_running():
    name = "states-open"
    reset_signal(name)
    reset_signal(name + "-opening")
    env = make_env("local", 1)
    env.add_source(CountingSource()).map(BlockingOpen(name)).add_sink(lambda v: None)
    client = env.execute_async("initializing")
    try:
        assert signal(name + "-opening").wait(30)
        assert client.get_job_status() is J.RUNNING
        states = task_states(client)
        assert [s for t, s in states.items() if "Map" in t] == ["INITIALIZING"], states
        signal(name).set()
        assert wait_for(lambda: set(task_states(client).values()) == {"RUNNING"}, client, timeout=30), task_states(
            client
        )
    finally:
        signal(name).set()
        client.cancel()
    assert client.wait(30)
    assert client.get_job_status() is J.CANCELED
    assert set(task_states(client).values()) == {"CANCELED"}
    assert {ev.current_execution.state for ev in client.execution_graph.all_vertices()} == {E.CANCELED}


def test_a_failed_job_is_failed_and_its_error_a_raylink_error():
    def explode(v):
        if v == 5:
            raise ValueError("boom at 5")
        return v

    env = make_env("local", 1)
    env.from_collection(list(range(10))).map(explode).add_sink(lambda v: None)
    client = env.execute_async("fails")
    assert client.wait(30)
    assert client.get_job_status() is J.FAILED
    with pytest.raises(RaylinkError) as info:
        client.get_job_execution_result(5)
    assert isinstance(info.value, JobExecutionException) and info.value.status is J.FAILED
    assert str(info.value).startswith("Job 'fails' failed")
    failed = [ev for ev in client.execution_graph.all_vertices() if ev.current_execution.state is E.FAILED]
    assert failed and "boom at 5" in str(failed[0].current_execution.failure_cause)


def test_a_job_that_ended_cannot_move_again():
    env = make_env("local", 1)
    env.from_collection([1, 2, 3]).add_sink(lambda v: None)
    client = env.execute_async("over")
    assert client.wait(30) and client.get_job_status() is J.FINISHED
    client.cancel()  # nothing to cancel: the status stays
    assert client.get_job_status() is J.FINISHED
    with pytest.raises(IllegalStateTransitionError, match="FINISHED -> RUNNING"):
        with client._lock:
            client._transition(J.RUNNING)


def test_a_failed_tasks_traceback_crosses_processes_as_the_cause_of_its_innermost_error():
    def key_of(record):
        raise ValueError(f"no key for {record}")

    try:
        try:
            key_of(300)
        except ValueError as e:
            raise RuntimeError("Could not extract key from 300") from e
    except RuntimeError as e:
        wrapper = OperatorError("Map", "Map (1/1)", e)  # never raised: wraps the task's error
    event = TaskStateEvent("a1", "Map (1/1)", E.FAILED, portable_error(wrapper))
    error = cloudpickle.loads(cloudpickle.dumps(event)).failure_cause()
    assert type(error) is OperatorError and error.operator_name == "Map"
    extract = error.__cause__
    assert type(extract) is RuntimeError and str(extract) == "Could not extract key from 300"
    remote = extract.__cause__
    assert type(remote) is RemoteTraceback and remote.__cause__ is None
    assert "in key_of" in remote.text and "ValueError: no key for 300" in remote.text
    assert remote.text.rstrip().endswith("RuntimeError: Could not extract key from 300")
