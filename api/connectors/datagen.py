"""Flink's DataGen connector (``org.apache.flink.connector.datagen.source``): the
``DataGeneratorSource`` and its ``RateLimiterStrategy`` (:mod:`raylink.connectors.datagen`).

Only re-exports: the implementation lives on a lower floor."""

from raylink.connectors.datagen.source import DataGeneratorSource, RateLimiterStrategy

__all__ = ["DataGeneratorSource", "RateLimiterStrategy"]
