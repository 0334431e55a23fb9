"""The detached path's pieces that need no Ray: ``--detached`` sets ``execution.attached: false``,
and a detached ``execute()``'s result says what it cannot know instead of inventing it."""

from __future__ import annotations

import argparse

import pytest

from raylink.actors.job_master_actor import DetachedJobExecutionResult, job_master_actor_name, runs_in_actor
from raylink.api import Configuration
from raylink.cli.run import prepare_conf
from raylink.errors import RaylinkError


def _args(**extra) -> argparse.Namespace:
    return argparse.Namespace(conf_file=None, conf=[], **extra)


def test_detached_flag_sets_execution_attached_false():
    assert prepare_conf(_args(detached=True))["execution.attached"] == "false"
    assert "execution.attached" not in prepare_conf(_args(detached=False))


def test_a_job_runs_in_a_job_master_actor_when_detached_or_highly_available():
    assert not runs_in_actor(Configuration())
    assert runs_in_actor(Configuration().set_string("execution.attached", "false"))
    assert runs_in_actor(Configuration().set_string("high-availability.type", "filesystem"))
    assert job_master_actor_name("abc") == "raylink-jobmaster-abc"


def test_a_detached_result_names_the_job_instead_of_a_runtime():
    result = DetachedJobExecutionResult("0123abcd", "count", 0)
    assert result.get_job_id() == "0123abcd"
    with pytest.raises(RaylinkError, match="0123abcd was submitted detached"):
        result.get_net_runtime()
    with pytest.raises(RaylinkError, match="JobClient.of"):
        result.get_accumulator_result("n")
