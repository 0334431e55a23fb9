"""The committables of a two-phase-commit sink subtask, kept per checkpoint until that
checkpoint completes (Flink's ``CommittableCollector`` of the sink's committer operator).

``add(n, committables)`` at the pre-commit of checkpoint ``n``; ``snapshot()`` is part of
checkpoint ``n``'s state (it includes ``n``'s own committables, so a restore from ``n``
re-commits them); ``commit_up_to(committer, n)`` on ``notify_checkpoint_complete(n)`` and,
after ``restore(snapshot)``, on restore from ``n``. Committers are idempotent, so
committing again what a failed attempt already committed is harmless. A checkpoint that
is aborted keeps its committables pending: they are committed with the next checkpoint
that completes (Flink does the same; the writer never re-emits them).

Not thread-safe: one task thread.
"""

from __future__ import annotations

from typing import Any, Generic, Iterable, Sequence, TypeVar

from raylink.core.sink import Committer

CommT = TypeVar("CommT")


class CommittableCollector(Generic[CommT]):
    """Pending committables by checkpoint id."""

    def __init__(self) -> None:
        self._pending: dict[int, list[CommT]] = {}

    def add(self, checkpoint_id: int, committables: Iterable[CommT]) -> None:
        """Committables the writer prepared for ``checkpoint_id``."""
        self._pending.setdefault(checkpoint_id, []).extend(committables)

    def pending_up_to(self, checkpoint_id: int) -> list[CommT]:
        """Every pending committable of checkpoints ``<= checkpoint_id``, oldest first."""
        return [c for cid in sorted(self._pending) if cid <= checkpoint_id for c in self._pending[cid]]

    def commit_up_to(self, committer: Committer[CommT], checkpoint_id: int) -> int:
        """Commits the committables of checkpoints ``<= checkpoint_id`` and forgets them;
        returns how many. On an error nothing is forgotten (a later call retries)."""
        done = [cid for cid in sorted(self._pending) if cid <= checkpoint_id]
        batch = [c for cid in done for c in self._pending[cid]]
        if batch:
            committer.commit(batch)
        for cid in done:
            del self._pending[cid]
        return len(batch)

    def snapshot(self) -> list[tuple[int, list[CommT]]]:
        """The pending committables as plain data for the checkpoint."""
        return [(cid, list(items)) for cid, items in sorted(self._pending.items())]

    def restore(self, snapshots: Iterable[Sequence[Any]]) -> None:
        """Adds the committables of one or more snapshots (several after a rescale)."""
        for snapshot in snapshots:
            for checkpoint_id, items in snapshot:
                self.add(int(checkpoint_id), items)

    def __len__(self) -> int:
        return sum(len(items) for items in self._pending.values())


__all__ = ["CommittableCollector"]
