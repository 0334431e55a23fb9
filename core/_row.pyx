# cython: language_level=3, auto_pickle=False
"""The compiled storage and field reads of ``Row`` (Cython); loaded by :mod:`raylink.core.row`.

``RowBase`` holds a row's four fields in C (``_values``: a list, ``_fields``: the names or None
for a positional row, ``_row_kind``, ``_from_dict``) and answers the reads every record pays:
``row[i]`` for an int ``i``, ``iter(row)`` and ``len(row)``, each a C slot instead of a Python
method's frame. Everything else -- names, slices, equality, repr, pickling -- is written once in
Python, in ``core.row``: its ``Row`` subclasses this base when it is built, and the same class
body over ``object`` (``core.row.PureRow``) stays the reference; ``tests/test_core_row_twins.py``
compares the two on every kind of input. Reads of a name, a slice or an int subclass go to the
subclass's ``_item`` (the shared Python code), so both raise the same errors.

``make_row(cls, fields, values, row_kind)``: a row of class ``cls`` (a subclass of ``RowBase``)
taking ownership of ``values``, for the codecs (twin: ``core.row``'s pure ``make_row``).

No state of its own: thread-safe as a row is (mutable; share it read-only).
"""


cdef class RowBase:
    """The C storage of a row and its per-record reads (see the module doc)."""

    cdef public list _values
    cdef public object _fields
    cdef public object _row_kind
    cdef public bint _from_dict

    def __getitem__(self, item):
        if type(item) is int:
            return self._values[item]
        return self._item(item)

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)


def make_row(type cls, fields, list values, row_kind):
    """A ``cls`` row of ``values`` (owned from now on) named ``fields`` (None: positional)."""
    cdef RowBase row = RowBase.__new__(cls)
    row._values = values
    row._fields = fields
    row._row_kind = row_kind
    row._from_dict = False
    return row
