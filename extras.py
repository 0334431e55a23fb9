"""raylink's optional dependencies (the extras of ``pyproject.toml``) and the error a missing one raises.

``pip install raylink`` gives the DataStream API, the runtime and Ray; two features
need more and say so when it is missing:

* ``raylink[spark]`` (``pyspark``, ``raydp``): the Spark bridge (``env.from_spark``,
  ``env.from_spark_table``, ``sink_to_spark``, :mod:`raylink.connectors.spark`);
* ``raylink[plots]`` (``matplotlib``): the PNG plots of ``raylink loadtest``.

:func:`require_extra` checks with ``importlib.util.find_spec`` (nothing is imported)
and raises :class:`MissingExtraError` (a :class:`~raylink.errors.RaylinkError` and an
``ImportError``) naming the extra and the ``pip`` command. Stateless, thread-safe;
imports nothing of raylink but :mod:`raylink.errors`, so any package may use it.
"""

from __future__ import annotations

from importlib.util import find_spec

from raylink.errors import RaylinkError

#: extra -> the top-level modules it installs
EXTRAS: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark", "raydp"),
    "plots": ("matplotlib",),
}


class MissingExtraError(RaylinkError, ImportError):
    """A feature needs an extra that is not installed (``extra``; ``missing``: its absent modules)."""

    def __init__(self, extra: str, feature: str, missing: tuple[str, ...] = (), hint: str = "") -> None:
        detail = f" ({', '.join(missing)} not installed)" if missing else ""
        super().__init__(f"{feature} needs raylink[{extra}]: pip install 'raylink[{extra}]'{detail}{hint}")
        self.extra = extra
        self.feature = feature
        self.missing = tuple(missing)
        self.hint = hint

    def __reduce__(self):
        return (MissingExtraError, (self.extra, self.feature, self.missing, self.hint))


def missing_modules(extra: str) -> tuple[str, ...]:
    """The modules of ``extra`` that cannot be imported here (empty: the extra is installed)."""
    missing = []
    for module in EXTRAS[extra]:
        try:
            found = find_spec(module) is not None
        except (ImportError, ValueError):  # a broken or stubbed-out package
            found = False
        if not found:
            missing.append(module)
    return tuple(missing)


def has_extra(extra: str) -> bool:
    return not missing_modules(extra)


def require_extra(extra: str, feature: str, hint: str = "") -> None:
    """Raise :class:`MissingExtraError` when ``extra`` (``"spark"``, ``"plots"``) is not installed."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(extra, feature, missing, hint)


__all__ = ["EXTRAS", "MissingExtraError", "has_extra", "missing_modules", "require_extra"]
