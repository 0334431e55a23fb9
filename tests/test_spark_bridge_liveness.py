"""The Spark bridge's liveness rule for sink commits (:mod:`raylink.connectors.spark.bridge`): a
sink subtask waiting for its commit gives up, naming the cause, when the driver's commit thread
has not polled for ``DRIVER_GONE_S``; a commit that takes longer than that (a cold Delta commit
on a loaded machine) is not a gone driver: the thread says it is alive while it commits, and the
waiting subtask gets its answer. In-process: the bridge actor's own class as a plain object (its
methods are what the actor runs), its ``.remote`` calls made directly, limits shortened."""

from __future__ import annotations

import threading

import pytest

from raylink.connectors.spark import bridge


class _Direct:
    """``actor.method.remote(...)`` as a direct call of the plain object's method."""

    def __init__(self, target) -> None:
        self._target = target

    def __getattr__(self, name):
        method = getattr(self._target, name)
        return type("_Remote", (), {"remote": staticmethod(method)})


@pytest.fixture
def short_limits(monkeypatch):
    monkeypatch.setattr(bridge, "DRIVER_GONE_S", 0.5)
    monkeypatch.setattr(bridge, "WAIT_SLICE_S", 0.02)
    monkeypatch.setattr(bridge, "DRIVER_ALIVE_EVERY_S", 0.05)


def _subtask_commit(actor, request: dict, outcome: dict) -> threading.Thread:
    def run() -> None:
        try:
            actor.commit(request)
            outcome["error"] = None
        except bridge.CommitError as exc:
            outcome["error"] = str(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_commit_longer_than_the_driver_timeout_is_answered_while_the_driver_says_it_is_alive(short_limits):
    actor = bridge.SparkBridgeActor.__ray_actor_class__()
    outcome: dict = {}
    waiting = _subtask_commit(actor, {"id": "r1"}, outcome)
    [request] = actor.take_commits(5.0)
    slow = threading.Event()
    with bridge._saying_alive(_Direct(actor)):
        slow.wait(4 * bridge.DRIVER_GONE_S)  # the commit's work: four times the limit
    actor.commit_done([request["id"]], None)
    waiting.join(10)
    assert outcome == {"error": None}


def test_a_driver_that_stops_polling_fails_the_waiting_commit_naming_it(short_limits):
    actor = bridge.SparkBridgeActor.__ray_actor_class__()
    outcome: dict = {}
    waiting = _subtask_commit(actor, {"id": "r1"}, outcome)
    assert actor.take_commits(5.0)  # taken, then never answered and no sign of life
    waiting.join(10)
    assert not waiting.is_alive()
    assert "the driver's Spark commit thread has not answered for 0 s" in outcome["error"], outcome
