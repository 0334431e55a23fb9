"""What configures a :class:`~raylink.connectors.file.sink.FileSink` (PyFlink's
``pyflink.datastream.connectors.file_system``): ``Encoder``, ``OutputFileConfig``,
``RollingPolicy``, ``BucketAssigner`` and the ``BucketAssigner.Context`` the writer hands it.

The classes here are plain configuration, picklable, shared read-only by every subtask.
Subclass ``Encoder``, ``RollingPolicy`` or ``BucketAssigner`` for custom behaviour (Flink's
interfaces, in Python form). Their methods run on the task thread, per record for
``Encoder.encode``, ``BucketAssigner.get_bucket_id`` and ``RollingPolicy.should_roll_on_event``.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, BinaryIO, Optional

from raylink.core.options import parse_duration_ms, parse_memory
from raylink.operators.print_format import record_formatter


# -- Encoder ----------------------------------------------------------------------------------------
class Encoder:
    """Writes one record into a part file (Flink's ``Encoder``): override ``encode``."""

    def encode(self, element: Any, stream: BinaryIO) -> None:
        """Writes ``element`` to the binary ``stream``."""
        raise NotImplementedError(f"{type(self).__name__} must implement encode(element, stream)")

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> "SimpleStringEncoder":
        """``str(element)`` followed by a newline, in ``charset_name``."""
        return SimpleStringEncoder(charset_name)


class SimpleStringEncoder(Encoder):
    """Flink's ``SimpleStringEncoder``: the element's string form plus ``\\n``. The string
    form is Java's ``toString`` of the record as PyFlink hands it over, the text
    ``print()`` writes (``(a,5)`` for a TUPLE stream, ``+I[a,5]`` for a ROW, ``str`` for an
    untyped one; :mod:`raylink.operators.print_format`): ``DataStream.sink_to`` binds
    the stream's type through ``FileSink._raylink_bind_input_type``."""

    def __init__(self, charset_name: str = "UTF-8", record_type: Any = None) -> None:
        import codecs

        try:
            self.charset_name = codecs.lookup(charset_name).name
        except LookupError:
            raise ValueError(f"Encoder.simple_string_encoder: unknown charset {charset_name!r}") from None
        self.record_type = record_type
        self._format: Any = None

    def __getstate__(self) -> dict:
        return {"charset_name": self.charset_name, "record_type": self.record_type}

    def __setstate__(self, state: dict) -> None:
        self.charset_name = state["charset_name"]
        self.record_type = state.get("record_type")
        self._format = None

    def to_bytes(self, element: Any) -> bytes:
        """The encoded record (the writer's fast path: one allocation, no stream call)."""
        format_record = self._format
        if format_record is None:
            if self.record_type is None:
                format_record = str
            else:
                format_record = record_formatter(self.record_type)
            self._format = format_record
        return (format_record(element) + "\n").encode(self.charset_name)

    def encode(self, element: Any, stream: BinaryIO) -> None:
        stream.write(self.to_bytes(element))

    def __repr__(self) -> str:
        return f"SimpleStringEncoder({self.charset_name!r})"


# -- OutputFileConfig -------------------------------------------------------------------------------
class OutputFileConfig:
    """Part file names: ``<part_prefix>-<subtask>-<counter><part_suffix>`` (Flink's
    ``OutputFileConfig``; defaults ``part`` and no suffix)."""

    def __init__(self, part_prefix: str = "part", part_suffix: str = "") -> None:
        for what, value in (("part prefix", part_prefix), ("part suffix", part_suffix)):
            if not isinstance(value, str) or "/" in value or "\\" in value:
                raise ValueError(f"OutputFileConfig: {what} {value!r} must be a string without path separators")
        if not part_prefix:
            raise ValueError("OutputFileConfig: the part prefix must not be empty")
        self._part_prefix = part_prefix
        self._part_suffix = part_suffix

    @staticmethod
    def builder() -> "OutputFileConfig.OutputFileConfigBuilder":
        return OutputFileConfig.OutputFileConfigBuilder()

    def get_part_prefix(self) -> str:
        return self._part_prefix

    def get_part_suffix(self) -> str:
        return self._part_suffix

    def __repr__(self) -> str:
        return f"OutputFileConfig({self._part_prefix!r}, {self._part_suffix!r})"

    class OutputFileConfigBuilder:
        """Builds an :class:`OutputFileConfig`."""

        def __init__(self) -> None:
            self.part_prefix = "part"
            self.part_suffix = ""

        def with_part_prefix(self, prefix: str) -> "OutputFileConfig.OutputFileConfigBuilder":
            self.part_prefix = prefix
            return self

        def with_part_suffix(self, suffix: str) -> "OutputFileConfig.OutputFileConfigBuilder":
            self.part_suffix = suffix
            return self

        def build(self) -> "OutputFileConfig":
            return OutputFileConfig(self.part_prefix, self.part_suffix)


# -- RollingPolicy ----------------------------------------------------------------------------------
class RollingPolicy:
    """When a bucket closes its in-progress part file and opens a new one (Flink's
    ``RollingPolicy``). ``part_file`` exposes ``bucket_id``, ``creation_time``,
    ``last_update_time`` (epoch ms) and ``size`` (bytes written)."""

    def should_roll_on_checkpoint(self, part_file: Any) -> bool:
        """Close the part file at this checkpoint (it becomes pending)?"""
        return False

    def should_roll_on_event(self, part_file: Any, element: Any) -> bool:
        """Close the part file before writing ``element``?"""
        return False

    def should_roll_on_processing_time(self, part_file: Any, current_time: int) -> bool:
        """Close the part file at this periodic check (every bucket check interval)?"""
        return False

    @staticmethod
    def default_rolling_policy(
        part_size: Any = 1024 * 1024 * 128, rollover_interval: Any = 60 * 1000, inactivity_interval: Any = 60 * 1000
    ) -> "DefaultRollingPolicy":
        """Rolls when the part file exceeds ``part_size`` bytes, is older than
        ``rollover_interval`` ms, or was not written for ``inactivity_interval`` ms."""
        return DefaultRollingPolicy(part_size, rollover_interval, inactivity_interval)

    @staticmethod
    def on_checkpoint_rolling_policy() -> "OnCheckpointRollingPolicy":
        """Rolls at every checkpoint, and only then."""
        return OnCheckpointRollingPolicy()


class DefaultRollingPolicy(RollingPolicy):
    """Flink's ``DefaultRollingPolicy`` (size, rollover interval, inactivity interval)."""

    def __init__(
        self,
        part_size: Any = 1024 * 1024 * 128,
        rollover_interval: Any = 60 * 1000,
        inactivity_interval: Any = 60 * 1000,
    ) -> None:
        try:
            self.part_size = parse_memory(part_size)
            self.rollover_interval = parse_duration_ms(rollover_interval)
            self.inactivity_interval = parse_duration_ms(inactivity_interval)
        except ValueError as exc:
            raise ValueError(f"RollingPolicy.default_rolling_policy: {exc}") from None
        for name in ("part_size", "rollover_interval", "inactivity_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RollingPolicy.default_rolling_policy: {name} must be > 0, got {getattr(self, name)}")

    def should_roll_on_checkpoint(self, part_file: Any) -> bool:
        return part_file.size > self.part_size

    def should_roll_on_event(self, part_file: Any, element: Any) -> bool:
        return part_file.size > self.part_size

    def should_roll_on_processing_time(self, part_file: Any, current_time: int) -> bool:
        return (
            current_time - part_file.creation_time >= self.rollover_interval
            or current_time - part_file.last_update_time >= self.inactivity_interval
        )

    def __repr__(self) -> str:
        return (
            f"DefaultRollingPolicy(part_size={self.part_size}, rollover_interval={self.rollover_interval}, "
            f"inactivity_interval={self.inactivity_interval})"
        )


class OnCheckpointRollingPolicy(RollingPolicy):
    """Flink's ``OnCheckpointRollingPolicy``: one part file per bucket per checkpoint."""

    def should_roll_on_checkpoint(self, part_file: Any) -> bool:
        return True

    def __repr__(self) -> str:
        return "OnCheckpointRollingPolicy()"


# -- BucketAssigner ---------------------------------------------------------------------------------
class BucketAssignerContext:
    """What ``BucketAssigner.get_bucket_id`` may ask (Flink's ``BucketAssigner.Context``); the
    writer reuses one instance per subtask."""

    __slots__ = ("_processing_time", "_watermark", "_timestamp")

    def __init__(self) -> None:
        self._processing_time = 0
        self._watermark = -(1 << 63)
        self._timestamp: Optional[int] = None

    def current_processing_time(self) -> int:
        return self._processing_time

    def current_watermark(self) -> int:
        return self._watermark

    def timestamp(self) -> Optional[int]:
        return self._timestamp


class BucketAssigner:
    """Picks the bucket (sub-folder of the base path) of every record (Flink's
    ``BucketAssigner``): override ``get_bucket_id``; ``""`` is the base path itself."""

    def get_bucket_id(self, element: Any, context: BucketAssignerContext) -> str:
        raise NotImplementedError(f"{type(self).__name__} must implement get_bucket_id(element, context)")

    @staticmethod
    def base_path_bucket_assigner() -> "BasePathBucketAssigner":
        """Every file goes to the base path."""
        return BasePathBucketAssigner()

    @staticmethod
    def date_time_bucket_assigner(
        format_str: str = "yyyy-MM-dd--HH", timezone_id: Optional[str] = None
    ) -> "DateTimeBucketAssigner":
        """Buckets named by the processing time in ``format_str`` (Java ``DateTimeFormatter``
        letters), in ``timezone_id`` (IANA name or ``GMT+hh:mm``; default: the system zone)."""
        return DateTimeBucketAssigner(format_str, timezone_id)


class BasePathBucketAssigner(BucketAssigner):
    """Flink's ``BasePathBucketAssigner``."""

    def get_bucket_id(self, element: Any, context: BucketAssignerContext) -> str:
        return ""

    def __repr__(self) -> str:
        return "BasePathBucketAssigner()"


# Java DateTimeFormatter letter runs -> strftime (the runs bucket formats use)
_JAVA_TO_STRFTIME = {
    "yyyy": "%Y",
    "uuuu": "%Y",
    "yy": "%y",
    "uu": "%y",
    "MM": "%m",
    "MMM": "%b",
    "MMMM": "%B",
    "dd": "%d",
    "DDD": "%j",
    "HH": "%H",
    "hh": "%I",
    "mm": "%M",
    "ss": "%S",
    "a": "%p",
    "EEE": "%a",
    "EEEE": "%A",
    "Z": "%z",
    "z": "%Z",
}
_OFFSET_ZONE = re.compile(r"^(?:GMT|UTC)?([+-])(\d{1,2})(?::?(\d{2}))?$")


def _java_pattern_to_strftime(pattern: str) -> str:
    """``yyyy-MM-dd--HH`` -> ``%Y-%m-%d--%H``; quoted text is literal."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            end = pattern.find("'", i + 1)
            if end < 0:
                raise ValueError(f"date-time bucket format {pattern!r}: unterminated quote")
            out.append(pattern[i + 1 : end].replace("%", "%%") if end > i + 1 else "'")
            i = end + 1
        elif ch.isalpha():
            j = i
            while j < len(pattern) and pattern[j] == ch:
                j += 1
            run = pattern[i:j]
            if run not in _JAVA_TO_STRFTIME:
                raise ValueError(
                    f"date-time bucket format {pattern!r}: {run!r} is not supported "
                    f"(use {', '.join(sorted(_JAVA_TO_STRFTIME))})"
                )
            out.append(_JAVA_TO_STRFTIME[run])
            i = j
        else:
            out.append("%%" if ch == "%" else ch)
            i += 1
    return "".join(out)


def _zone(timezone_id: Optional[str]) -> Optional[tzinfo]:
    if timezone_id is None:
        return None
    match = _OFFSET_ZONE.match(timezone_id.strip())
    if match:
        sign = -1 if match.group(1) == "-" else 1
        return timezone(sign * timedelta(hours=int(match.group(2)), minutes=int(match.group(3) or 0)))
    if timezone_id.strip().upper() in ("UTC", "GMT", "Z"):
        return timezone.utc
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(timezone_id)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"date-time bucket assigner: unknown time zone {timezone_id!r}") from None


class DateTimeBucketAssigner(BucketAssigner):
    """Flink's ``DateTimeBucketAssigner``: the bucket of a record is the current processing
    time formatted with ``format_str`` (hourly ``yyyy-MM-dd--HH`` by default). Formats
    have at most second resolution, so the id is computed once per second."""

    def __init__(self, format_str: str = "yyyy-MM-dd--HH", timezone_id: Optional[str] = None) -> None:
        self.format_str = format_str
        self.timezone_id = timezone_id
        self._strftime = _java_pattern_to_strftime(format_str)
        self._tz = _zone(timezone_id)
        self._cached_second = None
        self._cached_id = ""

    def get_bucket_id(self, element: Any, context: BucketAssignerContext) -> str:
        second = context.current_processing_time() // 1000
        if second != self._cached_second:
            if self._tz is None:
                moment = datetime.fromtimestamp(second).astimezone()
            else:
                moment = datetime.fromtimestamp(second, self._tz)
            self._cached_id = moment.strftime(self._strftime)
            self._cached_second = second
        return self._cached_id

    def __getstate__(self) -> dict[str, Any]:
        return {"format_str": self.format_str, "timezone_id": self.timezone_id}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["format_str"], state["timezone_id"])

    def __repr__(self) -> str:
        return f"DateTimeBucketAssigner({self.format_str!r}, {self.timezone_id!r})"


__all__ = [
    "BasePathBucketAssigner",
    "BucketAssigner",
    "BucketAssignerContext",
    "DateTimeBucketAssigner",
    "DefaultRollingPolicy",
    "Encoder",
    "OnCheckpointRollingPolicy",
    "OutputFileConfig",
    "RollingPolicy",
    "SimpleStringEncoder",
]
