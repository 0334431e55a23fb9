"""Flink's DataGen connector (``org.apache.flink.connector.datagen.source``): a bounded,
checkpointed, rescalable source of generated records at a rate (:class:`DataGeneratorSource`,
:class:`RateLimiterStrategy`)."""

from raylink.connectors.datagen.source import DataGeneratorSource, RateLimiterStrategy

__all__ = ["DataGeneratorSource", "RateLimiterStrategy"]
