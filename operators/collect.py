"""The bounded hand-over between a collect sink subtask and the client reading its
records (``execute_and_collect``) — the buffer of Flink's ``CollectSinkFunction``.

Thread-safety: the task thread ``add``s, a client thread (the JobMaster's fetch on
the local target, the TaskExecutor actor's ``take_collected`` call on Ray)
``take``s; every buffer of one TaskExecutor shares that executor's condition, so
one ``take`` can wait on all of them at once.

Back pressure: ``add`` blocks the task while ``max_records`` records wait to be
taken (one batch may overshoot the bound), so a slow reader slows the job down
instead of growing memory, as Flink's sink blocks in ``invoke``. ``release``
(task cancelled or failed) wakes a blocked ``add``, which then drops its records.
When the task ends, ``close`` hands over what is left (at most one bound's worth)
so it can travel with the task's final report.
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional, Tuple

#: the default of ``raylink.collect.max-buffered-records`` (``core/options.py``)
DEFAULT_MAX_BUFFERED_RECORDS = 16_384


class CollectBuffer:
    """Records of one collect sink subtask waiting for the client."""

    def __init__(
        self, condition: Optional[threading.Condition] = None, max_records: int = DEFAULT_MAX_BUFFERED_RECORDS
    ) -> None:
        if max_records < 1:
            raise ValueError(f"raylink.collect.max-buffered-records must be >= 1, got {max_records}")
        self._cond = condition if condition is not None else threading.Condition()
        self.max_records = max_records
        self._records: List[Any] = []
        self.closed = False  # no record will be added any more
        self._released = False  # the task is going away: adders stop waiting

    # -- task thread ---------------------------------------------------------------------------
    def add(self, values: List[Any]) -> None:
        """Queue ``values``; blocks while the reader is ``max_records`` behind."""
        with self._cond:
            while len(self._records) >= self.max_records and not self._released:
                self._cond.wait()
            if self._released or self.closed:
                return
            self._records.extend(values)
            self._cond.notify_all()

    # -- any thread ----------------------------------------------------------------------------
    def take(self) -> Tuple[List[Any], bool]:
        """(everything queued, closed) — the caller holds the shared condition or tolerates a race."""
        with self._cond:
            records, self._records = self._records, []
            if records:
                self._cond.notify_all()
            return records, self.closed

    def has_data(self) -> bool:
        return bool(self._records) or self.closed

    def close(self) -> List[Any]:
        """The task ended: no more records; returns (and removes) what was still queued."""
        with self._cond:
            self.closed = True
            self._released = True
            records, self._records = self._records, []
            self._cond.notify_all()
            return records

    def release(self) -> None:
        """The task is being cancelled: wake a blocked ``add`` (its records are dropped)."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._records)


__all__ = ["CollectBuffer", "DEFAULT_MAX_BUFFERED_RECORDS"]
