"""The bytes ``execute_and_collect``'s results travel in from a TaskExecutor to the driver.

Flink's ``CollectSinkFunction`` serializes each batch of results with the stream's
``TypeSerializer`` into the ``CollectCoordinationResponse`` its client fetches; raylink's
collect sink does the same a batch at a time (``operators.collect.CollectBuffer`` encodes each
batch its task adds when the reader is in another process) and the driver decodes a taken run
of batches straight into the records (``runtime.client.job_result.collected_records``).

Encoding of one batch (a list of records), chosen per batch:

* a *flat* batch -- every record a scalar (exact ``str``, ``int``, ``float``, ``bool``,
  ``bytes``, ``None``) or every record a tuple of such scalars, the check the record writer
  runs (``codec.is_flat_batch``, compiled on the compiled per-record path) -- is the byte
  ``FLAT`` then ``marshal.dumps(batch)``: CPython's own C encoder of built-in values, about
  twice as fast as pickle on both sides, exact for exactly these types (``marshal`` refuses or
  changes subclasses and buffer types, which the flatness check keeps out), and an object
  shared by several records (a reduce's key) is written once and decoded once;
* anything else is ``cloudpickle.dumps(batch)`` (a pickle: its first byte is ``0x80``), the
  same cloudpickle that shipped the user's code: a class the job's ``__main__`` defined comes
  back as the driver's own class.

Several encoded batches taken at once are joined into one bytes (:func:`join_batches`: the
byte ``JOINED`` then ``marshal.dumps`` of the list of batches), so one remote answer carries
one bytes object per collect sink. :func:`decode_records` reads all three forms; plain pickled
bytes (what TaskExecutors sent before this module) still decode.

Thread-safe: pure functions (``is_flat_batch`` has no state).
"""

from __future__ import annotations

import marshal
from typing import Any, List

import cloudpickle

from raylink.shuffle.codec import SerializationError, is_flat_batch

__all__ = ["FLAT", "JOINED", "encode_batch", "join_batches", "decode_records"]

#: first byte of a flat batch (``marshal``)
FLAT = 0x01
#: first byte of several encoded batches joined into one bytes
JOINED = 0x02
_FLAT_PREFIX = bytes((FLAT,))
_JOINED_PREFIX = bytes((JOINED,))
_MARSHAL_VERSION = 4  # shares an object several records hold (refs), as pickle's memo does

_marshal_dumps = marshal.dumps
_marshal_loads = marshal.loads
_pickle_loads = cloudpickle.loads


def encode_batch(records: List[Any]) -> bytes:
    """One batch of records as bytes (see the module doc). A record cloudpickle cannot pickle
    raises ``SerializationError`` naming its type and the pickler's reason."""
    if is_flat_batch(records):
        return _FLAT_PREFIX + _marshal_dumps(records, _MARSHAL_VERSION)
    try:
        return cloudpickle.dumps(records)
    except Exception as e:  # PicklingError, TypeError, ...: name the record that does not pickle
        culprit = _first_unpicklable(records)
        raise SerializationError(type(culprit) if culprit is not None else type(records), e) from e


def _first_unpicklable(records: List[Any]) -> Any:
    for record in records:
        try:
            cloudpickle.dumps(record)
        except Exception:
            return record
    return None


def join_batches(batches: List[bytes]) -> bytes:
    """Encoded batches as one bytes, in order (a single batch is returned as it is)."""
    if len(batches) == 1:
        return batches[0]
    return _JOINED_PREFIX + _marshal_dumps(batches, _MARSHAL_VERSION)


def decode_records(data: bytes) -> List[Any]:
    """The records of one encoded batch or of joined batches, in order."""
    tag = data[0] if data else None
    if tag == FLAT:
        return _marshal_loads(memoryview(data)[1:])
    if tag == JOINED:
        out: List[Any] = []
        for batch in _marshal_loads(memoryview(data)[1:]):
            out.extend(decode_records(batch))
        return out
    return _pickle_loads(data)
