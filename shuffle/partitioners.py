"""Channel selectors: Flink's ``StreamPartitioner`` subclasses.

``ForwardPartitioner``, ``RebalancePartitioner``, ``RescalePartitioner``,
``ShufflePartitioner``, ``BroadcastPartitioner``, ``GlobalPartitioner``,
``CustomPartitionerWrapper`` and ``KeyGroupStreamPartitioner``, plus
``create_partitioner`` which builds one from a ship-strategy name (what the
graph layer stores: "FORWARD" "REBALANCE" "RESCALE" "SHUFFLE" "BROADCAST"
"GLOBAL" "HASH" "CUSTOM").

Every partitioner: ``setup(num_channels)`` (once, by the RecordWriter),
``select_channel(value) -> int`` and the batch ``select_channels(values) ->
list[int]``, which produces the same choices as calling ``select_channel`` in
a loop, only faster, and ``bucket(values) -> list[list]``: the batch split per channel,
in order (what ``RecordWriter.emit_batch`` serializes). Partitioners are stateful (round robin): one instance per
RecordWriter — use ``copy()``.

``KeyGroupStreamPartitioner`` and ``bucket`` run on the compiled per-record path when it is
built (``shuffle.hotpath``); the ``*_pure`` methods are their pure-Python twins and reference.
The compiled path never falls back to its twin: both raise the same errors, and a key
selector runs once per record and call (Flink: once in the partitioner, once in the keyed
operator); its failure raises ``RuntimeError("Could not extract key from <record>")`` with
the selector's own exception as the cause (the task adds the operator's name). A batch with
several bad records fails on the first, in record order, on both paths. ``bucket_by_channel``
refuses a channel outside ``[0, num_channels)`` and lists of different lengths with
``ValueError`` (the same text on both paths). ``BroadcastPartitioner`` has ``is_broadcast``
set and, as in Flink, refuses ``select_channel``: the writer sends every
record to every channel.
"""

from __future__ import annotations

import copy as _copy
import operator
import random
from typing import Any, Callable, List, Optional

from raylink.core.field_selectors import field_getter
from raylink.core.key_groups import (
    UPPER_BOUND_MAX_PARALLELISM,
    assign_key_groups,
    assign_key_to_parallel_operator,
    assign_keys_to_operators,
    compute_default_max_parallelism,
    operator_index_table,
    stable_hash,
)
from raylink.core.reprs import record_repr
from raylink.shuffle.hotpath import NATIVE

__all__ = [
    "StreamPartitioner",
    "ForwardPartitioner",
    "RebalancePartitioner",
    "RescalePartitioner",
    "ShufflePartitioner",
    "BroadcastPartitioner",
    "GlobalPartitioner",
    "CustomPartitionerWrapper",
    "KeyGroupStreamPartitioner",
    "create_partitioner",
    "bucket_by_channel",
    "bucket_pairs_by_channel",
    "SHIP_STRATEGIES",
]


class StreamPartitioner:
    """Base class (Flink's ``StreamPartitioner``)."""

    ship_strategy = "UNDEFINED"
    is_broadcast = False
    is_pointwise = False
    # calls user code (a key selector) on every record: a writer runs it on one channel
    # too, so a key that fails at parallelism 1 fails as it would at parallelism 4 (Flink)
    reads_records = False

    def __init__(self) -> None:
        self.num_channels = 0

    def setup(self, num_channels: int) -> None:
        if num_channels < 1:
            raise ValueError(f"number of channels must be >= 1, got {num_channels}")
        self.num_channels = num_channels

    def select_channel(self, value: Any) -> int:
        raise NotImplementedError

    def select_channels(self, values: List[Any]) -> List[int]:
        sel = self.select_channel
        return [sel(v) for v in values]

    def bucket(self, values: List[Any]) -> List[List[Any]]:
        """``values`` split by ``select_channels``: one list per channel, in order."""
        return bucket_by_channel(values, self.select_channels(values), self.num_channels)

    def copy(self) -> "StreamPartitioner":
        return _copy.copy(self)

    def __str__(self) -> str:
        return self.ship_strategy

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ForwardPartitioner(StreamPartitioner):
    """Always channel 0: the one local downstream subtask."""

    ship_strategy = "FORWARD"
    is_pointwise = True

    def select_channel(self, value: Any) -> int:
        return 0

    def select_channels(self, values: List[Any]) -> List[int]:
        return [0] * len(values)


class GlobalPartitioner(StreamPartitioner):
    """Always channel 0 (all records to the first downstream subtask)."""

    ship_strategy = "GLOBAL"

    def select_channel(self, value: Any) -> int:
        return 0

    def select_channels(self, values: List[Any]) -> List[int]:
        return [0] * len(values)


class _RoundRobin(StreamPartitioner):
    """Shared round robin: the next channel after ``_next``."""

    def __init__(self) -> None:
        super().__init__()
        self._next = -1

    def select_channel(self, value: Any) -> int:
        nxt = self._next + 1
        if nxt >= self.num_channels:
            nxt = 0
        self._next = nxt
        return nxt

    def select_channels(self, values: List[Any]) -> List[int]:
        k = len(values)
        n = self.num_channels
        if k == 0:
            return []
        start = (self._next + 1) % n
        self._next = (self._next + k) % n
        if n == 1:
            return [0] * k
        rot = list(range(start, n)) + list(range(start))
        if k <= n:
            return rot[:k]
        return (rot * (k // n + 1))[:k]


class RebalancePartitioner(_RoundRobin):
    """Round robin over all channels, starting at a random channel (as Flink)."""

    ship_strategy = "REBALANCE"

    def setup(self, num_channels: int) -> None:
        super().setup(num_channels)
        self._next = random.randrange(num_channels)


class RescalePartitioner(_RoundRobin):
    """Round robin over the (pointwise-connected) channels, starting at 0."""

    ship_strategy = "RESCALE"
    is_pointwise = True


class ShufflePartitioner(StreamPartitioner):
    """Uniformly random channel per record."""

    ship_strategy = "SHUFFLE"

    def __init__(self, seed: Optional[int] = None) -> None:
        super().__init__()
        self._random = random.Random(seed)

    def select_channel(self, value: Any) -> int:
        return self._random.randrange(self.num_channels)

    def select_channels(self, values: List[Any]) -> List[int]:
        return self._random.choices(range(self.num_channels), k=len(values))

    def copy(self) -> "ShufflePartitioner":
        c = _copy.copy(self)
        c._random = random.Random()
        return c


class BroadcastPartitioner(StreamPartitioner):
    """Every record to every channel (``is_broadcast``; the writer fans out)."""

    ship_strategy = "BROADCAST"
    is_broadcast = True

    def select_channel(self, value: Any) -> int:
        raise NotImplementedError("Broadcast partitioner does not support select channels.")

    def select_channels(self, values: List[Any]) -> List[int]:
        raise NotImplementedError("Broadcast partitioner does not support select channels.")

    def all_channels(self) -> List[int]:
        return list(range(self.num_channels))


_CHANNEL_CACHE_SIZE = 1 << 16


class _ChannelOutOfRange(Exception):
    pass


def _out_of_range(value: Any) -> None:
    raise _ChannelOutOfRange


def _check_channels(channels: List[int], num_channels: int) -> None:
    """Raise the compiled path's ``ValueError`` for the first channel outside ``[0, num_channels)``."""
    for i, c in enumerate(channels):
        if not 0 <= c < num_channels:
            raise ValueError(f"record {i} has channel {c!r}, not one in [0, {num_channels})")


def bucket_by_channel_pure(values: List[Any], channels: List[int], num_channels: int) -> List[List[Any]]:
    """``buckets[c]``: the values whose channel is ``c``, in order (the pure-Python twin)."""
    if len(values) != len(channels):
        raise ValueError(f"{len(values)} values but {len(channels)} channels")
    buckets: List[List[Any]] = [[] for _ in range(num_channels)]
    # a channel in [-n, 0) or [n, 2n) picks a refusal, any other one past the list raises
    # IndexError: no check per record (a negative channel would silently pick a bucket)
    appends = [b.append for b in buckets] + [_out_of_range] * max(num_channels, 0)
    try:
        for v, c in zip(values, channels):
            appends[c](v)
    except (IndexError, _ChannelOutOfRange):
        _check_channels(channels, num_channels)
        raise
    return buckets


def bucket_pairs_by_channel_pure(
    values: List[Any], timestamps: List[Any], channels: List[int], num_channels: int
) -> "tuple[List[List[Any]], List[List[Any]]]":
    """``bucket_by_channel`` of ``values`` and of their ``timestamps`` alike (the pure-Python twin)."""
    if len(values) != len(channels) or len(values) != len(timestamps):
        raise ValueError(f"{len(values)} values but {len(timestamps)} timestamps and {len(channels)} channels")
    return (
        bucket_by_channel_pure(values, channels, num_channels),
        bucket_by_channel_pure(timestamps, channels, num_channels),
    )


bucket_by_channel = bucket_by_channel_pure if NATIVE is None else NATIVE.bucket_by_channel
bucket_pairs_by_channel = bucket_pairs_by_channel_pure if NATIVE is None else NATIVE.bucket_pairs_by_channel


def _as_key_selector(key_selector: Any) -> Callable[[Any], Any]:
    if key_selector is None:
        raise ValueError("a key selector is required")
    if isinstance(key_selector, int):
        return operator.itemgetter(key_selector)
    get_key = getattr(key_selector, "get_key", None)  # a KeySelector object
    if get_key is not None and callable(get_key):
        return field_getter(get_key)
    if not callable(key_selector):
        raise TypeError(f"key selector must be callable, got {type(key_selector).__qualname__}")
    return field_getter(key_selector)


def key_error(value: Any) -> RuntimeError:
    """What a key selector's failure on ``value`` raises (its exception the cause), on both paths."""
    return RuntimeError(f"Could not extract key from {record_repr(value)}")


def _extract_keys(
    key_selector: Callable[[Any], Any], values: List[Any], check: Optional[Callable[[List[Any]], Any]] = None
) -> List[Any]:
    """``key_selector`` of every value, called once each. When it raises, ``check`` (if given)
    runs first on the keys of the records before the failing one -- their errors come first, as
    in a record-by-record loop -- and then ``key_error`` of that record, from the selector's
    exception."""
    keys: List[Any] = []
    try:
        keys.extend(map(key_selector, values))  # extend keeps the keys before a failing record
        return keys
    except Exception as e:
        error = e
    if check is not None:
        check(keys)
    raise key_error(values[len(keys)]) from error


_ALWAYS_HASHED = frozenset((str, int, bool))  # their stable hash never fails (a lone surrogate neither)


def _hash_keys(keys: List[Any]) -> None:
    """Hash every key stably, in order (raising for the first that cannot be); a batch of only
    str and int keys is not hashed at all (one C-level pass over their types)."""
    if not _ALWAYS_HASHED.issuperset(map(type, keys)):
        assign_key_groups(keys, UPPER_BOUND_MAX_PARALLELISM)


class KeyGroupStreamPartitioner(StreamPartitioner):
    """Hash partitioning through key groups (Flink's ``KeyGroupStreamPartitioner``).

    ``max_parallelism`` must equal the downstream operator's max parallelism;
    ``None`` means Flink's default for the downstream parallelism.
    """

    ship_strategy = "HASH"
    reads_records = True

    def __init__(self, key_selector: Any, max_parallelism: Optional[int] = None) -> None:
        super().__init__()
        self.key_selector = _as_key_selector(key_selector)
        if max_parallelism is not None and not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
            raise ValueError(f"max parallelism must be in [1, {UPPER_BOUND_MAX_PARALLELISM}], got {max_parallelism}")
        self.max_parallelism = max_parallelism
        self._table: List[int] = []
        # key -> channel for keys seen recently: most streams repeat their keys, and a dict
        # lookup is several times cheaper than two murmur hashes (bounded, cleared when full)
        self._channel_of: dict = {}

    def setup(self, num_channels: int) -> None:
        super().setup(num_channels)
        if self.max_parallelism is None:
            self.max_parallelism = compute_default_max_parallelism(num_channels)
        if self.max_parallelism < num_channels:
            raise ValueError("Maximum parallelism must not be smaller than parallelism.")
        self._table = operator_index_table(self.max_parallelism, num_channels)
        self._channel_of = {}  # channels of another number of channels

    def select_channel(self, value: Any) -> int:
        try:
            key = self.key_selector(value)
        except Exception as e:
            raise key_error(value) from e
        return self._channel_of_key(key)

    def _channel_of_key(self, key: Any) -> int:
        """The channel of one key, through the batch path's key -> channel cache (a record
        emitted alone, or a batch holding an unhashable key: as the compiled loop, key by key)."""
        cache = self._channel_of
        try:  # (one channel too: its key is hashed once, as channel selection would)
            channel = cache.get(key)
        except TypeError:  # an unhashable key: no cache
            return assign_key_to_parallel_operator(key, self.max_parallelism, self.num_channels)
        if channel is None:
            channel = assign_key_to_parallel_operator(key, self.max_parallelism, self.num_channels)
            if len(cache) >= _CHANNEL_CACHE_SIZE:
                cache.clear()
            cache[key] = channel
        return channel

    def select_channels_pure(self, values: List[Any]) -> List[int]:
        """``select_channels`` on the pure-Python path (the reference of the compiled one)."""
        if type(values) is not list:
            values = list(values)
        keys = _extract_keys(self.key_selector, values, self._first_key_failure)
        try:
            return self._channels_of_keys(keys)
        except Exception as e:
            error = e
        self._first_key_failure(keys)  # the compiled loop's error: the first failing key's, in order
        raise error

    def _first_key_failure(self, keys: List[Any]) -> None:
        """Raise what the compiled loop raises for the first key of ``keys`` that fails (its
        cache lookup, then its stable hash), if one does."""
        cache = self._channel_of
        for key in keys:
            try:
                hit = cache.get(key)
            except TypeError:  # unhashable: hashed stably, not cached
                hit = None
            if hit is None:
                stable_hash(key)

    def _channels_of_keys(self, keys: List[Any]) -> List[int]:
        cache = self._channel_of
        try:
            channels = list(map(cache.get, keys))
        except TypeError:  # an unhashable key (not cached): key by key, as the compiled loop
            return list(map(self._channel_of_key, keys))
        if None not in channels:
            return channels
        missing = [i for i, c in enumerate(channels) if c is None]
        computed = assign_keys_to_operators(
            [keys[i] for i in missing], self.max_parallelism, self.num_channels, self._table
        )
        if len(cache) + len(missing) > _CHANNEL_CACHE_SIZE:
            cache.clear()
        for i, channel in zip(missing, computed):
            channels[i] = channel
            cache[keys[i]] = channel
        return channels

    def check_keys_pure(self, values: List[Any]) -> None:
        """Every record's key extracted and hashed stably, nothing kept (the pure twin of the
        compiled ``check_keys``: what a keyed exchange to one channel does)."""
        _hash_keys(_extract_keys(self.key_selector, values, _hash_keys))

    def bucket_pure(self, values: List[Any]) -> List[List[Any]]:
        if type(values) is not list:
            values = list(values)
        if self.num_channels == 1:  # every key extracted and hashed as for more channels: one bucket
            self.check_keys_pure(values)
            return [values]
        return bucket_by_channel_pure(values, self.select_channels_pure(values), self.num_channels)

    if NATIVE is None:
        select_channels = select_channels_pure
        bucket = bucket_pure
    else:

        def select_channels(self, values: List[Any]) -> List[int]:
            if type(values) is not list:
                values = list(values)
            return NATIVE.select_key_channels(
                self.key_selector,
                values,
                self.max_parallelism,
                self._table,
                self._channel_of,
                _CHANNEL_CACHE_SIZE,
                stable_hash,
                key_error,
            )

        def bucket(self, values: List[Any]) -> List[List[Any]]:
            if type(values) is not list:
                values = list(values)
            if self.num_channels == 1:  # every key extracted and hashed as for more channels: one bucket
                NATIVE.check_keys(self.key_selector, values, stable_hash, key_error)
                return [values]
            return NATIVE.bucket_by_key(
                self.key_selector,
                values,
                self.max_parallelism,
                self._table,
                self._channel_of,
                _CHANNEL_CACHE_SIZE,
                stable_hash,
                self.num_channels,
                key_error,
            )

    def __repr__(self) -> str:
        return f"KeyGroupStreamPartitioner(max_parallelism={self.max_parallelism})"


class CustomPartitionerWrapper(StreamPartitioner):
    """User partitioning: ``partitioner_fn(key, num_partitions) -> channel``."""

    ship_strategy = "CUSTOM"
    reads_records = True

    def __init__(self, partitioner_fn: Any, key_selector: Any) -> None:
        super().__init__()
        partition = getattr(partitioner_fn, "partition", None)  # a Partitioner object
        self.partitioner_fn = partition if callable(partition) else partitioner_fn
        if not callable(self.partitioner_fn):
            raise TypeError("custom partitioner must be callable (key, num_partitions) -> int")
        self.key_selector = _as_key_selector(key_selector)

    def _bad(self, channel: Any) -> ValueError:
        return ValueError(f"custom partitioner returned {channel!r}, not a channel in [0, {self.num_channels})")

    def select_channel(self, value: Any) -> int:
        try:
            key = self.key_selector(value)
        except Exception as e:
            raise key_error(value) from e
        c = self.partitioner_fn(key, self.num_channels)
        if type(c) is not int or not 0 <= c < self.num_channels:
            raise self._bad(c)
        return c

    def select_channels(self, values: List[Any]) -> List[int]:
        if not values:
            return []
        keys = _extract_keys(self.key_selector, values)
        fn = self.partitioner_fn
        n = self.num_channels
        chans = [fn(k, n) for k in keys]
        if set(map(type, chans)) != {int} or min(chans) < 0 or max(chans) >= n:
            bad = next(c for c in chans if type(c) is not int or not 0 <= c < n)
            raise self._bad(bad)
        return chans


SHIP_STRATEGIES = ("FORWARD", "REBALANCE", "RESCALE", "SHUFFLE", "BROADCAST", "GLOBAL", "HASH", "CUSTOM")


def create_partitioner(name: Any, **kwargs: Any) -> StreamPartitioner:
    """Build a partitioner from a ship-strategy name (or a spec with ``ship_strategy``).

    kwargs: ``key_selector`` (HASH, CUSTOM), ``max_parallelism`` (HASH),
    ``partitioner_fn`` or ``custom_partitioner`` (CUSTOM), ``seed`` (SHUFFLE).
    A spec object's ``key_selector``/``custom_partitioner``/``max_parallelism``
    attributes are used unless overridden by kwargs.
    """
    if not isinstance(name, str):
        spec = name
        name = getattr(spec, "ship_strategy", None)
        if name is None:
            raise TypeError(f"not a ship strategy name or partitioner spec: {spec!r}")
        for attr in ("key_selector", "custom_partitioner", "max_parallelism"):
            val = getattr(spec, attr, None)
            if val is not None:
                kwargs.setdefault(attr, val)
    strategy = name.upper()
    if strategy == "FORWARD":
        return ForwardPartitioner()
    if strategy == "REBALANCE":
        return RebalancePartitioner()
    if strategy == "RESCALE":
        return RescalePartitioner()
    if strategy == "SHUFFLE":
        return ShufflePartitioner(kwargs.get("seed"))
    if strategy == "BROADCAST":
        return BroadcastPartitioner()
    if strategy == "GLOBAL":
        return GlobalPartitioner()
    if strategy == "HASH":
        return KeyGroupStreamPartitioner(kwargs.get("key_selector"), kwargs.get("max_parallelism"))
    if strategy == "CUSTOM":
        fn = kwargs.get("partitioner_fn") or kwargs.get("custom_partitioner")
        if fn is None:
            raise ValueError("CUSTOM partitioning needs partitioner_fn (or custom_partitioner)")
        return CustomPartitionerWrapper(fn, kwargs.get("key_selector"))
    raise ValueError(f"unknown ship strategy {name!r}; expected one of {SHIP_STRATEGIES}")
