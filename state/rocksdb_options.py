"""How a RocksDB keyed backend is set up and opened: Flink's ``RocksDBOptions`` /
``RocksDBMemoryConfiguration`` / ``RocksDBResourceContainer`` in one place.

:class:`RocksDBSettings` reads ``state.backend.rocksdb.*`` (local directories, memory, write
buffer ratio, write batch size) and ``execution.checkpointing.incremental``; :func:`open_db`
opens a database whose memtables, data blocks and index and filter blocks are all charged to
one LRU block cache of ``memory_bytes`` per backend (a write buffer manager reserves the
memtables' share in it), as Flink's ``RocksDBResourceContainer`` sets up managed memory, so its
native memory stays within ``memory_bytes`` whatever the number of keys. Index and filters are
partitioned (a lookup loads one small partition, not a file's whole filter), their small top
levels pinned in the cache. Outside the bound stay: the open files' table reader objects
(``rocksdb.estimate-table-readers-mem``: 0.02 MiB at 10 M keys, against 13 MiB when index and
filters were kept outside the cache), the write batch being filled (``write_batch_bytes``),
compaction's buffers and the allocator's slack; the cache is not strict, so pinned blocks may
briefly take it past ``memory_bytes`` (``python -m raylink.bench.rocksdb_memory`` prints the
figures). Further: bloom filters (point lookups; the memtables' too, so a key stored nowhere is
known absent without a skip-list search), hash indexes in data blocks and no write-ahead log
(checkpoints are the durability, as in Flink). Plain values and functions; thread-safe.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from dataclasses import dataclass
from typing import Any

import rocksdict

from raylink.core.options import CheckpointingOptions, StateBackendOptions, TaskManagerOptions, read_option

log = logging.getLogger(__name__)


DEFAULT_MEMORY = 128 * 1024 * 1024
#: this process's private fallback folder, once the default one was found unusable
_fallback_directory: list = []


def _private_fallback() -> str:
    if not _fallback_directory:
        _fallback_directory.append(tempfile.mkdtemp(prefix=f"raylink-rocksdb-{os.getuid()}-"))
    return _fallback_directory[0]


def default_local_directory() -> str:
    """Where working databases go when ``state.backend.rocksdb.localdir`` is not set: this user's
    ``<temp dir>/raylink-rocksdb-<uid>`` (made 0700), used only while it is a real folder of this
    user that nobody else can write; one another user made (or a link) is passed over for a
    private ``mkdtemp`` folder (one per process), with a warning naming it, so nobody can squat or rename the
    databases of a job (Flink's default ``io.tmp.dirs`` is the shared temp dir)."""
    folder = os.path.join(tempfile.gettempdir(), f"raylink-rocksdb-{os.getuid()}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        log.warning("RocksDB working folder %s cannot be made (%s); using a private temporary folder", folder, e)
        return _private_fallback()
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        log.warning(
            "RocksDB working folder %s is not a folder of this user that only it can write; "
            "using a private temporary folder",
            folder,
        )
        return _private_fallback()
    return folder


@dataclass(frozen=True)
class RocksDBSettings:
    """How a backend is set up (from ``state.backend.rocksdb.*``)."""

    local_directory: str
    memory_bytes: int = DEFAULT_MEMORY
    write_buffer_ratio: float = 0.5
    write_batch_bytes: int = 2 * 1024 * 1024
    incremental: bool = False

    @classmethod
    def from_parameters(cls, parameters: Any, subtask_index: int = 0) -> "RocksDBSettings":
        dirs = read_option(parameters, StateBackendOptions.ROCKSDB_LOCAL_DIRECTORIES)
        if dirs:
            choices = [d.strip() for d in str(dirs).split(",") if d.strip()]
            local = choices[subtask_index % len(choices)]
        else:
            local = default_local_directory()
        memory = read_option(parameters, StateBackendOptions.ROCKSDB_MEMORY_FIXED_PER_SLOT)
        if not memory:
            process = read_option(parameters, TaskManagerOptions.TOTAL_PROCESS_MEMORY)
            slots = read_option(parameters, TaskManagerOptions.NUM_TASK_SLOTS)
            fraction = read_option(parameters, StateBackendOptions.MANAGED_MEMORY_FRACTION)
            memory = int(process * fraction / max(1, slots)) if process else DEFAULT_MEMORY
        return cls(
            local_directory=local,
            memory_bytes=max(16 * 1024 * 1024, int(memory)),
            write_buffer_ratio=read_option(parameters, StateBackendOptions.ROCKSDB_WRITE_BUFFER_RATIO),
            write_batch_bytes=read_option(parameters, StateBackendOptions.ROCKSDB_WRITE_BATCH_SIZE),
            incremental=bool(read_option(parameters, CheckpointingOptions.INCREMENTAL_CHECKPOINTS)),
        )


def open_db(path: str, settings: RocksDBSettings, read_only: bool = False) -> Any:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    cache = rocksdict.Cache(settings.memory_bytes)
    write_buffers = int(settings.memory_bytes * settings.write_buffer_ratio)
    options.set_write_buffer_manager(
        rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(write_buffers, False, cache)
    )
    options.set_write_buffer_size(max(4 * 1024 * 1024, min(64 * 1024 * 1024, write_buffers // 2)))
    options.set_max_write_buffer_number(2)
    options.set_max_open_files(256)
    options.set_keep_log_file_num(2)
    # universal compaction merges files of similar size: the large old files a checkpoint
    # shares stay untouched for long, so an incremental checkpoint uploads little (level
    # compaction rewrites the whole level 1 whenever level 0 spills, keys being spread by hash)
    options.set_compaction_style(rocksdict.DBCompactionStyle.universal())
    # ... and no merge of everything because the newer files outgrow the oldest: keyed state is
    # mostly new keys and overwrites of a few, so "space amplification" (RocksDB's default trigger
    # at 200 %) is growth, not garbage, and a full merge re-uploads the whole state
    universal = rocksdict.UniversalCompactOptions()
    universal.max_size_amplification_percent = 1000
    options.set_universal_compaction_options(universal)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_bloom_filter(10, False)
    # index and filter blocks live in the block cache too, so the bound holds whatever the number
    # of keys (Flink's RocksDBResourceContainer with managed or fixed-per-slot memory). They are
    # partitioned (Flink's ``state.backend.rocksdb.memory.partitioned-index-filters``): a lookup
    # loads one small partition of a file's index and filter, not the whole block that the
    # memtables charged to the cache would keep evicting; the small top level of each stays
    # pinned (in the cache, counted in its usage). The price: a lookup finds each file's filter
    # and index through the cache, ~15-20 % more CPU per new key in bench/state.py at 3 M keys
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_top_level_index_and_filter(True)
    table.set_index_type(rocksdict.BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_metadata_block_size(4096)
    # a hash index in every data block: a point lookup finds its entry without a binary search
    table.set_data_block_index_type(rocksdict.DataBlockIndexType.binary_and_hash())
    options.set_block_based_table_factory(table)
    # a bloom filter over the memtables' keys: looking up a key stored nowhere (a key's first
    # record) skips the memtable's skip list as the SST files' filters skip their blocks
    options.set_memtable_prefix_bloom_ratio(0.1)
    options.set_memtable_whole_key_filtering(True)
    if read_only:
        return rocksdict.Rdict(path, options, access_type=rocksdict.AccessType.read_only())
    db = rocksdict.Rdict(path, options)
    write = rocksdict.WriteOptions()
    write.disable_wal = True  # Flink's RocksDB backend writes no WAL: checkpoints are the durability
    db.set_write_options(write)
    return db


__all__ = ["DEFAULT_MEMORY", "RocksDBSettings", "open_db"]
