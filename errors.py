"""The root of raylink's own exceptions.

Every error raylink raises on purpose derives from :class:`RaylinkError`, so a program can
catch them all with one ``except RaylinkError``; each also keeps the built-in base it had
(``ValueError`` for bad arguments, ``RuntimeError`` for a failed job, ...), so ``except
ValueError`` still works. The classes live next to the code that raises them; this module
imports nothing of raylink, so any package may import it.
"""


class RaylinkError(Exception):
    """Base class of every exception raylink raises on purpose (Flink's ``FlinkException``)."""
