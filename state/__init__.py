"""raylink.state: state and checkpoints of a task (Flink's ``runtime.state`` and
``runtime.checkpoint``).

Holds: the keyed and operator state backends of a subtask (``state_backend``: heap, by key
group and namespace; ``rocksdb_keyed_state_backend``: an embedded RocksDB, key-group-prefixed
keys, native and incremental checkpoints; ``state_backend_loader``: the backend-dependent steps
of snapshots and restores), state TTL (``ttl_state``), broadcast state (``broadcast_state``), what
an operator's checkpoint holds and how it is taken and restored (``snapshots``), and where
checkpoints are kept (``checkpoint_storage``: the files of a checkpoint, ``_metadata``,
retention, the checkpoint a restore starts from). Key groups are :mod:`raylink.core.key_groups`.

May import: ``core``, ``errors`` and the floors between (``graph``, ``shuffle``). Never Ray;
``operators`` and the floors above build on it.
"""
