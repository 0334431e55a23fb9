"""The Spark connector's start-up error and how a Java exception reads in raylink's messages."""

from __future__ import annotations

from raylink.errors import RaylinkError


class SparkStartError(RaylinkError, RuntimeError):
    """Spark-on-Ray could not be started (no Java, RayDP failure, ...)."""


def java_message(exc: BaseException) -> str:
    """The first line of a (py4j-wrapped) Java exception's message, else of ``str(exc)``."""
    text = str(exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            text = java.getMessage()
        except Exception:
            pass
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


__all__ = ["SparkStartError", "java_message"]
