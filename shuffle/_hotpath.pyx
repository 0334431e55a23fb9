# cython: language_level=3, initializedcheck=False
"""The compiled per-record path: the per-batch framework loops of the shuffle and of the
built-in operators, in C (Cython). Loaded through :mod:`raylink.shuffle.hotpath`, which falls
back to the pure-Python twins when this module is not built or ``RAYLINK_PURE_PYTHON=1``.

Every function here has a pure-Python twin that stays the reference; the hot-path tests
(``tests/test_shuffle_hotpath.py``) assert both give the same channels, buckets, records
and state. What it holds, and the twin of each:

* ``murmur_hash`` / ``key_group_of_hash``: Flink's ``MathUtils.murmurHash(int)`` and
  ``KeyGroupRangeAssignment.computeKeyGroupForKeyHash`` (twins: ``core.key_groups``);
* ``select_key_channels`` / ``bucket_by_key``: ``KeyGroupStreamPartitioner``'s channel
  selection for a batch (key selector, key -> channel cache, stable hash, murmur, key group,
  operator index) and the same fused with bucketing per channel (twins:
  ``shuffle.partitioners``);
* ``bucket_by_channel`` / ``bucket_pairs_by_channel``: a batch (with its records' timestamps)
  split by precomputed channels (``RecordWriter.emit_batch`` / ``emit_timestamped_batch``;
  twins: ``shuffle.partitioners``);
* ``min_max``: the least and the greatest of a list in one pass (a window operator's run of
  timestamps; twin: ``operators.window``);
* ``is_flat_batch``: scalars, or tuples of scalars and of such tuples nested up to
  ``codec.FLAT_NESTING`` deep, by exact type (``codec.is_flat_batch``);
* ``conforms_flat``: whether a batch is exactly of a flat declared type, widths included, so it
  travels as it is (``codec.DeclaredFlatType.conform_batch``; twin ``codec.conforms_flat_pure``);
* ``reduce_batch`` / ``sum_pairs_batch``: the rolling reduce's loop (``operators.reduce``), over
  the heap's layers or the RocksDB backend's cache;
* ``keyed_map_batch`` / ``keyed_flat_map_batch`` / ``keyed_filter_batch``: the loops of the
  keyed map/flat_map/filter that set the backend's current key per record
  (``operators.basic``).
* ``state_db_keys`` / ``state_entries``: the RocksDB keyed backend's batch steps (a batch's key
  groups and key bytes, the sorted write batch; twins: ``state.rocksdb_state``).

Anything a function cannot decide by exact types (a key of another type, a subclass) it hands
to the Python callable it was given, so both paths agree by construction. Functions raise
what the user's callables raise, each called once per record; the key loops take the caller's
``key_error(record)``: the exception raised, with the key selector's own as its cause, when
the selector fails on a record (the worded error of the pure twin: nothing is rerun). A str
key is hashed as its UTF-8 bytes, a lone surrogate as its three bytes ('surrogatepass': every
Python str hashes, as in ``core.key_groups``).

Inputs are checked, not trusted: indexing keeps Python's bounds checks (no ``boundscheck``
or ``wraparound`` directive), a channel outside ``[0, num_channels)`` -- negative, too large,
beyond 64 bits -- raises ``ValueError`` naming the record and the channel (the twins say the
same), as do lists of mismatched lengths and a key-group table shorter than the max
parallelism. No state of its own: thread-safe as the objects passed in are (the task thread
owns them).
"""

from cpython.dict cimport PyDict_SetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject, PyObject_Hash
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object unicode, Py_ssize_t* size) except NULL
    long long PyLong_AsLongLongAndOverflow(object o, int* overflow) except? -1
    PyObject* PyDict_GetItemWithError(object mp, object key) except? NULL
    bint PyUnicode_IS_ASCII(object o)
    void* PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)


cdef inline uint32_t _rotl32(uint32_t x, int r) noexcept nogil:
    return (x << r) | (x >> (32 - r))


cdef inline uint32_t _fmix32(uint32_t h) noexcept nogil:
    h ^= h >> 16
    h *= 0x85EBCA6BU
    h ^= h >> 13
    h *= 0xC2B2AE35U
    h ^= h >> 16
    return h


cdef inline uint32_t _mix_k(uint32_t k) noexcept nogil:
    k *= 0xCC9E2D51U
    k = _rotl32(k, 15)
    k *= 0x1B873593U
    return k


cdef uint32_t _murmur3_32(const uint8_t* data, Py_ssize_t n) noexcept nogil:
    """MurmurHash3 x86_32, seed 0 (what ``mmh3.hash`` computes, as unsigned)."""
    cdef uint32_t h = 0
    cdef uint32_t k
    cdef Py_ssize_t i
    cdef Py_ssize_t blocks = n // 4
    for i in range(blocks):
        k = (<uint32_t>data[4 * i]) | ((<uint32_t>data[4 * i + 1]) << 8) \
            | ((<uint32_t>data[4 * i + 2]) << 16) | ((<uint32_t>data[4 * i + 3]) << 24)
        h ^= _mix_k(k)
        h = _rotl32(h, 13)
        h = h * 5 + 0xE6546B64U
    cdef const uint8_t* tail = data + blocks * 4
    cdef int rest = n & 3
    k = 0
    if rest == 3:
        k ^= (<uint32_t>tail[2]) << 16
    if rest >= 2:
        k ^= (<uint32_t>tail[1]) << 8
    if rest >= 1:
        k ^= <uint32_t>tail[0]
        h ^= _mix_k(k)
    h ^= <uint32_t>n
    return _fmix32(h)


cdef inline int64_t _murmur_int(uint32_t code) noexcept nogil:
    """Flink's ``MathUtils.murmurHash(int)``: non-negative (``abs``, MIN_VALUE -> 0)."""
    cdef uint32_t h = _mix_k(code)
    h = _rotl32(h, 13)
    h = h * 5 + 0xE6546B64U
    h ^= 4
    h = _fmix32(h)
    cdef int64_t s = <int32_t>h
    if s < 0:
        s = -s
    return s & 0x7FFFFFFF


def murmur_hash(code: int) -> int:
    """Flink's ``MathUtils.murmurHash(int)`` of the low 32 bits of ``code``."""
    return _murmur_int(<uint32_t>(code & 0xFFFFFFFF))


def key_group_of_hash(key_hash: int, int max_parallelism) -> int:
    """``murmur_hash(key_hash) % max_parallelism``."""
    return _murmur_int(<uint32_t>(key_hash & 0xFFFFFFFF)) % max_parallelism


def assign_to_key_group(stable_hash, key, int max_parallelism) -> int:
    """``core.key_groups.assign_to_key_group(key, max_parallelism)``, str, int and tuple keys hashed
    here (``stable_hash`` first: a ``partial`` of it is the state backend's per-key function); a
    ``None`` key reaches ``stable_hash``, which raises Flink's null-key error."""
    return _murmur_int(_stable_hash(key, stable_hash)) % max_parallelism


cdef uint32_t _str_hash(object key) except? 0xFFFFFFFF:
    """MurmurHash3 of a str's UTF-8 bytes, a lone surrogate as its three bytes ('surrogatepass',
    as ``core.key_groups``: the same bytes as UTF-8 for every str without one)."""
    cdef Py_ssize_t size
    cdef const char* data
    if PyUnicode_IS_ASCII(key):
        return _murmur3_32(<const uint8_t*>PyUnicode_DATA(key), PyUnicode_GET_LENGTH(key))
    try:
        data = PyUnicode_AsUTF8AndSize(key, &size)
    except UnicodeEncodeError:
        encoded = (<str>key).encode("utf-8", "surrogatepass")
        return _murmur3_32(<const uint8_t*><const char*>encoded, len(encoded))
    return _murmur3_32(<const uint8_t*>data, size)


cdef inline uint32_t _stable_hash(object key, object stable_hash) except? 0xFFFFFFFF:
    """``core.key_groups.stable_hash`` for str, int and tuple by exact type, else the Python one."""
    cdef type t = type(key)
    if t is str:
        return _str_hash(key)
    if t is int or t is bool:
        return <uint32_t>PyObject_Hash(key)
    if t is tuple:
        return _tuple_hash(<tuple>key, stable_hash, 0)
    return <uint32_t>(stable_hash(key) & 0xFFFFFFFF)


#: tuples nested deeper than this are hashed by the Python function (whose recursion limit turns a
#: pathological key into a RecursionError, where C recursion would overflow the thread's stack)
cdef int _MAX_TUPLE_DEPTH = 16


cdef uint32_t _tuple_hash(tuple key, object stable_hash, int depth) except? 0xFFFFFFFF:
    """Java's ``List.hashCode`` of the items' stable hashes, a ``None`` item as 0 (the tuple case
    of ``core.key_groups.stable_hash``; uint32 arithmetic wraps as its ``& 0xFFFFFFFF``)."""
    cdef uint32_t h = 1
    for item in key:
        if item is None:
            h = 31 * h
        elif type(item) is tuple:
            if depth >= _MAX_TUPLE_DEPTH:
                h = 31 * h + <uint32_t>(stable_hash(item) & 0xFFFFFFFF)
            else:
                h = 31 * h + _tuple_hash(<tuple>item, stable_hash, depth + 1)
        else:
            h = 31 * h + _stable_hash(item, stable_hash)
    return h


cdef inline Py_ssize_t _channel_of(
    object key, int max_parallelism, list table, dict cache, Py_ssize_t cache_size, object stable_hash
) except -1:
    cdef int64_t group
    if type(key) is str and PyUnicode_IS_ASCII(key):
        # hashed where it lies (its bytes are its UTF-8): cheaper than the cache's probe, which
        # compares the key with the stored one, often out of the CPU's caches in a busy process
        group = _murmur_int(_murmur3_32(<const uint8_t*>PyUnicode_DATA(key), PyUnicode_GET_LENGTH(key))) % max_parallelism
        return <Py_ssize_t><object>PyList_GET_ITEM(table, group)
    cdef PyObject* hit
    try:
        hit = PyDict_GetItemWithError(cache, key)
    except TypeError:  # an unhashable key (a list): hashed stably, not remembered (as the pure twin)
        group = _murmur_int(_stable_hash(key, stable_hash)) % max_parallelism
        return <Py_ssize_t><object>PyList_GET_ITEM(table, group)
    if hit != NULL:
        return <Py_ssize_t><object>hit
    group = _murmur_int(_stable_hash(key, stable_hash)) % max_parallelism
    channel = <object>PyList_GET_ITEM(table, group)
    if len(cache) >= cache_size:
        cache.clear()
    PyDict_SetItem(cache, key, channel)
    return <Py_ssize_t>channel


cdef int _check_table(list table, int max_parallelism) except -1:
    """``table[group]`` is read unchecked for every group in ``[0, max_parallelism)``."""
    if max_parallelism < 1 or PyList_GET_SIZE(table) < max_parallelism:
        raise ValueError(f"a key-group table of {PyList_GET_SIZE(table)} entries for max parallelism {max_parallelism}")
    return 0


cdef object _bad_channel(Py_ssize_t i, object channel, Py_ssize_t num_channels):
    return ValueError(f"record {i} has channel {channel!r}, not one in [0, {num_channels})")


def select_key_channels(
    key_of,
    list values,
    int max_parallelism,
    list table,
    dict cache,
    Py_ssize_t cache_size,
    stable_hash,
    key_error=None,
) -> list:
    """The channel of every record: ``table[murmur(stable_hash(key_of(v))) % max_parallelism]``,
    remembered per key in ``cache`` (cleared when it holds ``cache_size`` keys) unless an ASCII
    ``str`` (hashed directly) or unhashable. ``key_error(v)``: raised (from the selector's
    exception) when ``key_of(v)`` raises; None: the selector's exception as it is."""
    _check_table(table, max_parallelism)
    cdef Py_ssize_t i, n = PyList_GET_SIZE(values)
    cdef list out = [None] * n
    cdef object v = None
    cdef bint extracting = False
    try:
        for i in range(n):
            v = values[i]
            extracting = True
            key = key_of(v)
            extracting = False
            out[i] = _channel_of(key, max_parallelism, table, cache, cache_size, stable_hash)
    except Exception as e:
        if extracting and key_error is not None:
            raise key_error(v) from e
        raise
    return out


def check_keys(key_of, list values, stable_hash, key_error=None) -> None:
    """What a keyed exchange to one channel does with each record: its key, hashed as
    ``_channel_of`` hashes a key it has not seen (raising where that would); nothing kept (a
    str or int key, whose hash cannot fail, is not hashed). ``key_error`` as in
    :func:`select_key_channels`."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(values)
    cdef object v = None
    cdef bint extracting = False
    cdef type t
    try:
        for i in range(n):
            v = values[i]
            extracting = True
            key = key_of(v)
            extracting = False
            t = type(key)
            if t is not str and t is not int and t is not bool:
                _stable_hash(key, stable_hash)
    except Exception as e:
        if extracting and key_error is not None:
            raise key_error(v) from e
        raise


def bucket_by_key(
    key_of,
    list values,
    int max_parallelism,
    list table,
    dict cache,
    Py_ssize_t cache_size,
    stable_hash,
    Py_ssize_t num_channels,
    key_error=None,
) -> list:
    """``select_key_channels`` and ``bucket_by_channel`` in one pass: one list per channel (a
    channel of ``table`` or ``cache`` outside ``[0, num_channels)`` raises ``ValueError``)."""
    _check_table(table, max_parallelism)
    cdef list buckets = [[] for _ in range(num_channels)]
    cdef Py_ssize_t c, i, n = PyList_GET_SIZE(values)
    cdef object v = None
    cdef bint extracting = False
    try:
        for i in range(n):
            v = values[i]
            extracting = True
            key = key_of(v)
            extracting = False
            c = _channel_of(key, max_parallelism, table, cache, cache_size, stable_hash)
            if <size_t>c >= <size_t>num_channels:
                raise _bad_channel(i, c, num_channels)
            (<list>PyList_GET_ITEM(buckets, c)).append(v)
    except Exception as e:
        if extracting and key_error is not None:
            raise key_error(v) from e
        raise
    return buckets


cdef inline Py_ssize_t _channel_at(list channels, Py_ssize_t i, Py_ssize_t num_channels) except -1:
    """``channels[i]``, which must be an int in ``[0, num_channels)``."""
    cdef object channel = channels[i]
    cdef int overflow = 0
    cdef long long c = PyLong_AsLongLongAndOverflow(channel, &overflow)
    if overflow or c < 0 or c >= num_channels:
        raise _bad_channel(i, channel, num_channels)
    return <Py_ssize_t>c


def bucket_by_channel(list values, list channels, Py_ssize_t num_channels) -> list:
    """``buckets[c]`` = the values whose channel is ``c``, in order."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(values)
    if PyList_GET_SIZE(channels) != n:
        raise ValueError(f"{n} values but {PyList_GET_SIZE(channels)} channels")
    cdef list buckets = [[] for _ in range(num_channels)]
    for i in range(n):
        (<list>PyList_GET_ITEM(buckets, _channel_at(channels, i, num_channels))).append(values[i])
    return buckets


def bucket_pairs_by_channel(list values, list timestamps, list channels, Py_ssize_t num_channels) -> tuple:
    """``bucket_by_channel`` of ``values`` and of their ``timestamps`` alike: two lists of lists."""
    cdef Py_ssize_t c, i, n = PyList_GET_SIZE(values)
    if PyList_GET_SIZE(channels) != n or PyList_GET_SIZE(timestamps) != n:
        raise ValueError(f"{n} values but {PyList_GET_SIZE(timestamps)} timestamps and {PyList_GET_SIZE(channels)} channels")
    cdef list vb = [[] for _ in range(num_channels)]
    cdef list tb = [[] for _ in range(num_channels)]
    for i in range(n):
        c = _channel_at(channels, i, num_channels)
        (<list>PyList_GET_ITEM(vb, c)).append(values[i])
        (<list>PyList_GET_ITEM(tb, c)).append(timestamps[i])
    return vb, tb


def min_max(list values) -> tuple:
    """``(min(values), max(values))`` in one pass, with the builtins' comparisons."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(values)
    cdef object v, lo, hi
    if n == 0:
        raise ValueError("min_max() arg is an empty sequence")
    lo = hi = <object>PyList_GET_ITEM(values, 0)
    for i in range(1, n):
        v = values[i]  # checked: a comparison may run Python code
        if v < lo:
            lo = v
        if v > hi:
            hi = v
    return lo, hi


cdef inline bint _is_scalar_type(type t) noexcept:
    return t is str or t is int or t is float or t is bool or t is bytes or t is type(None)


#: ``codec.FLAT_NESTING``: how deep tuples may nest in a flat value (the twin tests check both agree)
cdef int _FLAT_NESTING = 4
FLAT_NESTING = _FLAT_NESTING


cdef bint _is_flat_tuple(object v, int depth) noexcept:
    """Every field of the tuple ``v`` a scalar or a flat tuple ``depth - 1`` deep at most."""
    cdef Py_ssize_t j, m = PyTuple_GET_SIZE(v)
    cdef object x
    cdef type t
    for j in range(m):
        x = <object>PyTuple_GET_ITEM(v, j)
        t = type(x)
        if not _is_scalar_type(t) and (t is not tuple or depth <= 1 or not _is_flat_tuple(x, depth - 1)):
            return False
    return True


def is_flat_batch(values) -> bool:
    """True if every value is a scalar, or every value a flat tuple (exact types; see the
    module doc)."""
    if type(values) is not list:
        values = list(values)
    cdef Py_ssize_t i, n = PyList_GET_SIZE(values)
    cdef object v
    if n == 0:
        return True
    v = <object>PyList_GET_ITEM(values, 0)
    if type(v) is tuple:
        for i in range(n):
            v = <object>PyList_GET_ITEM(values, i)
            if type(v) is not tuple or not _is_flat_tuple(v, _FLAT_NESTING):
                return False
        return True
    for i in range(n):
        if not _is_scalar_type(type(<object>PyList_GET_ITEM(values, i))):
            return False
    return True


cdef inline bint _field_conforms(object x, object field) except -1:
    """``x`` None, or of exactly the type ``field[0]`` and within ``field[1]..field[2]`` (None: no bounds)."""
    cdef object lo, hi
    cdef long long v, clo, chi
    cdef int overflow = 0
    if x is None:
        return True
    if type(x) is not <type>PyTuple_GET_ITEM(field, 0):
        return False
    lo = <object>PyTuple_GET_ITEM(field, 1)
    if lo is None:
        return True
    hi = <object>PyTuple_GET_ITEM(field, 2)
    v = PyLong_AsLongLongAndOverflow(x, &overflow)
    if overflow:
        return False
    clo = lo
    chi = hi
    return clo <= v <= chi


def conforms_flat(list values, tuple fields, bint is_tuple) -> bool:
    """Whether every value is exactly of a flat declared type: ``fields`` holds ``(type, low,
    high)`` per field (bounds None but for ints); a TUPLE declaration (``is_tuple``) wants tuples
    of ``len(fields)`` such fields, a basic one values like ``fields[0]``; None fits any field."""
    cdef Py_ssize_t i, j, arity = PyTuple_GET_SIZE(fields), n = PyList_GET_SIZE(values)
    cdef object v, field
    if arity < 1:
        raise ValueError("conforms_flat() needs at least one field")
    for field in fields:  # read unchecked below: (type, low, high), int bounds or None
        if type(field) is not tuple or PyTuple_GET_SIZE(field) != 3 or not isinstance(field[0], type):
            raise ValueError(f"a field of conforms_flat() is (type, low, high), not {field!r}")
    cdef object first = <object>PyTuple_GET_ITEM(fields, 0)
    for i in range(n):
        v = <object>PyList_GET_ITEM(values, i)
        if not is_tuple:
            if not _field_conforms(v, first):
                return False
            continue
        if type(v) is not tuple or PyTuple_GET_SIZE(v) != arity:
            return False
        for j in range(arity):
            if not _field_conforms(<object>PyTuple_GET_ITEM(v, j), <object>PyTuple_GET_ITEM(fields, j)):
                return False
    return True


_MISSING = object()


cdef object _NO_TOMBSTONE = object()


cdef inline PyObject* _lower_get(tuple lower, object key) except? NULL:
    """The value of ``key`` in the first of the dicts ``lower`` holding it (borrowed), or NULL."""
    cdef Py_ssize_t j
    cdef PyObject* found
    for j in range(PyTuple_GET_SIZE(lower)):
        found = PyDict_GetItemWithError(<object>PyTuple_GET_ITEM(lower, j), key)
        if found != NULL:
            return found
    return NULL


cdef inline Py_ssize_t _check_keys(list keys, Py_ssize_t n) except -1:
    if keys is not None and PyList_GET_SIZE(keys) != n:
        raise ValueError(f"{n} values but {PyList_GET_SIZE(keys)} keys")
    return n


def reduce_batch(
    list values,
    key_of,
    dict state,
    reduce,
    on_miss,
    tuple lower=(),
    removed=_NO_TOMBSTONE,
    list keys=None,
    bint emit=True,
):
    """The rolling reduce of a batch: per record, its key's stored value combined with it
    (``reduce(stored, record)``), or ``on_miss(key, record)`` for a key with no value; stored
    (in ``state``) and returned in order. A key ``state`` misses is looked up in the older
    layers ``lower`` (newest first); ``removed`` marks a key removed since one. ``keys``: the
    records' keys when the caller has them already (``key_of`` is then not called). ``emit``
    False: nothing returned (None), only stored (a window's pane)."""
    cdef list out = [] if emit else None
    cdef Py_ssize_t i, n = _check_keys(keys, PyList_GET_SIZE(values))
    cdef PyObject* current
    cdef object value, key
    for i in range(n):
        value = values[i]  # checked: the callbacks run Python code
        key = key_of(value) if keys is None else keys[i]
        current = PyDict_GetItemWithError(state, key)
        if current == NULL:
            current = _lower_get(lower, key)
        if current == NULL or <object>current is removed:
            value = on_miss(key, value)
        else:
            value = reduce(<object>current, value)
        state[key] = value
        if emit:
            out.append(value)
    return out


def sum_pairs_batch(
    list values, key_of, dict state, on_miss, tuple lower=(), removed=_NO_TOMBSTONE, list keys=None
) -> tuple:
    """``sum(1)`` over ``(key, count)`` pairs: ``(results, stop)``; ``stop < len(values)`` is the
    first record of a key with no value that is not an exact pair (the caller takes the generic
    path from there; nothing of it was stored); such a key stores ``on_miss(key, record)``.
    ``lower``, ``removed`` and ``keys`` as in :func:`reduce_batch`."""
    cdef list out = []
    cdef Py_ssize_t i, n = _check_keys(keys, PyList_GET_SIZE(values))
    cdef PyObject* current
    cdef object value, key, acc
    for i in range(n):
        value = values[i]  # checked: the callbacks run Python code
        key = key_of(value) if keys is None else keys[i]
        current = PyDict_GetItemWithError(state, key)
        if current == NULL:
            current = _lower_get(lower, key)
        if current == NULL or <object>current is removed:
            if type(value) is not tuple or PyTuple_GET_SIZE(value) != 2:
                return out, i
            value = on_miss(key, value)
        else:
            acc = <object>current
            value = (acc[0], acc[1] + value[1])
        state[key] = value
        out.append(value)
    return out, n


def keyed_map_batch(list values, key_of, set_key, fn) -> list:
    """``[fn(v) for v in values]``, the backend's current key set to ``key_of(v)`` before each."""
    cdef list out = []
    cdef object value
    for value in values:
        set_key(key_of(value))
        out.append(fn(value))
    return out


def keyed_flat_map_batch(list values, key_of, set_key, fn) -> list:
    """Every result of ``fn(v)`` in order, each iterable consumed before the next key is set."""
    cdef list out = []
    cdef object value
    for value in values:
        set_key(key_of(value))
        out.extend(fn(value))
    return out


def keyed_filter_batch(list values, key_of, set_key, fn) -> list:
    """The values whose ``fn(v)`` is truthy, the current key set to ``key_of(v)`` before each."""
    cdef list out = []
    cdef object value
    for value in values:
        set_key(key_of(value))
        if fn(value):
            out.append(value)
    return out


# -- the RocksDB keyed backend's batch paths (twins: ``state.rocksdb_state``) ------------------------
def state_db_keys(
    list keys, int max_parallelism, list prefix_of_group, dict known_groups, Py_ssize_t known_limit, pack
):
    """``[prefix_of_group[key group of k] + pack(k) for k in keys]`` for keys of exact type int
    or str, their key groups remembered in ``known_groups`` (cleared first when it would pass
    ``known_limit``); None when a key is of another type, cannot be packed, or its key group has
    no prefix (not this backend's): the caller takes the generic path."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(keys)
    cdef list out = [None] * n
    cdef list groups = [None] * n
    cdef object key, prefix
    cdef type t
    cdef int64_t group
    for i in range(n):
        key = <object>PyList_GET_ITEM(keys, i)
        t = type(key)
        if t is not int and t is not str:
            return None
        group = _murmur_int(_stable_hash(key, None)) % max_parallelism
        if group >= PyList_GET_SIZE(prefix_of_group):
            return None
        prefix = <object>PyList_GET_ITEM(prefix_of_group, group)
        if prefix is None:
            return None
        try:
            out[i] = prefix + pack(key)
        except (OverflowError, ValueError):
            return None
        groups[i] = group
    if len(known_groups) + n > known_limit:
        known_groups.clear()
    for i in range(n):
        PyDict_SetItem(known_groups, <object>PyList_GET_ITEM(keys, i), <object>PyList_GET_ITEM(groups, i))
    return out


#: msgpack's nesting limit (``DEFAULT_RECURSE_LIMIT``): it refuses deeper values, which go
#: to ``dump`` on both paths -- and the C stack is never recursed deeper than this
_PLAIN_DEPTH = 511


cdef bint _plain_value(object value, int depth=0) except -1:
    """None, a scalar of an exact built-in type, or a tuple of such (up to msgpack's nesting
    limit): what msgpack stores and gives back as it was (arrays read back as tuples)."""
    cdef type t = type(value)
    cdef Py_ssize_t j
    if _is_scalar_type(t):
        return True
    if t is tuple:
        if depth >= _PLAIN_DEPTH:
            return False
        for j in range(PyTuple_GET_SIZE(value)):
            if not _plain_value(<object>PyTuple_GET_ITEM(value, j), depth + 1):
                return False
        return True
    return False


def state_entries(dict cache, dict db_keys, db_key, pack, dump) -> tuple:
    """Every cached entry as ``(key bytes list, value bytes list)`` in key order: the key's bytes
    from ``db_keys`` (else ``db_key(key)``); a plain value (``_plain_value``) packed with
    ``pack`` unless ``pack`` is None or raises, any other value through ``dump``."""
    cdef dict blobs = {}
    cdef PyObject* known
    cdef object key, value, k, blob
    for key, value in cache.items():
        known = PyDict_GetItemWithError(db_keys, key)
        k = <object>known if known != NULL else db_key(key)
        if pack is not None and _plain_value(value):
            try:
                blob = pack(value)
            except (OverflowError, ValueError):
                blob = dump(value)
        else:
            blob = dump(value)
        PyDict_SetItem(blobs, k, blob)
    cdef list ordered = list(blobs)  # sorting the keys alone: three times faster than (key, value) pairs
    ordered.sort()
    cdef Py_ssize_t i, n = PyList_GET_SIZE(ordered)
    cdef list values = [None] * n
    for i in range(n):
        values[i] = <object>PyDict_GetItemWithError(blobs, <object>PyList_GET_ITEM(ordered, i))
    return ordered, values
