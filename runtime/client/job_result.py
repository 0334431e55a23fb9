"""What a finished or running job hands back: Flink's ``JobExecutionResult``,
``JobClient`` and ``JobExecutionException``, plus the collect iterator of
``execute_and_collect``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from raylink.core.job_status import JobStatus
from raylink.errors import RaylinkError
from raylink.runtime.metrics import aggregate_by_vertex
from raylink.shuffle.collect_codec import decode_records


class JobExecutionException(RaylinkError, RuntimeError):
    """The job ended FAILED (or was cancelled); ``__cause__`` is the task's error."""

    def __init__(self, job_name: str, status: str, cause: Optional[BaseException], restarts: int = 0) -> None:
        detail = f": {cause}" if cause is not None else ""
        after = f" after {restarts} restart{'s' if restarts != 1 else ''}" if restarts else ""
        super().__init__(f"Job '{job_name}' {status.lower()}{after}{detail}")
        self.job_name = job_name
        self.status = status
        self.cause = cause
        self.restarts = restarts

    def __reduce__(self):
        return (JobExecutionException, (self.job_name, self.status, self.cause, self.restarts))


#: readers of what connector sinks leave in a job's accumulators, by connector ("spark"); a
#: connector registers its own, so the runtime never imports ``raylink.connectors``
_RESULT_READERS: dict[str, Callable[..., Any]] = {}


def register_result_reader(connector: str, reader: Callable[..., Any]) -> None:
    """``reader(result, sink)`` answers ``JobExecutionResult.get_<connector>_dataframe``."""
    _RESULT_READERS[connector] = reader


@dataclass
class JobExecutionResult:
    """Flink's ``JobExecutionResult``: runtime, accumulators and per-task metrics."""

    job_id: str
    job_name: str
    net_runtime_ms: int
    accumulators: dict = field(default_factory=dict)
    task_metrics: list = field(default_factory=list)
    executor_stats: list = field(default_factory=list)
    locations: dict = field(default_factory=dict)

    def get_job_id(self) -> str:
        return self.job_id

    def get_net_runtime(self) -> int:
        return self.net_runtime_ms

    def get_all_accumulator_results(self) -> dict:
        return dict(self.accumulators)

    def get_accumulator_result(self, name: str) -> Any:
        return self.accumulators.get(name)

    def get_spark_dataframe(self, sink: Any = None) -> Any:
        """The Spark DataFrame a result-mode ``sink_to_spark`` sink produced (see connectors.spark)."""
        reader = _RESULT_READERS.get("spark")
        if reader is None:  # registered by raylink.connectors.spark, which sink_to_spark imports
            raise ValueError(
                "get_spark_dataframe: the job has 0 Spark result sinks "
                "(raylink.connectors.spark is not loaded in this process)"
            )
        return reader(self, sink)

    def vertex_metrics(self) -> dict:
        """Per JobVertex: summed counts, max busy/back-pressured time, back-pressure status."""
        return aggregate_by_vertex(self.task_metrics)


COLLECT_PREFIX = "collect-"


def collect_ids(job_vertex: Any) -> list[str]:
    """The ``execute_and_collect`` sinks (collect ids) chained in ``job_vertex``."""
    ids = []
    for config in job_vertex.chain:
        spec = config.operator
        collect_id = (spec.params or {}).get("collect_id", "") if spec.kind == "collect" else ""
        if collect_id.startswith(COLLECT_PREFIX):
            ids.append(collect_id)
    return ids


FETCH_TIMEOUT_S = 0.5  # one long poll of the collect sinks


def collected_records(chunks: list) -> list:
    """The records of ``fetch_collected_chunks``' chunks, in order: a chunk is a list of
    records, or the bytes the TaskExecutor that took them encoded them into
    (``shuffle.collect_codec``)."""
    if len(chunks) == 1:
        chunk = chunks[0]
        return chunk if type(chunk) is list else decode_records(chunk)
    out: list = []
    for chunk in chunks:
        out.extend(chunk if type(chunk) is list else decode_records(chunk))
    return out


class CloseableIterator:
    """The records of ``execute_and_collect`` while the job runs (PyFlink's CloseableIterator).

    Batches come from ``client.fetch_collected`` (pulled from the collect sinks'
    bounded buffers while the job runs, so a slow reader back-pressures the job;
    ``None`` once every sink has ended). With ``limit`` the job is cancelled once
    that many records were read. Usable as
    ``with stream.execute_and_collect() as results: ...``.
    """

    def __init__(self, client: Any, limit: Optional[int] = None) -> None:
        self._client = client
        self._limit = limit
        self._pending: list = []  # the batch being read (cut to what ``limit`` still allows)
        self._cursor: Iterator[Any] = iter(self._pending)  # the reading position in it
        self._returned = 0  # records handed to the cursor so far
        self._exhausted = False
        self._stopped_early = False

    def __iter__(self) -> Iterator[Any]:
        """A ``for`` loop's iterator: the same records as ``next()``, a batch at a time in a
        generator (no Python code per record); ``next()`` continues where a loop broke off."""
        return self._records()

    def _records(self) -> Iterator[Any]:
        while True:
            # one cursor for the loop and next(): a call of it in the loop's body moves it,
            # and close() empties the batch it reads
            yield from self._cursor
            if not self._refill():
                return

    def __next__(self) -> Any:
        for value in self._cursor:
            return value
        if not self._refill():
            raise StopIteration
        return next(self._cursor)

    def _refill(self) -> bool:
        """The next batch into ``_pending``; False once every record was read (or ``limit``
        records were: the job is then closed)."""
        while not self._exhausted:
            if self._limit is not None and self._returned >= self._limit:
                self.close()
                return False
            batch = self._client.fetch_collected(FETCH_TIMEOUT_S)
            if batch is None:
                self._exhausted = True
                self._client.wait()
                if self._client.get_job_status() == JobStatus.FAILED:
                    self._client.get_job_execution_result()  # raises with the cause
                return False
            if batch:
                if type(batch) is not list:
                    batch = list(batch)
                if self._limit is not None:
                    batch = batch[: self._limit - self._returned]
                self._returned += len(batch)
                self._pending, self._cursor = batch, iter(batch)
                return True
        return False

    @property
    def job_client(self) -> Any:
        """The JobClient of the job feeding this iterator."""
        return self._client

    @property
    def job_execution_result(self) -> JobExecutionResult:
        """The job's result once it has ended (waits for it)."""
        return self._client.get_job_execution_result()

    def close(self) -> None:
        """Stop reading; a job still running is cancelled."""
        if not self._exhausted and not JobStatus(self._client.get_job_status()).is_globally_terminal_state():
            self._stopped_early = True
            self._client.cancel()
        self._exhausted = True
        self._pending.clear()  # ends a loop reading it; the batch is this iterator's own

    def __enter__(self) -> "CloseableIterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def read_all(self) -> "CollectedRecords":
        """Every record (up to ``limit``) as a list, then ``close`` (Flink's
        ``executeAndCollect(limit)``)."""
        try:
            records = CollectedRecords(self)
        finally:
            self.close()
        records.job_client = self._client
        return records


class CollectedRecords(list):
    """What ``execute_and_collect(limit=n)`` returns: PyFlink's list of the first ``n``
    records in arrival order (a job still running after them was cancelled), with the
    ``job_client`` of the job that produced them."""

    job_client: Any = None

    @property
    def job_execution_result(self) -> JobExecutionResult:
        return self.job_client.get_job_execution_result()

    def __enter__(self) -> "CollectedRecords":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None
