"""What a PyFlink program may call that raylink deliberately does not support — the Table
API and SQL, Flink's Java connectors and formats — importable under PyFlink's names so a
migrated program gets as far as the call, which then fails with
:class:`UnsupportedFeatureError` naming the feature and raylink's alternative.

:func:`unsupported_class` makes a stand-in class: constructing it, or reaching any public
attribute of it (``KafkaSource.builder()``, ``StartCursor.earliest()``), raises.
:func:`unsupported_module_getattr` gives a module a ``__getattr__`` that hands out such
stand-ins for every public name, for modules whose exports are too many to list (the
Table API). Stateless and thread-safe. No Flink class: Flink has all of these.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

from raylink.errors import RaylinkError

#: raylink's alternatives, by feature
SPARK_SQL = (
    "use Spark SQL instead: run the query in a Spark-on-Ray session "
    "(raylink.connectors.spark.get_spark()) and stream its result with env.from_spark(df), "
    "keep reading a table with env.from_spark_table(path_or_table), write with "
    "DataStream.sink_to_spark(...)"
)
NO_JVM = "raylink runs without a JVM, so Flink's Java connectors and formats are not available"
FILES_OR_SPARK = (
    "read files with FileSource.for_record_stream_format(StreamFormat.text_line_format(), path), "
    "Parquet tables with env.from_spark_table(path), write with FileSink or sink_to_spark"
)


def own_source(client: str) -> str:
    """The alternative to a Java connector: a Python source or sink using ``client``."""
    return (
        f"{NO_JVM}; write the source or sink in Python with {client}: a SourceFunction for "
        "env.add_source(...), a SinkFunction for add_sink(...) or a raylink.core.sink.Sink "
        "(writer + committer) for sink_to(...)"
    )


class UnsupportedFeatureError(RaylinkError, NotImplementedError):
    """A PyFlink feature raylink does not support; the message names the alternative."""

    def __init__(self, what: str, feature: str, alternative: str) -> None:
        super().__init__(f"{what}: {feature} is not supported by raylink; {alternative}")
        self.what = what
        self.feature = feature
        self.alternative = alternative

    def __reduce__(self):
        return (UnsupportedFeatureError, (self.what, self.feature, self.alternative))


class _UnsupportedMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise UnsupportedFeatureError(f"{cls.__name__}.{name}", cls._feature, cls._alternative)


def unsupported_class(name: str, feature: str, alternative: str, module: str) -> type:
    """A stand-in for PyFlink's class ``name`` that fails on use."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise UnsupportedFeatureError(name, feature, alternative)

    return _UnsupportedMeta(
        name,
        (),
        {
            "__init__": __init__,
            "__module__": module,
            "_feature": feature,
            "_alternative": alternative,
            "__doc__": f"Not supported by raylink ({feature}): {alternative}.",
        },
    )


def unsupported_function(name: str, feature: str, alternative: str, module: str) -> Callable[..., Any]:
    """A stand-in for PyFlink's function ``name`` that fails when called."""

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        raise UnsupportedFeatureError(name, feature, alternative)

    stand_in.__name__ = stand_in.__qualname__ = name
    stand_in.__module__ = module
    stand_in.__doc__ = f"Not supported by raylink ({feature}): {alternative}."
    return stand_in


def define_unsupported(namespace: Dict[str, Any], names: Any, feature: str, alternative: str) -> list:
    """Put a stand-in class for each name into a module's ``namespace``; returns the names."""
    names = list(names)
    for name in names:
        namespace[name] = unsupported_class(name, feature, alternative, namespace["__name__"])
    return names


def unsupported_module_getattr(module: str, feature: str, alternative: str) -> Callable[[str], Any]:
    """A module ``__getattr__``: a stand-in class (capitalized names) or function (others)
    for every public name the module does not define."""
    made: Dict[str, Any] = {}

    def __getattr__(name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        if name not in made:
            factory = unsupported_class if name[:1].isupper() else unsupported_function
            made[name] = factory(name, feature, alternative, module)
        return made[name]

    return __getattr__


__all__ = [
    "FILES_OR_SPARK",
    "NO_JVM",
    "SPARK_SQL",
    "UnsupportedFeatureError",
    "define_unsupported",
    "own_source",
    "unsupported_class",
    "unsupported_function",
    "unsupported_module_getattr",
]
