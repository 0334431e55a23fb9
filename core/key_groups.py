"""Key groups: Flink's ``KeyGroupRangeAssignment``, ``KeyGroupRange`` and ``MathUtils.murmurHash``.

    key_group      = murmur_hash(stable_hash(key)) % max_parallelism
    operator_index = key_group * parallelism // max_parallelism

``murmur_hash`` is exactly Flink's ``MathUtils.murmurHash(int)`` (MurmurHash3
x86_32 of the four little-endian bytes of the int, seed 0, made
non-negative). ``stable_hash`` stands in for Java's ``hashCode()``: an
unsigned 32-bit value that is the same in every process (Python salts
``hash()`` of str/bytes/datetime per process, so it is not used for those) and
consistent with ``==`` (``1 == 1.0 == True`` hash alike, a namedtuple like the
equal tuple):

* ``str``: MurmurHash3 of the UTF-8 bytes, a lone surrogate (``json.loads('"\\ud800"')``: any
  Python str, as Flink hashes any Java string) encoded as its three bytes ('surrogatepass';
  a str without one hashes as plain UTF-8, so key groups never change for it; mmh3 is never
  handed a str it cannot encode, which crashes it); ``bytes``/``bytearray``: MurmurHash3;
* ``int``/``bool``/``float``/``Decimal``/``Fraction``: Python's numeric hash
  (unsalted, equal for equal numbers) folded to 32 bits — for ints in the
  Java int range except -1 this equals Java's ``Integer.hashCode``, so such
  keys land in the same key group as in Flink; NaN hashes to a constant;
* ``tuple`` (incl. namedtuple): Java's ``List.hashCode`` combination
  ``h = 31*h + stable_hash(item)`` (a ``None`` item hashes to 0);
  ``frozenset``/``set``: sum of item hashes (order independent);
* ``datetime``/``date``/``time``: the hash of their ISO text (aware datetimes
  in UTC); ``Enum`` members: ``(class name, member name)``; dataclasses:
  ``(class name, field values)``;
* anything else: MurmurHash3 of ``pickle.dumps(key, protocol=4)`` — stable
  as long as equal keys pickle to equal bytes (use a key selector returning a
  str/int/tuple otherwise).

A ``None`` key raises ``ValueError("Assigned key must not be null!")``.
The batch functions (``assign_key_groups``, ``assign_keys_to_operators``) run
the str-only and int-only cases as chains of C-level ``map`` calls.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import operator
import pickle
import struct
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Iterator, List, Sequence

import mmh3

__all__ = [
    "DEFAULT_LOWER_BOUND_MAX_PARALLELISM",
    "UPPER_BOUND_MAX_PARALLELISM",
    "KeyGroupRange",
    "murmur_hash",
    "stable_hash",
    "assign_to_key_group",
    "compute_key_group_for_key_hash",
    "compute_operator_index_for_key_group",
    "assign_key_to_parallel_operator",
    "compute_key_group_range_for_operator_index",
    "compute_default_max_parallelism",
    "check_parallelism_preconditions",
    "assign_key_groups",
    "assign_keys_to_operators",
    "operator_index_table",
]

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7
UPPER_BOUND_MAX_PARALLELISM = 1 << 15

_NULL_KEY = "Assigned key must not be null!"
_U32 = 0xFFFFFFFF
_I31 = 0x7FFFFFFF
_mmh3 = mmh3.hash
_pack_u32 = struct.Struct("<I").pack
_pack_i32 = struct.Struct("<i").pack
_u32_and = _U32.__and__
_i31_and = _I31.__and__
_NAN_HASH = 0x7FF80000  # Java's Double.hashCode(NaN)
_encode_surrogatepass = operator.methodcaller("encode", "utf-8", "surrogatepass")


def _str_hash(s: str) -> int:
    """MurmurHash3 (signed, as ``mmh3.hash``) of ``s``'s UTF-8 bytes, lone surrogates
    encoded as their three bytes ('surrogatepass'; what the compiled path hashes too)."""
    if s.isascii():
        return _mmh3(s)
    return _mmh3(s.encode("utf-8", "surrogatepass"))


def _str_hashes(keys: Sequence[str]) -> Iterator[int]:
    """``map(_str_hash, keys)``: one C-level ``map`` when every key is ASCII."""
    if all(map(str.isascii, keys)):
        return map(_mmh3, keys)
    return map(_mmh3, map(_encode_surrogatepass, keys))


def murmur_hash(code: int) -> int:
    """Flink's ``MathUtils.murmurHash(int)``: non-negative mix of a 32-bit int."""
    return abs(_mmh3(_pack_u32(code & _U32))) & _I31


def stable_hash(key: Any) -> int:
    """Process-independent 32-bit hash (unsigned) consistent with ``==``."""
    t = type(key)
    if t is str:  # _str_hash, inlined: the common case
        return (_mmh3(key) if key.isascii() else _mmh3(key.encode("utf-8", "surrogatepass"))) & _U32
    if t is int or t is bool:
        return hash(key) & _U32
    if key is None:
        raise ValueError(_NULL_KEY)
    return _stable_hash_other(key, t)


def _item_hash(x: Any) -> int:
    return 0 if x is None else stable_hash(x)


def _stable_hash_other(key: Any, t: type) -> int:
    if t is tuple or isinstance(key, tuple):
        h = 1
        for x in key:
            h = (31 * h + _item_hash(x)) & _U32
        return h
    if t is float:
        return _NAN_HASH if key != key else hash(key) & _U32
    if t is bytes or t is bytearray or t is memoryview:
        return _mmh3(bytes(key)) & _U32
    if isinstance(key, (int, Decimal, Fraction)):  # IntEnum, bool subclasses, numbers
        if key != key:
            return _NAN_HASH
        return hash(key) & _U32
    if isinstance(key, str):
        return _str_hash(str.__str__(key)) & _U32
    if isinstance(key, bytes):
        return _mmh3(bytes(key)) & _U32
    if isinstance(key, float):
        return _NAN_HASH if key != key else hash(key) & _U32
    if isinstance(key, (frozenset, set)):
        return sum(map(_item_hash, key)) & _U32
    if isinstance(key, _dt.datetime):
        if key.tzinfo is not None and key.utcoffset() is not None:
            key = key.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        return _str_hash("datetime:" + key.isoformat()) & _U32
    if isinstance(key, (_dt.date, _dt.time)):
        return _str_hash(type(key).__name__ + ":" + key.isoformat()) & _U32  # any str: a class name too
    if isinstance(key, _dt.timedelta):
        return stable_hash((key.days, key.seconds, key.microseconds))
    if isinstance(key, enum.Enum):
        return stable_hash((f"{t.__module__}.{t.__qualname__}", key.name))
    if dataclasses.is_dataclass(key) and not isinstance(key, type):
        fields = tuple(getattr(key, f.name) for f in dataclasses.fields(key))
        return stable_hash((f"{t.__module__}.{t.__qualname__}", fields))
    try:
        data = pickle.dumps(key, protocol=4)
    except Exception as e:
        raise TypeError(f"Cannot hash a key of type '{t.__qualname__}' stably: {e}") from e
    return _mmh3(data) & _U32


def compute_key_group_for_key_hash(key_hash: int, max_parallelism: int) -> int:
    """``murmur_hash(key_hash) % max_parallelism``."""
    return murmur_hash(key_hash) % max_parallelism


def assign_to_key_group(key: Any, max_parallelism: int) -> int:
    """Key group of ``key`` in ``[0, max_parallelism)``."""
    if key is None:
        raise ValueError(_NULL_KEY)
    return (abs(_mmh3(_pack_u32(stable_hash(key)))) & _I31) % max_parallelism


def compute_operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """Subtask owning ``key_group``: ``key_group * parallelism // max_parallelism``."""
    return key_group * parallelism // max_parallelism


def assign_key_to_parallel_operator(key: Any, max_parallelism: int, parallelism: int) -> int:
    """Subtask index for ``key``."""
    return assign_to_key_group(key, max_parallelism) * parallelism // max_parallelism


def check_parallelism_preconditions(parallelism: int) -> None:
    if not 0 < parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(f"Operator parallelism not within bounds: {parallelism}")


def compute_key_group_range_for_operator_index(
    max_parallelism: int, parallelism: int, operator_index: int
) -> "KeyGroupRange":
    """Key groups of subtask ``operator_index`` (Flink's formula, end inclusive)."""
    check_parallelism_preconditions(parallelism)
    check_parallelism_preconditions(max_parallelism)
    if max_parallelism < parallelism:
        raise ValueError("Maximum parallelism must not be smaller than parallelism.")
    if not 0 <= operator_index < parallelism:
        raise ValueError(f"operator index {operator_index} not in [0, {parallelism})")
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def _round_up_to_power_of_two(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def compute_default_max_parallelism(operator_parallelism: int) -> int:
    """Flink's default max parallelism: ``min(max(pow2ceil(1.5 p), 128), 32768)``."""
    check_parallelism_preconditions(operator_parallelism)
    return min(
        max(
            _round_up_to_power_of_two(operator_parallelism + operator_parallelism // 2),
            DEFAULT_LOWER_BOUND_MAX_PARALLELISM,
        ),
        UPPER_BOUND_MAX_PARALLELISM,
    )


@dataclass(frozen=True)
class KeyGroupRange:
    """Inclusive range ``[start_key_group, end_key_group]`` (empty if end < start)."""

    start_key_group: int
    end_key_group: int

    @property
    def number_of_key_groups(self) -> int:
        return max(0, self.end_key_group - self.start_key_group + 1)

    def __len__(self) -> int:
        return self.number_of_key_groups

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start_key_group <= key_group <= self.end_key_group

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start_key_group, self.end_key_group + 1))

    def intersection(self, other: "KeyGroupRange") -> "KeyGroupRange":
        start = max(self.start_key_group, other.start_key_group)
        end = min(self.end_key_group, other.end_key_group)
        return KeyGroupRange(start, end) if start <= end else EMPTY_KEY_GROUP_RANGE

    # names used by other layers
    @property
    def start(self) -> int:
        return self.start_key_group

    @property
    def end(self) -> int:
        return self.end_key_group

    @classmethod
    def of(cls, start: int, end: int) -> "KeyGroupRange":
        return cls(start, end)


EMPTY_KEY_GROUP_RANGE = KeyGroupRange(0, -1)


# -- batch paths -------------------------------------------------------------------
def _hash_bytes_iter(keys: Sequence[Any]):
    """Iterator of 4-byte packed stable hashes of ``keys``: the first key that cannot be
    hashed (None, ...) raises, in order, when the iterator reaches it."""
    types = set(map(type, keys))
    if len(types) == 1:
        (t,) = types
        if t is str:
            return map(_pack_i32, _str_hashes(keys))
        if t is int:
            return map(_pack_u32, map(_u32_and, map(hash, keys)))
    return map(_pack_u32, map(stable_hash, keys))


def _key_group_iter(keys: Sequence[Any], max_parallelism: int):
    murmurs = map(abs, map(_mmh3, _hash_bytes_iter(keys)))
    if max_parallelism & (max_parallelism - 1) == 0:
        # power of two: abs(h) & (maxP - 1) == (abs(h) & 0x7FFFFFFF) % maxP, MIN_VALUE included
        return map((max_parallelism - 1).__and__, murmurs)
    return map(max_parallelism.__rmod__, map(_i31_and, murmurs))


def assign_key_groups(keys: Sequence[Any], max_parallelism: int) -> List[int]:
    """``[assign_to_key_group(k, max_parallelism) for k in keys]``, fast."""
    return list(_key_group_iter(keys, max_parallelism))


def operator_index_table(max_parallelism: int, parallelism: int) -> List[int]:
    """``table[key_group]`` = subtask index owning that key group."""
    return [kg * parallelism // max_parallelism for kg in range(max_parallelism)]


def assign_keys_to_operators(
    keys: Sequence[Any], max_parallelism: int, parallelism: int, table: "List[int] | None" = None
) -> List[int]:
    """``[assign_key_to_parallel_operator(k, maxP, p) for k in keys]``, fast."""
    if table is None:
        table = operator_index_table(max_parallelism, parallelism)
    return list(map(table.__getitem__, _key_group_iter(keys, max_parallelism)))
