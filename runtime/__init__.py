"""raylink.runtime: the Ray-free task runtime.

Plain classes the TaskExecutors, the JobMaster and the in-process executor are built from;
nothing here imports Ray (``actors/`` wraps these for Ray). So far: checkpoint storage
(:mod:`raylink.runtime.checkpoint_storage`) and the committable bookkeeping of two-phase-commit
sinks (:mod:`raylink.runtime.committable_collector`).
"""
