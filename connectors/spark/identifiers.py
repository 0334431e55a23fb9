"""Spark SQL identifiers: table names quoted before they go into SQL text.

A table name given to ``from_spark_table`` / ``sink_to_spark(table=...)`` is a
multi-part name, ``tbl``, ``db.tbl`` or ``catalog.db.tbl``. Parts are split at
dots outside backticks; a part may itself be backticked (```my db`.tbl``, with
a literal backtick doubled inside, as Spark writes it). Every part is then
quoted -- wrapped in backticks, inner backticks doubled -- so whatever the name
holds (spaces, ``;``, ``--``, keywords) it stays one identifier in
``DESCRIBE TABLE EXTENDED ...`` and the like, never SQL. The quoted form is
also what the DataFrame / catalog APIs get, so SQL text and API calls name the
same table.

Pure functions (no Spark, thread-safe), mirroring Spark's
``quoteIfNeeded`` / ``parseMultipartIdentifier`` (always quoting).
"""

from __future__ import annotations

__all__ = ["split_table_name", "quote_identifier", "quote_table_name"]


def split_table_name(name: str) -> list[str]:
    """The parts of a multi-part table name (backticks removed, doubled backticks undone).

    Raises ``ValueError`` for an empty name, an empty part (``db..t``), an unclosed
    backtick or a stray one inside an unquoted part.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"not a table name: {name!r}")
    parts: list[str] = []
    i, n = 0, len(name)
    while True:
        if i < n and name[i] == "`":  # a quoted part: up to the closing backtick
            i += 1
            chars: list[str] = []
            while True:
                if i >= n:
                    raise ValueError(f"table name {name!r} has an unclosed backtick")
                if name[i] == "`":
                    if i + 1 < n and name[i + 1] == "`":  # a doubled backtick is a literal one
                        chars.append("`")
                        i += 2
                        continue
                    i += 1
                    break
                chars.append(name[i])
                i += 1
            part = "".join(chars)
            if i < n and name[i] != ".":
                raise ValueError(f"table name {name!r}: unexpected text after a quoted part at {i}")
        else:  # an unquoted part: up to the next dot, taken literally
            end = name.find(".", i)
            end = n if end < 0 else end
            part = name[i:end].strip()
            if "`" in part:
                raise ValueError(f"table name {name!r}: a backtick inside an unquoted part (quote the part: `a``b`)")
            i = end
        if not part:
            raise ValueError(f"table name {name!r} has an empty part")
        parts.append(part)
        if i >= n:
            return parts
        i += 1  # the dot
        if i >= n:
            raise ValueError(f"table name {name!r} ends with a dot")


def quote_identifier(part: str) -> str:
    """One identifier as Spark SQL text: backticks around, inner backticks doubled."""
    return "`" + part.replace("`", "``") + "`"


def quote_table_name(name: str) -> str:
    """Every part quoted (see the module doc): ``'db.tbl'`` becomes ``'`db`.`tbl`'``."""
    return ".".join(quote_identifier(part) for part in split_table_name(name))
