"""Which shared state files the checkpoints of a job still name: Flink's ``SharedStateRegistry``
(``SharedStateRegistryImpl``), kept by the ``CompletedCheckpointStore`` (here
:class:`~raylink.state.checkpoint_storage.CheckpointStorage`).

An incremental checkpoint (RocksDB SST files, the heap backend's change chain) names files in
the job's ``shared/`` folder that later checkpoints name again. The registry counts, in memory,
which registered checkpoint names which file:

* :meth:`SharedStateRegistry.register_all` — a checkpoint this process completed (Flink's
  ``registerAll(operatorStates, checkpointId)``);
* :meth:`SharedStateRegistry.register_all_after_restored` — a checkpoint read back from storage
  to restore from; a restore also *pins* the checkpoint: its files stay while the restore may
  still read them, until a checkpoint newer than every one the store knew at the restore
  completes (:meth:`checkpoint_completed`: only tasks that restored acknowledge it; one
  that was in flight before the restore does not end the pin);
* :meth:`SharedStateRegistry.unregister` — retention subsumed a checkpoint; files no
  registered checkpoint names any more become *unused*. Flink's
  ``unregisterUnusedState(lowestCheckpointID)`` drops every entry last used below the lowest
  retained id; counting the users of each file gives the same answer for the contiguous
  retention of a store and stays right when the registered ids are not contiguous (a restore
  from an older retained checkpoint).

The registry never deletes anything itself: the store deletes :meth:`unused` files and reports
back (:meth:`discarded`); a file whose deletion failed stays unused and is offered again. A
checkpoint the registry does not know (its ``_metadata`` could not be read) is the store's to
guard: while a retained checkpoint is unknown the store deletes no shared file at all.

Thread-safety: every method takes the registry's lock; any thread may call any method.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Iterable, Optional


class SharedStateRegistry:
    """The shared files each registered (retained or restoring) checkpoint names."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files_of: dict[int, frozenset[str]] = {}
        self._references: Counter[str] = Counter()
        self._restoring: dict[int, int] = {}  # pinned id -> the newest id known when it was restored
        self._subsumed: set[int] = set()  # retention dropped them while pinned
        self._unused: set[str] = set()  # named by no registered checkpoint, not yet deleted

    # -- registration ---------------------------------------------------------------------------
    def register_all(self, checkpoint_id: int, paths: Iterable[str]) -> None:
        """Checkpoint ``checkpoint_id`` names ``paths`` (replaces an earlier registration)."""
        files = frozenset(paths)
        with self._lock:
            self._drop(checkpoint_id)
            self._files_of[checkpoint_id] = files
            self._references.update(files)
            self._unused -= files  # named again (a restore of a checkpoint that names it)

    def register_all_after_restored(
        self, checkpoint_id: int, paths: Iterable[str], newest_known_id: Optional[int] = None
    ) -> None:
        """Checkpoint ``checkpoint_id``, read back from storage to restore from, names ``paths``;
        they stay until a checkpoint newer than ``newest_known_id`` (default: this one)
        completes (Flink's ``registerAllAfterRestored``)."""
        self.register_all(checkpoint_id, paths)
        until = max(checkpoint_id, newest_known_id if newest_known_id is not None else checkpoint_id)
        with self._lock:
            self._restoring[checkpoint_id] = max(until, self._restoring.get(checkpoint_id, until))
            self._subsumed.discard(checkpoint_id)

    def is_registered(self, checkpoint_id: int) -> bool:
        """Whether the files of ``checkpoint_id`` are known."""
        with self._lock:
            return checkpoint_id in self._files_of

    def is_referenced(self, path: str) -> bool:
        """Whether a registered checkpoint names ``path``."""
        with self._lock:
            return self._references[path] > 0

    # -- release ----------------------------------------------------------------------------------
    def checkpoint_completed(self, checkpoint_id: int) -> None:
        """A checkpoint completed in this process: restores of older checkpoints are over, the
        ones retention dropped meanwhile release their files (Flink's ``checkpointCompleted``)."""
        with self._lock:
            done = {c for c, until in self._restoring.items() if until < checkpoint_id}
            for released in done:
                del self._restoring[released]
            for released in done & self._subsumed:
                self._subsumed.discard(released)
                self._drop(released)

    def unregister(self, checkpoint_id: int) -> None:
        """Retention subsumed ``checkpoint_id``: its files no other registered checkpoint names
        become unused (a restoring checkpoint's only once its restore is over)."""
        with self._lock:
            if checkpoint_id in self._restoring:
                self._subsumed.add(checkpoint_id)
            else:
                self._drop(checkpoint_id)

    def unused(self) -> set[str]:
        """The files no registered checkpoint names and that are not deleted yet."""
        with self._lock:
            return set(self._unused)

    def discarded(self, path: str) -> None:
        """``path`` was deleted (or is gone)."""
        with self._lock:
            self._unused.discard(path)

    def clear(self) -> None:
        """Forget everything (the job's folder was deleted)."""
        with self._lock:
            self._files_of.clear()
            self._references.clear()
            self._restoring.clear()
            self._subsumed.clear()
            self._unused.clear()

    def _drop(self, checkpoint_id: int) -> None:
        files = self._files_of.pop(checkpoint_id, None)
        if not files:
            return
        self._references.subtract(files)
        for path in files:
            if self._references[path] <= 0:
                del self._references[path]
                self._unused.add(path)

    def __repr__(self) -> str:
        with self._lock:
            return (
                f"SharedStateRegistry(checkpoints={sorted(self._files_of)}, files={len(self._references)}, "
                f"restoring={sorted(self._restoring)}, unused={len(self._unused)})"
            )


__all__ = ["SharedStateRegistry"]
