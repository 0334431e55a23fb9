"""Which operator of a job gets which state of a savepoint or a retained checkpoint — the checks
of Flink's ``StateAssignmentOperation`` before a job starts from one
(``execution.savepoint.path``).

State is matched to operators by operator id: the hash of the operator's ``uid(...)``, or the
id Flink's ``StreamGraphHasherV2`` generates from the topology when it has none, so the same
program (or a new version keeping its uids) finds its state at any parallelism. Every
checkpoint records, in its ``_metadata`` properties, each operator's name, parallelism and
max parallelism (:func:`operator_properties`), so a refusal can name the operator and what
changed. Refused, each with a :class:`~raylink.state.snapshots.StateRestoreError` naming the
operator, before anything is deployed:

* state of an operator the job no longer has, unless
  ``execution.savepoint.ignore-unclaimed-state`` (``--allow-non-restored-state``) drops it;
* a changed max parallelism of an operator whose state is restored (key groups would move).

The redistribution itself happens in each subtask (``state.snapshots.initialize_operator``):
keyed state by key-group ranges, list state round-robin, union state to all, broadcast
state copied, sources' and sinks' own state through ``restore_rescaled_operator_state``.

Stateless functions; thread-safe.
"""

from __future__ import annotations

import logging
from typing import Any

from raylink.core.options import SavepointConfigOptions
from raylink.graph.job_graph import JobGraph
from raylink.state.checkpoint_storage import CompletedCheckpoint
from raylink.state.snapshots import StateRestoreError

log = logging.getLogger(__name__)

#: the ``_metadata`` property holding :func:`operator_properties`
OPERATORS_PROPERTY = "operators"


def operator_properties(job_graph: JobGraph) -> dict:
    """``{operator id: [name, parallelism, max parallelism]}`` of every operator of the job."""
    return {
        config.operator_id: [config.operator_name, vertex.parallelism, vertex.max_parallelism]
        for vertex in job_graph.vertices.values()
        for config in vertex.chain
    }


def check_state_assignment(completed: CompletedCheckpoint, job_graph: JobGraph, allow_non_restored: bool) -> None:
    """Refuse to start ``job_graph`` from ``completed`` when state would be lost or misplaced
    (see the module docstring); logs the operators whose state is dropped when allowed."""
    recorded = dict(completed.properties.get(OPERATORS_PROPERTY) or {})
    ours = operator_properties(job_graph)
    where = f"savepoint {completed.external_pointer!r}"
    for operator_id, subtasks in completed.operator_states.items():
        if not subtasks:
            continue
        name = recorded.get(operator_id, [None])[0]
        shown = f"{operator_id}" + (f" ({name!r} in the savepoint's program)" if name else "")
        if operator_id not in ours:
            if allow_non_restored:
                log.warning("%s: the state of operator %s is not restored (no such operator)", where, shown)
                continue
            raise StateRestoreError(
                f"Failed to rollback to {where}: cannot map the state of operator {shown} to the new program, "
                f"because the operator is not available in the new program (give it the same uid(...)). To "
                f"skip that state, set {SavepointConfigOptions.SAVEPOINT_IGNORE_UNCLAIMED_STATE.key} "
                f"(--allow-non-restored-state)."
            )
        if operator_id in recorded:
            old_max, new_max = recorded[operator_id][2], ours[operator_id][2]
            if old_max != new_max:
                raise StateRestoreError(
                    f"Failed to rollback to {where}: the maximum parallelism ({old_max}) with which it was "
                    f"taken and the current maximum parallelism ({new_max}) of operator {ours[operator_id][0]!r} "
                    f"({operator_id}) differ; keyed state cannot be restored at another maximum parallelism "
                    f"(set it back with set_max_parallelism({old_max}))."
                )


def first_checkpoint_id(completed: Any) -> int:
    """The id the job's own checkpoints start at after ``completed`` (Flink goes on counting)."""
    return 1 if completed is None else completed.checkpoint_id + 1


__all__ = ["OPERATORS_PROPERTY", "check_state_assignment", "first_checkpoint_id", "operator_properties"]
