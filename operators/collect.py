"""The bounded hand-over between a collect sink subtask and the client reading its
records (``execute_and_collect``) — the buffer of Flink's ``CollectSinkFunction``.

Thread-safety: the task thread ``add``s, a client thread (the JobMaster's fetch on
the local target, the TaskExecutor actor's ``take_collected`` call on Ray)
``take``s; every buffer of one TaskExecutor shares that executor's condition, so
one ``take`` can wait on all of them at once.

Encoded or not: a reader in another process (``encode=True``: the TaskExecutor has a
transport) gets bytes, so ``add`` encodes each batch in the task thread as it comes
(``shuffle.collect_codec``: marshal for flat batches, else cloudpickle; Flink's sink
serializes its results too) and ``take`` hands over the taken batches joined into one
bytes: the reader's process decodes them straight into the records. A reader in this
process (the local target) gets the very records, unencoded.

Back pressure: ``add`` blocks the task while ``max_records`` records, or (encoded)
``max_bytes`` bytes, wait to be taken (one batch may overshoot a bound), so a slow reader
slows the job down instead of growing memory, as Flink's sink blocks in ``invoke`` once
its buffer holds ``collect-sink.batch-size.max`` bytes. ``release`` (task cancelled or
failed) wakes a blocked ``add``, which then drops its records. When the task ends,
``close`` hands over what is left (at most one bound's worth, decoded) so it can travel
with the task's final report.

Wake-ups: ``add`` notifies the shared condition only when a buffer stops being empty (a
waiting reader starts its linger) or is at least half full (the reader's threshold), not
for every batch: a reader waiting for more does not take the GIL from the task per batch.
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional, Tuple, Union

from raylink.shuffle.collect_codec import decode_records, encode_batch, join_batches

#: the default of ``raylink.collect.max-buffered-records`` (``core/options.py``)
DEFAULT_MAX_BUFFERED_RECORDS = 128 * 1024
#: encoded bytes a sink subtask holds for a reader in another process before it blocks
#: (Flink's ``collect-sink.batch-size.max`` is 2 MiB; a take then carries about half)
DEFAULT_MAX_BUFFERED_BYTES = 4 * 1024 * 1024


class CollectBuffer:
    """Records of one collect sink subtask waiting for the client."""

    def __init__(
        self,
        condition: Optional[threading.Condition] = None,
        max_records: int = DEFAULT_MAX_BUFFERED_RECORDS,
        encode: bool = False,
        max_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
    ) -> None:
        if max_records < 1:
            raise ValueError(f"raylink.collect.max-buffered-records must be >= 1, got {max_records}")
        if max_bytes < 1:
            raise ValueError(f"the collect buffer's max_bytes must be >= 1, got {max_bytes}")
        self._cond = condition if condition is not None else threading.Condition()
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.encode = encode
        self._items: List[Any] = []  # the records, or (encode) the encoded batches
        self._count = 0  # records queued
        self.queued_bytes = 0  # encoded bytes queued (encode only)
        self.closed = False  # no record will be added any more
        self._released = False  # the task is going away: adders stop waiting

    # -- task thread ---------------------------------------------------------------------------
    def add(self, values: List[Any]) -> None:
        """Queue ``values``; blocks while the reader is ``max_records`` (or ``max_bytes``) behind."""
        if not values:
            return
        data = encode_batch(values) if self.encode else None  # outside the lock: the reader goes on
        with self._cond:
            while self._full() and not self._released:
                self._cond.wait()
            if self._released or self.closed:
                return
            was_empty = not self._count
            self._count += len(values)
            if data is None:
                self._items.extend(values)
            else:
                self._items.append(data)
                self.queued_bytes += len(data)
            if was_empty or self.half_full():
                self._cond.notify_all()

    def _full(self) -> bool:
        return self._count >= self.max_records or self.queued_bytes >= self.max_bytes

    def half_full(self) -> bool:
        """At least half a bound queued: a reader waiting for more takes now."""
        return self._count >= max(1, self.max_records // 2) or self.queued_bytes >= max(1, self.max_bytes // 2)

    # -- any thread ----------------------------------------------------------------------------
    def take(self) -> Tuple[Union[List[Any], bytes], bool]:
        """(everything queued, closed): a list of the records, or (encode) one bytes holding
        them (``[]`` when none) -- the caller holds the shared condition or tolerates a race."""
        with self._cond:
            items, self._items = self._items, []
            if items:
                self._count = 0
                self.queued_bytes = 0
                self._cond.notify_all()
                if self.encode:
                    return join_batches(items), self.closed
            return items, self.closed

    def has_data(self) -> bool:
        return bool(self._items) or self.closed

    def close(self) -> List[Any]:
        """The task ended: no more records; returns (and removes) what was still queued."""
        with self._cond:
            self.closed = True
            self._released = True
            items, self._items = self._items, []
            self._count = 0
            self.queued_bytes = 0
            self._cond.notify_all()
        if self.encode:
            return [record for data in items for record in decode_records(data)]
        return items

    def release(self) -> None:
        """The task is being cancelled: wake a blocked ``add`` (its records are dropped)."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def __len__(self) -> int:
        return self._count


__all__ = ["CollectBuffer", "DEFAULT_MAX_BUFFERED_RECORDS", "DEFAULT_MAX_BUFFERED_BYTES"]
