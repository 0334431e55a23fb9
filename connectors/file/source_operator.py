"""The runtime of :class:`~raylink.connectors.file.source.FileSource`: the source
operator that lists the paths, picks this subtask's files and emits their lines (Flink's
``FileSourceReader`` with ``TextLineInputFormat``, plus the enumerator's listing).

Each subtask lists every path (recursively, skipping names that start with ``.`` or
``_``), keeps the files whose path hashes to it (``crc32 % parallelism``) and reads them
in path order, one batch of at most ``max_records`` lines per ``emit_next``. Bounded: the
subtask ends after the files of its first listing. Monitoring: it lists again every
discovery interval and queues files it has not seen; between listings it waits on an
event (at most 100 ms at a time, so the task's mails keep running) that ``cancel`` sets.

Checkpoint state: the files seen, the queue (the file being read first) and the number
of lines of that file already emitted; a restore re-opens that file and skips them.

Thread-safety: one task thread; ``cancel`` may come from another thread (it sets a flag
and an event).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import threading
import time
import zlib
from itertools import islice
from typing import Any, Iterator, List, Optional

import fsspec

from raylink.operators.sources import SourceOperator, rescaled_file_queues

IDLE_WAIT_S = 0.1

_DECOMPRESSORS = {
    ".gz": gzip.GzipFile,
    ".gzip": gzip.GzipFile,
    ".bz2": bz2.BZ2File,
    ".xz": lzma.LZMAFile,
}


class _Inflater(io.RawIOBase):
    """A zlib (``.deflate``, Java's ``InflaterInputStream``) stream as a readable file."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._z = zlib.decompressobj()
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buffer:
            chunk = self._raw.read(64 * 1024)
            if not chunk:
                self._buffer = self._z.flush()
                break
            self._buffer = self._z.decompress(chunk)
        n = min(len(b), len(self._buffer))
        b[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n


def _hidden(relative: str) -> bool:
    return any(part.startswith((".", "_")) for part in relative.split("/") if part)


class FileSourceOperator(SourceOperator):
    """Emits the lines of this subtask's share of the files of a ``FileSource``."""

    def __init__(self, source: Any, name: str = "", operator_id: str = "") -> None:
        super().__init__(None, name, operator_id)
        self.source = source
        self._seen: set = set()
        self._queue: List[str] = []
        self._lines: Optional[Iterator[str]] = None
        self._handle: Any = None
        self._current: Optional[str] = None
        self._emitted = 0  # lines of the current file emitted
        self._skips: dict = {}  # path -> lines of it a restored checkpoint had emitted
        self._listed = False
        self._next_poll = 0.0
        self._wakeup = threading.Event()
        self.files_read = 0

    def open(self) -> None:
        super().open()
        self._filesystems = [fsspec.core.url_to_fs(path, **self.source.storage_options) for path in self.source.paths]

    # -- listing -----------------------------------------------------------------------------------
    def _list_mine(self) -> List[str]:
        rc = self.runtime_context
        parallelism, index = rc.parallelism, rc.subtask_index
        found = []
        for (fs, root), given in zip(self._filesystems, self.source.paths):
            if not fs.exists(root):
                if self.source.discovery_interval_ms is None:
                    raise FileNotFoundError(f"source {self.name!r}: no such file or directory: {given}")
                continue
            if fs.isdir(root):
                base = root.rstrip("/")
                paths = [p for p in fs.find(root) if not _hidden(p[len(base) :])]
            else:
                paths = [root]
            for path in paths:
                url = fs.unstrip_protocol(path) if not _is_local(fs) else path
                if zlib.crc32(url.encode()) % parallelism == index:
                    found.append(url)
        return sorted(set(found))

    def _poll(self) -> None:
        new = [p for p in self._list_mine() if p not in self._seen]
        self._seen.update(new)
        self._queue.extend(new)
        self._listed = True

    # -- reading -----------------------------------------------------------------------------------
    def _open_next(self) -> None:
        path = self._queue[0]
        raw = fsspec.open(path, "rb", **self.source.storage_options).open()
        stream: Any = raw
        for suffix, opener in _DECOMPRESSORS.items():
            if path.endswith(suffix):
                stream = opener(fileobj=raw) if opener is gzip.GzipFile else opener(raw)
                break
        else:
            if path.endswith(".deflate"):
                stream = io.BufferedReader(_Inflater(raw))
        text = io.TextIOWrapper(stream, encoding=self.source.stream_format.charset_name, newline=None)
        self._handle, self._current = (raw, text), path
        lines = (line[:-1] if line.endswith("\n") else line for line in text)
        skip = self._skips.pop(path, 0)
        if skip:
            for _ in islice(lines, skip):
                pass
        self._emitted = skip
        self._lines = lines
        self.files_read += 1

    def _close_current(self) -> None:
        if self._handle is not None:
            raw, text = self._handle
            try:
                text.close()
            finally:
                raw.close()
        self._handle, self._lines, self._current = None, None, None
        if self._queue:
            self._queue.pop(0)
        self._emitted = 0

    def emit_next(self, max_records: int = 1024) -> bool:
        if self.finished or self.cancelled:
            return False
        bounded = self.source.discovery_interval_ms is None
        while self._lines is None:
            if self._queue:
                self._open_next()
                break
            if bounded:
                if not self._listed:
                    self._poll()
                    continue
                self._finish()
                return False
            now = time.monotonic()
            if now >= self._next_poll:
                self._next_poll = now + self.source.discovery_interval_ms / 1000.0
                self._poll()
                if self._queue:
                    continue
            # idle: wait a little (cancel wakes us); the task runs its mails in between
            self._wakeup.wait(min(IDLE_WAIT_S, max(0.0, self._next_poll - time.monotonic())))
            return not self.cancelled
        batch = list(islice(self._lines, max(1, max_records)))
        if batch:
            self._emitted += len(batch)
            self.record_context.timestamp = None
            self._collect_batch(batch)
        if len(batch) < max(1, max_records):
            self._close_current()
        return True

    def cancel(self) -> None:
        self.cancelled = True
        self._wakeup.set()

    def close(self) -> None:
        try:
            if self._handle is not None:
                raw, text = self._handle
                self._handle = None
                try:
                    text.close()
                finally:
                    raw.close()
        finally:
            super().close()

    # -- checkpoints ---------------------------------------------------------------------------------
    def snapshot_operator_state(self, _checkpoint_id: int) -> dict:
        return {
            "seen": sorted(self._seen),
            "queue": list(self._queue),
            "emitted": self._emitted if self._lines is not None else 0,
            "listed": self._listed,
        }

    def restore_operator_state(self, state: dict) -> None:
        """Go on after the checkpoint: unread files are queued again, and the file being read
        resumes after the lines the checkpoint had emitted."""
        self._seen = set(state["seen"])
        self._queue = list(state["queue"])
        self._skips = {self._queue[0]: state["emitted"]} if self._queue and state["emitted"] else {}
        self._listed = state["listed"]
        self._lines, self._handle, self._current, self._emitted = None, None, None, 0

    def restore_rescaled_operator_state(self, states: List[Optional[dict]], subtask: int, parallelism: int) -> None:
        """Restored at another parallelism: every file any old subtask discovered counts as seen
        here (none is read twice), old subtask ``j``'s unread files (the one it was reading
        resumes after its emitted lines) go to new subtask ``j % parallelism``, and the files
        no old subtask discovered are listed again under the new split."""
        self._seen, self._queue, self._skips = rescaled_file_queues(states, subtask, parallelism, "emitted")
        self._listed = False
        self._lines, self._handle, self._current, self._emitted = None, None, None, 0


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


__all__ = ["FileSourceOperator"]
