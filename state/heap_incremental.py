"""Incremental checkpoints of the heap keyed backend: a full materialization of the state
followed by the changes of each later checkpoint, as files in the checkpoint storage's
``shared/`` folder (the idea of Flink's changelog backend, FLIP-158 -- a periodic
materialization plus the changes since -- at checkpoint granularity; Flink's own
``HashMapStateBackend`` writes everything every time).

The copy-on-write layers of ``state_table`` make the change set free: a layer a barrier
freezes holds exactly what the task wrote since the previous barrier (tombstones for what it
removed), and with incremental checkpoints layers stay apart until a checkpoint that wrote
them completes. :meth:`HeapIncrementalSnapshot.materialize` (on the TaskExecutor's checkpoint
writer thread) writes one new file with the layers frozen since the last *completed*
checkpoint and returns a :class:`HeapStateHandle` naming that file after the completed
checkpoint's files; when no checkpoint completed yet, the chain is :data:`MAX_CHAIN` long or
its change files outweigh its full one, the file is a full materialization and the chain
starts again. The storage counts references to the shared files (one stays while a retained
checkpoint's chain names it); savepoints copy them (self-contained).
:func:`handle_to_key_groups` replays a chain into the plain ``{key_group: {state name: {key:
value}}}`` snapshot every backend restores from (at any parallelism: other key groups are
skipped).

Thread-safety: a snapshot is materialized by one thread; the backend's chain bookkeeping is
replaced whole (atomic under the GIL).
"""

from __future__ import annotations

import os
import pickle
import posixpath
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from raylink.state.state_table import REMOVED, LazySnapshot

#: a chain longer than this starts again with a full materialization
MAX_CHAIN = 8

#: one file of a chain: (shared file name, path when written, size, a full materialization?)
ChainFile = Tuple[str, str, int, bool]


@dataclass
class HeapStateHandle:
    """A heap backend's incremental checkpoint: ``files`` replayed in order (the first a full
    materialization) and the key groups they hold; ``resolved`` maps a shared file name to
    where it is now (a moved checkpoint, a savepoint's copies)."""

    key_group_range: Tuple[int, int]
    files: List[ChainFile]
    resolved: Dict[str, str] = field(default_factory=dict)

    @property
    def shared_paths(self) -> List[str]:
        return [path for _, path, _, _ in self.files]


class HeapIncrementalSnapshot(LazySnapshot):
    """A heap backend's snapshot with incremental checkpoints: read as a mapping it is the
    whole state (a savepoint, a local copy); :meth:`materialize` writes it as the next file of
    the backend's chain."""

    def __init__(
        self,
        backend: Any,
        seq: int,
        build_full: Callable[[], Dict[int, Any]],
        build_changes: Callable[[], Dict[int, Any]],
        namespaced: List[str],
        chain: Optional[List[ChainFile]],
    ) -> None:
        super().__init__(backend.snapshots, seq, build_full, lambda: list(backend._tables.values()))
        self._backend = backend
        self._build_changes = build_changes
        self._namespaced = namespaced
        self._chain = chain  # the last completed checkpoint's files; None: start a new chain

    def _starts_chain(self) -> bool:
        chain = self._chain
        if not chain or len(chain) >= MAX_CHAIN:
            return True
        return sum(size for _, _, size, full in chain if not full) > chain[0][2]

    def materialize(self, storage: Any, checkpoint_id: int) -> Tuple[HeapStateHandle, int]:
        """Write this checkpoint's file into ``storage``'s shared folder; returns the handle and
        the bytes written. Blocking I/O: the checkpoint writer thread."""
        full = self._starts_chain()
        if full:
            part = self._get()
            chain: List[ChainFile] = []
        else:
            part = self._read(self._build_changes)
            chain = list(self._chain or ())
        data = pickle.dumps(
            {
                "namespaced": self._namespaced,
                "groups": {kg: pickle.dumps(states, protocol=pickle.HIGHEST_PROTOCOL) for kg, states in part.items()},
            },
            protocol=pickle.HIGHEST_PROTOCOL,
        )
        backend = self._backend
        name = f"heap-{backend.uid}-{'full' if full else 'changes'}-{uuid.uuid4().hex[:8]}"
        fd, local = tempfile.mkstemp(prefix="raylink-heap-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            path, size = storage.write_shared_file(checkpoint_id, local, name)
        finally:
            os.unlink(local)
        files = chain + [(posixpath.basename(path), path, size, full)]
        backend._materialized(checkpoint_id, files)
        return HeapStateHandle((backend.start, backend.end), files), size


def handle_to_key_groups(handle: HeapStateHandle, key_groups: Optional[Tuple[int, int]] = None) -> Dict[int, Any]:
    """The state a chain holds, ``{key_group: {state name: {key: value}}}`` (a namespaced
    state's value: ``{namespace: value}``), only the key groups in ``key_groups`` if given."""
    import fsspec

    lo, hi = key_groups if key_groups is not None else (0, 1 << 30)
    state: Dict[int, Dict[str, Dict[Any, Any]]] = {}
    for shared_name, path, _, _ in handle.files:
        with fsspec.open(handle.resolved.get(shared_name, path), "rb") as f:
            loaded = pickle.loads(f.read())
        namespaced = set(loaded["namespaced"])
        for kg, data in loaded["groups"].items():
            if not lo <= kg <= hi:
                continue
            per_kg = state.setdefault(kg, {})
            for name, entries in pickle.loads(data).items():
                target = per_kg.setdefault(name, {})
                for key, value in entries.items():
                    if name in namespaced and value is not REMOVED:
                        per_key = target.setdefault(key, {})
                        for ns, v in value.items():
                            if v is REMOVED:
                                per_key.pop(ns, None)
                            else:
                                per_key[ns] = v
                        if not per_key:
                            del target[key]
                    elif value is REMOVED:
                        target.pop(key, None)
                    else:
                        target[key] = value
    for kg in list(state):
        per_kg = state[kg]
        for name in [n for n, entries in per_kg.items() if not entries]:
            del per_kg[name]
        if not per_kg:
            del state[kg]
    return dict(sorted(state.items()))


__all__ = ["ChainFile", "HeapIncrementalSnapshot", "HeapStateHandle", "MAX_CHAIN", "handle_to_key_groups"]
