"""Nexmark, the streaming benchmark of an auction site's persons, auctions and bids: the event
generator (``generator``), its source (``source.NexmarkSource``) and the queries as DataStream
programs (``queries.qN``)."""

from raylink.bench.nexmark.generator import (
    AUCTION,
    BID,
    PERSON,
    NexmarkConfig,
    event_at,
    event_to_json,
    events,
    events_from_json,
    generate,
)
from raylink.bench.nexmark.source import NexmarkSource

__all__ = [
    "AUCTION",
    "BID",
    "PERSON",
    "NexmarkConfig",
    "NexmarkSource",
    "event_at",
    "event_to_json",
    "events",
    "events_from_json",
    "generate",
]
