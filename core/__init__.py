"""raylink.core: what every floor stands on (Flink's ``flink-core``).

Holds: the options registry and ``Configuration`` (``options``, ``configuration``: every key,
its type, default and description; ``RAYLINK_CONF``), the user function interfaces
(``functions``, ``async_retry``), state descriptors and TTL config (``state``, ``state_ttl``),
types and ``Row`` (``types``, ``row``, and ``declared_types``: how a declared type converts
values, as PyFlink's coders do), time (``time``), watermark strategies
(``watermark_strategy``), windows (``window_types``, ``window_assigners``, ``triggers``,
``evictors``), ``OutputTag`` (``output_tag``), ``JobStatus`` (``job_status``), checkpointing
interfaces and settings (``checkpointing``), the Sink V2 interfaces (``sink``), key groups
(``key_groups``: Flink's ``KeyGroupRangeAssignment``) and record reprs for messages
(``reprs``). Plain classes and functions: no threads, no I/O.

May import: the standard library, pure-Python libraries and ``raylink.errors``; nothing
else of raylink. Every other floor may import it. The user-facing names are re-exported
by :mod:`raylink.api` under PyFlink's module names.
"""
