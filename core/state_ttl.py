"""State time-to-live configuration: Flink's ``StateTtlConfig`` (PyFlink's
``pyflink.datastream.state.StateTtlConfig``, importable from ``raylink.core.state``).

Pure, immutable-once-built data: ``StateTtlConfig.new_builder(Time.seconds(1))``
``.set_update_type(...).set_state_visibility(...).cleanup_full_snapshot().build()``,
then ``descriptor.enable_time_to_live(config)``. The keyed state backend
(``raylink.state.ttl_state``, Flink's ``TtlStateFactory``) reads it when the state
is created. Semantics carried over from Flink:

* a value (for list and map state: each element / entry) remembers the time it was
  last written (``UpdateType.OnCreateAndWrite``) or also last read
  (``OnReadAndWrite``); it is expired once ``last_access + ttl <= now``;
  ``UpdateType.Disabled`` turns TTL off;
* ``StateVisibility.NeverReturnExpired`` hides an expired value;
  ``ReturnExpiredIfNotCleanedUp`` returns it one last time (reading cleans it up);
* time is processing time (``TtlTimeCharacteristic.ProcessingTime``, wall-clock ms);
* expired values are removed when they are read, by incremental cleanup (checks
  ``cleanup_size`` entries per state access; on by default: 5 per access), and are
  left out of checkpoints (full-snapshot cleanup; also done with the default
  background cleanup). ``cleanup_in_rocksdb_compact_filter`` is accepted for
  compatibility and means nothing to the heap backend, as in Flink.

Thread-safety: build on one thread, then share read-only.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Dict, Optional

from raylink.core.time import Duration, to_millis


class _UpdateType(Enum):
    """When the last-access timestamp (which prolongs the TTL) is updated."""

    Disabled = 0
    OnCreateAndWrite = 1
    OnReadAndWrite = 2


class _StateVisibility(Enum):
    """Whether an expired value that is not cleaned up yet may be returned."""

    ReturnExpiredIfNotCleanedUp = 0
    NeverReturnExpired = 1


class _TtlTimeCharacteristic(Enum):
    """The time scale of TTL (only processing time, as in Flink)."""

    ProcessingTime = 0


class _Strategies(Enum):
    FULL_STATE_SCAN_SNAPSHOT = 0
    INCREMENTAL_CLEANUP = 1
    ROCKSDB_COMPACTION_FILTER = 2


class _CleanupStrategy:
    """Base of the cleanup strategy settings."""


class _EmptyCleanupStrategy(_CleanupStrategy):
    pass


class _IncrementalCleanupStrategy(_CleanupStrategy):
    """Check ``cleanup_size`` entries on every state access (and optionally every record)."""

    def __init__(self, cleanup_size: int, run_cleanup_for_every_record: bool) -> None:
        if cleanup_size < 0:
            raise ValueError(f"Number of incrementally cleaned up state entries cannot be negative, got {cleanup_size}")
        self._cleanup_size = int(cleanup_size)
        self._run_cleanup_for_every_record = bool(run_cleanup_for_every_record)

    def get_cleanup_size(self) -> int:
        return self._cleanup_size

    def run_cleanup_for_every_record(self) -> bool:
        return self._run_cleanup_for_every_record

    def __repr__(self) -> str:
        return f"IncrementalCleanupStrategy({self._cleanup_size}, {self._run_cleanup_for_every_record})"


class _RocksdbCompactFilterCleanupStrategy(_CleanupStrategy):
    """RocksDB compaction filter settings (no effect on the heap backend)."""

    def __init__(self, query_time_after_num_entries: int, periodic_compaction_time: Any = None) -> None:
        self._query_time_after_num_entries = int(query_time_after_num_entries)
        self._periodic_compaction_time = (
            periodic_compaction_time if periodic_compaction_time is not None else Duration.of_days(30)
        )

    def get_query_time_after_num_entries(self) -> int:
        return self._query_time_after_num_entries

    def get_periodic_compaction_time(self) -> Any:
        return self._periodic_compaction_time


class _CleanupStrategies:
    """Which cleanups run besides cleanup on read (Flink's ``StateTtlConfig.CleanupStrategies``)."""

    Strategies = _Strategies
    CleanupStrategy = _CleanupStrategy
    EmptyCleanupStrategy = _EmptyCleanupStrategy
    IncrementalCleanupStrategy = _IncrementalCleanupStrategy
    RocksdbCompactFilterCleanupStrategy = _RocksdbCompactFilterCleanupStrategy
    EMPTY_STRATEGY = _EmptyCleanupStrategy()

    def __init__(self, strategies: Dict[_Strategies, _CleanupStrategy], is_cleanup_in_background: bool) -> None:
        self._strategies = dict(strategies)
        self._is_cleanup_in_background = is_cleanup_in_background

    def is_cleanup_in_background(self) -> bool:
        return self._is_cleanup_in_background

    def in_full_snapshot(self) -> bool:
        return _Strategies.FULL_STATE_SCAN_SNAPSHOT in self._strategies

    def get_incremental_cleanup_strategy(self) -> Optional[_IncrementalCleanupStrategy]:
        """The configured incremental cleanup, else Flink's heap default (5 entries per access)
        while background cleanup is on, else ``None``."""
        default = _IncrementalCleanupStrategy(5, False) if self._is_cleanup_in_background else None
        return self._strategies.get(_Strategies.INCREMENTAL_CLEANUP, default)  # type: ignore[return-value]

    def get_rocksdb_compact_filter_cleanup_strategy(self) -> Optional[_RocksdbCompactFilterCleanupStrategy]:
        default = _RocksdbCompactFilterCleanupStrategy(1000) if self._is_cleanup_in_background else None
        return self._strategies.get(_Strategies.ROCKSDB_COMPACTION_FILTER, default)  # type: ignore[return-value]


class _Builder:
    """Builder of a ``StateTtlConfig`` (defaults: OnCreateAndWrite, NeverReturnExpired,
    processing time, background cleanup on)."""

    def __init__(self, ttl: Any) -> None:
        self._ttl = ttl
        self._update_type = _UpdateType.OnCreateAndWrite
        self._state_visibility = _StateVisibility.NeverReturnExpired
        self._ttl_time_characteristic = _TtlTimeCharacteristic.ProcessingTime
        self._is_cleanup_in_background = True
        self._strategies: Dict[_Strategies, _CleanupStrategy] = {}

    def set_update_type(self, update_type: _UpdateType) -> "_Builder":
        if not isinstance(update_type, _UpdateType):
            raise TypeError(f"set_update_type: expected a StateTtlConfig.UpdateType, got {update_type!r}")
        self._update_type = update_type
        return self

    def update_ttl_on_create_and_write(self) -> "_Builder":
        return self.set_update_type(_UpdateType.OnCreateAndWrite)

    def update_ttl_on_read_and_write(self) -> "_Builder":
        return self.set_update_type(_UpdateType.OnReadAndWrite)

    def set_state_visibility(self, state_visibility: _StateVisibility) -> "_Builder":
        if not isinstance(state_visibility, _StateVisibility):
            raise TypeError(
                f"set_state_visibility: expected a StateTtlConfig.StateVisibility, got {state_visibility!r}"
            )
        self._state_visibility = state_visibility
        return self

    def return_expired_if_not_cleaned_up(self) -> "_Builder":
        return self.set_state_visibility(_StateVisibility.ReturnExpiredIfNotCleanedUp)

    def never_return_expired(self) -> "_Builder":
        return self.set_state_visibility(_StateVisibility.NeverReturnExpired)

    def set_ttl_time_characteristic(self, ttl_time_characteristic: _TtlTimeCharacteristic) -> "_Builder":
        if not isinstance(ttl_time_characteristic, _TtlTimeCharacteristic):
            raise TypeError(
                "set_ttl_time_characteristic: expected a StateTtlConfig.TtlTimeCharacteristic, "
                f"got {ttl_time_characteristic!r}"
            )
        self._ttl_time_characteristic = ttl_time_characteristic
        return self

    def use_processing_time(self) -> "_Builder":
        return self.set_ttl_time_characteristic(_TtlTimeCharacteristic.ProcessingTime)

    def cleanup_full_snapshot(self) -> "_Builder":
        self._strategies[_Strategies.FULL_STATE_SCAN_SNAPSHOT] = _CleanupStrategies.EMPTY_STRATEGY
        return self

    def cleanup_incrementally(self, cleanup_size: int, run_cleanup_for_every_record: bool) -> "_Builder":
        self._strategies[_Strategies.INCREMENTAL_CLEANUP] = _IncrementalCleanupStrategy(
            cleanup_size, run_cleanup_for_every_record
        )
        return self

    def cleanup_in_rocksdb_compact_filter(
        self, query_time_after_num_entries: int, periodic_compaction_time: Any = None
    ) -> "_Builder":
        self._strategies[_Strategies.ROCKSDB_COMPACTION_FILTER] = _RocksdbCompactFilterCleanupStrategy(
            query_time_after_num_entries, periodic_compaction_time
        )
        return self

    def disable_cleanup_in_background(self) -> "_Builder":
        self._is_cleanup_in_background = False
        return self

    def set_ttl(self, ttl: Any) -> "_Builder":
        self._ttl = ttl
        return self

    def build(self) -> "StateTtlConfig":
        return StateTtlConfig(
            self._update_type,
            self._state_visibility,
            self._ttl_time_characteristic,
            self._ttl,
            _CleanupStrategies(self._strategies, self._is_cleanup_in_background),
        )


class StateTtlConfig:
    """Time-to-live of a keyed state (Flink's ``StateTtlConfig``); see the module docstring."""

    UpdateType = _UpdateType
    StateVisibility = _StateVisibility
    TtlTimeCharacteristic = _TtlTimeCharacteristic
    CleanupStrategies = _CleanupStrategies
    Builder = _Builder

    def __init__(
        self,
        update_type: _UpdateType,
        state_visibility: _StateVisibility,
        ttl_time_characteristic: _TtlTimeCharacteristic,
        ttl: Any,
        cleanup_strategies: _CleanupStrategies,
    ) -> None:
        millis = to_millis(ttl, "StateTtlConfig ttl")
        if millis <= 0:
            raise ValueError(f"TTL is expected to be positive, got {ttl!r}")
        self._update_type = update_type
        self._state_visibility = state_visibility
        self._ttl_time_characteristic = ttl_time_characteristic
        self._ttl = ttl
        self._ttl_millis = millis
        self._cleanup_strategies = cleanup_strategies

    @staticmethod
    def new_builder(ttl: Any) -> _Builder:
        """``ttl``: a ``Time``, ``Duration``, ``timedelta`` or int milliseconds."""
        return _Builder(ttl)

    def get_update_type(self) -> _UpdateType:
        return self._update_type

    def get_state_visibility(self) -> _StateVisibility:
        return self._state_visibility

    def get_ttl(self) -> Any:
        return self._ttl

    def get_ttl_millis(self) -> int:
        """The TTL in milliseconds (raylink)."""
        return self._ttl_millis

    def get_ttl_time_characteristic(self) -> _TtlTimeCharacteristic:
        return self._ttl_time_characteristic

    def is_enabled(self) -> bool:
        return self._update_type is not _UpdateType.Disabled

    def get_cleanup_strategies(self) -> _CleanupStrategies:
        return self._cleanup_strategies

    def __repr__(self) -> str:
        return (
            f"StateTtlConfig<update_type={self._update_type}, state_visibility={self._state_visibility}, "
            f"ttl_time_characteristic={self._ttl_time_characteristic}, ttl={self._ttl!r}>"
        )


__all__ = ["StateTtlConfig"]
