"""PyFlink's ``SlotSharingGroup`` and ``MemorySize`` (``pyflink.datastream.slot_sharing_group``),
Flink's ``org.apache.flink.api.common.operators.SlotSharingGroup`` and
``org.apache.flink.configuration.MemorySize``.

A slot sharing group is a name plus an optional resource profile (CPU cores, task heap,
task off-heap and managed memory, external resources). ``DataStream.slot_sharing_group``
and ``StreamExecutionEnvironment.register_slot_sharing_group`` accept one; the name puts
operators into the group (slot placement and chaining use it, as in Flink: operators of two
groups are never chained). The resource profile is validated as Flink validates it, kept on
the environment (``env.get_slot_sharing_groups()``) and, on Ray, sizes the TaskExecutors of
the group (:mod:`raylink.runtime.job.resource_profile`): each slot of the group (subtask i of
its vertices) runs in a TaskExecutor asking Ray for the CPU cores as ``num_cpus``, heap +
off-heap + managed memory as ``memory``, the external resource ``GPU`` as GPUs and any other
external resource as a Ray custom resource of its name. A request no node of the cluster can
hold fails the job at once, naming the group and resource. Groups without a profile keep the
default bundle (``taskmanager.cpu.cores``); the local executor ignores profiles.

Both classes are immutable values (hashable, compared by value) and so thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

_UNITS = (("tb", 1 << 40), ("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10))


class MemorySize:
    """An amount of memory in bytes (Flink's ``MemorySize``); ``str`` gives the largest unit
    that holds it exactly (``100 mb``, ``1536 bytes``)."""

    __slots__ = ("_bytes",)

    def __init__(self, j_memory_size: Optional[int] = None, bytes_size: Optional[int] = None) -> None:
        # PyFlink's first argument wraps a Java object; here either argument is a byte count
        size = bytes_size if bytes_size is not None else j_memory_size
        if isinstance(size, MemorySize):
            size = size.get_bytes()
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"MemorySize: bytes_size must be an int, got {size!r}")
        if size < 0:
            raise ValueError("bytes must be >= 0")
        self._bytes = size

    @staticmethod
    def of_mebi_bytes(mebi_bytes: int) -> "MemorySize":
        return MemorySize(bytes_size=mebi_bytes << 20)

    def get_bytes(self) -> int:
        return self._bytes

    def get_kibi_bytes(self) -> int:
        return self._bytes >> 10

    def get_mebi_bytes(self) -> int:
        return self._bytes >> 20

    def get_gibi_bytes(self) -> int:
        return self._bytes >> 30

    def get_tebi_bytes(self) -> int:
        return self._bytes >> 40

    def _check(self, other: object) -> "MemorySize":
        if not isinstance(other, MemorySize):
            raise TypeError(f"Does not support comparison with non-MemorySize {other}")
        return other

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemorySize) and self._bytes == other._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __lt__(self, other: "MemorySize") -> bool:
        return self._bytes < self._check(other)._bytes

    def __le__(self, other: "MemorySize") -> bool:
        return self._bytes <= self._check(other)._bytes

    def __str__(self) -> str:
        for unit, size in _UNITS:
            if self._bytes and self._bytes % size == 0:
                return f"{self._bytes // size} {unit}"
        return f"{self._bytes} bytes"

    def __repr__(self) -> str:
        return f"MemorySize({self})"


_RESOURCES_REQUIRED = (
    "The cpu cores and task heap memory are required when specifying the resource of a slot "
    "sharing group. You need to explicitly configure them with positive value."
)


@dataclass(frozen=True)
class SlotSharingGroup:
    """A named slot sharing group with an optional resource profile (Flink's ``SlotSharingGroup``);
    made with ``SlotSharingGroup.builder(name)...build()``."""

    name: str
    cpu_cores: Optional[float] = None
    task_heap_memory: Optional[MemorySize] = None
    task_off_heap_memory: Optional[MemorySize] = None
    managed_memory: Optional[MemorySize] = None
    external_resources: Dict[str, float] = field(default_factory=dict, hash=False)

    def get_name(self) -> str:
        return self.name

    def get_cpu_cores(self) -> Optional[float]:
        return self.cpu_cores

    def get_task_heap_memory(self) -> Optional[MemorySize]:
        return self.task_heap_memory

    def get_task_off_heap_memory(self) -> Optional[MemorySize]:
        return self.task_off_heap_memory

    def get_managed_memory(self) -> Optional[MemorySize]:
        return self.managed_memory

    def get_external_resources(self) -> dict:
        return dict(self.external_resources)

    def has_resources(self) -> bool:
        """True when the group declares a resource profile (Flink: not ``UNKNOWN``)."""
        return self.cpu_cores is not None

    @staticmethod
    def builder(name: str) -> "SlotSharingGroup.Builder":
        return SlotSharingGroup.Builder(name)

    class Builder:
        """Collects a group's name and resources; ``build()`` checks them as Flink does."""

        def __init__(self, name: str) -> None:
            if not isinstance(name, str):
                raise TypeError(f"SlotSharingGroup.builder: name must be a str, got {name!r}")
            self._name = name
            self._cpu_cores: Optional[float] = None
            self._task_heap: Optional[MemorySize] = None
            self._task_off_heap: Optional[MemorySize] = None
            self._managed: Optional[MemorySize] = None
            self._external: Dict[str, float] = {}

        def set_cpu_cores(self, cpu_cores: float) -> "SlotSharingGroup.Builder":
            if isinstance(cpu_cores, bool) or not isinstance(cpu_cores, (int, float)) or cpu_cores <= 0:
                raise ValueError("The cpu cores should be positive.")
            self._cpu_cores = float(cpu_cores)
            return self

        def set_task_heap_memory(self, task_heap_memory: MemorySize) -> "SlotSharingGroup.Builder":
            if _memory(task_heap_memory, "task_heap_memory").get_bytes() <= 0:
                raise ValueError("The task heap memory should be positive.")
            self._task_heap = task_heap_memory
            return self

        def set_task_heap_memory_mb(self, task_heap_memory_mb: int) -> "SlotSharingGroup.Builder":
            if task_heap_memory_mb <= 0:
                raise ValueError("The task heap memory should be positive.")
            return self.set_task_heap_memory(MemorySize.of_mebi_bytes(task_heap_memory_mb))

        def set_task_off_heap_memory(self, task_off_heap_memory: MemorySize) -> "SlotSharingGroup.Builder":
            self._task_off_heap = _memory(task_off_heap_memory, "task_off_heap_memory")
            return self

        def set_task_off_heap_memory_mb(self, task_off_heap_memory_mb: int) -> "SlotSharingGroup.Builder":
            return self.set_task_off_heap_memory(MemorySize.of_mebi_bytes(task_off_heap_memory_mb))

        def set_managed_memory(self, managed_memory: MemorySize) -> "SlotSharingGroup.Builder":
            self._managed = _memory(managed_memory, "managed_memory")
            return self

        def set_managed_memory_mb(self, managed_memory_mb: int) -> "SlotSharingGroup.Builder":
            return self.set_managed_memory(MemorySize.of_mebi_bytes(managed_memory_mb))

        def set_external_resource(self, name: str, value: float) -> "SlotSharingGroup.Builder":
            self._external[name] = float(value)
            return self

        def build(self) -> "SlotSharingGroup":
            declared = (self._cpu_cores, self._task_heap, self._task_off_heap, self._managed)
            if any(v is not None for v in declared) or self._external:
                if self._cpu_cores is None or self._task_heap is None:
                    raise ValueError(_RESOURCES_REQUIRED)
                zero = MemorySize(bytes_size=0)
                return SlotSharingGroup(
                    self._name,
                    self._cpu_cores,
                    self._task_heap,
                    self._task_off_heap or zero,
                    self._managed or zero,
                    dict(self._external),
                )
            return SlotSharingGroup(self._name)


def _memory(value: MemorySize, what: str) -> MemorySize:
    if not isinstance(value, MemorySize):
        raise TypeError(f"SlotSharingGroup.Builder: {what} must be a MemorySize, got {type(value).__name__}")
    return value


__all__ = ["MemorySize", "SlotSharingGroup"]
