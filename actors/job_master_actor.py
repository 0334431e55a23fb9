"""A job's JobMaster in a Ray actor of its own: detached jobs and JobMaster high availability.

Flink runs a job's JobMaster in the JobManager process, apart from the client that submitted
it: with ``execution.attached: false`` (``flink run -d``) the client returns once the job
runs, and with high availability a JobManager that dies is replaced and recovers its jobs.
raylink's JobMaster (:class:`~raylink.actors.ray_executor.RayJobClient`) lives in the driver
process by default (an attached job ends with its program). This module runs it in a
:class:`JobMasterActor` instead when

* ``execution.attached`` is false (``raylink run --detached``, ``raylink submit --detached``):
  the actor is **detached** (``lifetime="detached"``), named ``raylink-jobmaster-<job id>`` in
  the ``raylink`` namespace, and the job outlives the program; ``execute()`` returns a
  :class:`DetachedJobExecutionResult` and ``execute_async()`` a :class:`JobMasterActorClient`.
  Any process connected to the cluster reattaches by job id (:meth:`JobMasterActorClient.of`,
  :func:`list_jobs`; ``raylink savepoint / stop / cluster cancel`` and ``raylink list``);
* ``high-availability.type`` is not ``none`` (:mod:`raylink.runtime.job.high_availability`):
  the actor is created with ``max_restarts`` (``raylink.jobmaster.max-restarts``), so Ray
  restarts it when its process dies. An attached job's actor is owned by the driver (it ends
  with the program: Flink's ``execution.shutdown-on-attached-exit`` behaviour, which raylink
  always has for attached jobs -- their JobMaster cannot outlive a driver that owns it; the
  driver also cancels it at exit, so its HA entries are removed).

Recovery (Flink's JobMaster regaining leadership): the restarted actor finds the job's program
in the ``JobGraphStore``, fences the previous attempt's TaskExecutors (those it created died
with it -- Ray's ownership -- and their names are freed before new ones are made; executors
leased from a session cluster are taken back and reset, dropping their tasks), and deploys
every task afresh, restored from the ``CompletedCheckpointStore``'s latest checkpoint (none:
the savepoint the job started from, or the start), with the ``CheckpointIDCounter`` going on.
Sinks commit only checkpoints the store holds, so nothing is lost or committed twice.

An ended job's actor stays for ``jobstore.expiration-time`` seconds (its status and result
readable), or :data:`RESULT_GRACE_S` after a client read its result, then kills itself; its
TaskExecutors are released when the job ends. Placement and restarts are configurable:
``actor_options`` of :func:`submit_job` (e.g. a scheduling strategy) and
:data:`JOB_MASTER_ACTOR_OPTIONS`.

Thread-safety: the actor is threaded (``max_concurrency``); the JobMaster is thread-safe.
The client is safe to share between threads.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Optional

import cloudpickle
import ray

from raylink.actors.ray_actors import TASK_EXECUTOR_NAMESPACE
from raylink.core.job_status import JobStatus
from raylink.core.options import (
    ExecutionOptions,
    HighAvailabilityOptions,
    RaylinkOptions,
    SavepointConfigOptions,
    read_option,
    validate_enumerated_values,
)
from raylink.errors import RaylinkError
from raylink.runtime.client.job_result import CloseableIterator, JobExecutionResult, collected_records
from raylink.runtime.job.high_availability import (
    HighAvailabilityServices,
    create_ha_services,
    ha_enabled,
    serialize_program,
)

log = logging.getLogger("raylink")

#: the namespace and name prefix of JobMaster actors
JOB_MASTER_NAMESPACE = TASK_EXECUTOR_NAMESPACE
JOB_MASTER_PREFIX = "raylink-jobmaster-"
#: seconds an ended job's actor stays after a client read its result
RESULT_GRACE_S = 60.0
#: the longest one blocking call to the actor waits (clients loop)
CALL_SLICE_S = 30.0
#: how long recovery waits for the previous attempt's TaskExecutors to be gone
FENCE_TIMEOUT_S = 60.0
#: extra ``.options()`` of every JobMaster actor (e.g. a scheduling strategy pinning it to the
#: head node); ``submit_job``'s ``actor_options`` win over these
JOB_MASTER_ACTOR_OPTIONS: dict = {}


class JobMasterLostError(RaylinkError, RuntimeError):
    """The job's JobMaster actor is gone (no high availability, or its restarts ran out)."""


def job_master_actor_name(job_id: str) -> str:
    """The named actor of job ``job_id``'s JobMaster."""
    return f"{JOB_MASTER_PREFIX}{job_id}"


@dataclass
class SubmittedProgram:
    """What a JobMaster reads of a program: its JobGraph and configuration (the driver's
    ``StreamExecutionEnvironment`` stays in the driver), and the id of a job it recovers."""

    job_graph: Any
    configuration: Any
    job_id: Optional[str] = None

    def get_job_graph(self, job_name: Optional[str] = None) -> Any:
        return self.job_graph


class DetachedJobExecutionResult(JobExecutionResult):
    """Flink's ``DetachedJobExecutionResult``: ``execute()`` of a detached job returns at once;
    only the job id is known (the job goes on)."""

    def get_net_runtime(self) -> int:
        raise RaylinkError(
            f"job {self.job_id} was submitted detached (execution.attached: false): its runtime is "
            f"not known here; JobClient.of(job_id).get_job_execution_result() waits for it"
        )

    def get_all_accumulator_results(self) -> dict:
        raise RaylinkError(
            f"job {self.job_id} was submitted detached (execution.attached: false): its accumulators are "
            f"not known here; JobClient.of(job_id).get_job_execution_result() waits for them"
        )

    def get_accumulator_result(self, name: str) -> Any:
        return self.get_all_accumulator_results()


# -- the JobMaster side --------------------------------------------------------------------------------
def fence_previous_attempt(job_id: str, timeout_s: float = FENCE_TIMEOUT_S) -> int:
    """The TaskExecutors of job ``job_id``'s previous JobMaster attempt stop running its tasks:
    executors leased from a session cluster are taken back (reset: tasks dropped), named ones
    are killed and their names waited free. Returns how many were fenced."""
    from raylink.actors.session_cluster import find_session

    fenced = 0
    session = find_session()
    if session is not None:
        try:
            fenced += ray.get(session.release.remote(job_id, []), timeout=timeout_s)
            ray.get(session.wait_idle.remote(timeout_s), timeout=timeout_s + 5)
        except Exception as exc:  # noqa: BLE001 - a session going away: its executors with it
            log.warning("job %s: the session cluster did not take its executors back: %s", job_id, exc)
    prefix = f"{job_id}/"
    deadline = time.monotonic() + timeout_s
    while True:
        names = [
            a["name"]
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a.get("namespace") == TASK_EXECUTOR_NAMESPACE and a.get("name", "").startswith(prefix)
        ]
        if not names:
            return fenced
        if time.monotonic() > deadline:
            raise JobMasterLostError(
                f"job {job_id}: TaskExecutors of the previous JobMaster attempt still alive after "
                f"{timeout_s:.0f} s: {', '.join(names)}"
            )
        for name in names:
            try:
                ray.kill(ray.get_actor(name, namespace=TASK_EXECUTOR_NAMESPACE), no_restart=True)
                fenced += 1
            except ValueError:  # gone meanwhile
                pass
        time.sleep(0.1)  # Ray frees a killed actor's name asynchronously


def start_job(
    program: bytes, job_id: str, ha: Optional[HighAvailabilityServices], recovered: Optional[bool] = None
) -> Any:
    """Start job ``job_id``'s JobMaster in this process and return it (a started ``RayJobClient``).

    With ``ha``: the program is taken from the JobGraphStore when it holds the job (a recovery:
    the previous attempt is fenced and the job restored from the latest completed checkpoint
    there), else recorded there first; the coordinator keeps its ids and completed checkpoints
    in the store. ``recovered`` None: decided by the store."""
    from raylink.actors.ray_executor import RayJobClient

    store = ha.get_job_graph_store() if ha is not None else None
    if store is not None:
        stored = store.recover_job_graph(job_id)
        if recovered is None:
            recovered = stored is not None
        if stored is None:
            store.put_job_graph(job_id, program)
        else:
            program = stored
    payload = cloudpickle.loads(program)
    conf = payload["configuration"]
    validate_enumerated_values(conf)
    completed_store = counter = None
    if ha is not None:
        completed_store = ha.create_completed_checkpoint_store(job_id)
        counter = ha.create_checkpoint_id_counter(job_id)
    if recovered:
        fenced = fence_previous_attempt(job_id)
        latest = completed_store.latest() if completed_store is not None else None
        if latest is not None:  # the job's own latest completed checkpoint, as a savepoint restore
            conf = type(conf)().add_all(conf)
            conf.set_string(SavepointConfigOptions.SAVEPOINT_PATH.key, latest[1])
        log.warning(
            "job %s: JobMaster recovered (%d TaskExecutors of the previous attempt fenced); restoring %s",
            job_id,
            fenced,
            f"checkpoint {latest[0]} ({latest[1]})" if latest else "from the start (no completed checkpoint)",
        )
    client = RayJobClient(SubmittedProgram(payload["job_graph"], conf, job_id), None)
    try:
        if client.coordinator is not None and counter is not None:
            client.coordinator.use_high_availability(counter, completed_store)
        client.recovered = bool(recovered)
        return client.start()
    except BaseException:
        client._release_resources()
        raise


@ray.remote(num_cpus=0)
class JobMasterActor:
    """One job's JobMaster (see the module docstring); started or recovered in ``__init__``."""

    def __init__(self, job_id: str, program: bytes, ha_settings: Optional[dict], detached: bool) -> None:
        from raylink.core.configuration import Configuration

        self.job_id = job_id
        self.detached = detached
        self.client: Any = None
        self._error: Optional[BaseException] = None
        self._ready = threading.Event()
        self._result_read = threading.Event()
        self._program = program
        self._conf = Configuration()
        for key, value in (ha_settings or {}).items():
            self._conf.set_string(key, value)
        self.incarnation = 1 + int(bool(ray.get_runtime_context().was_current_actor_reconstructed))
        self.started_at = time.time()
        self._ha: Optional[HighAvailabilityServices] = None
        self._ha_error: Optional[BaseException] = None
        try:
            self._ha = create_ha_services(self._conf)
            if self._ha is not None:  # how many JobMaster processes this job has had (this one included)
                record = f"jobmaster-{job_id}"
                self.incarnation = int((self._ha.get_record(record) or {}).get("incarnation", 0)) + 1
                self._ha.put_record(record, {"incarnation": self.incarnation})
        except Exception as exc:  # noqa: BLE001 - reported by ready()
            self._ha_error = exc
        threading.Thread(target=self._run, name=f"JobMasterActor {job_id[:6]}", daemon=True).start()

    def _run(self) -> None:
        ha = self._ha
        try:
            if self._ha_error is not None:
                raise self._ha_error
            self.client = start_job(self._program, self.job_id, ha)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever asks (ready())
            self._error = exc
            self._ready.set()
            self._retire(expire_s=RESULT_GRACE_S)
            return
        self._ready.set()
        self.client.wait()
        if ha is not None:  # globally terminal: nothing to recover any more
            try:
                ha.cleanup_job_data(self.job_id)
                ha.remove_record(f"jobmaster-{self.job_id}")
            except Exception as exc:  # noqa: BLE001 - the job has ended all the same
                log.warning("job %s: its high-availability entries were not removed: %s", self.job_id, exc)
        self._retire(expire_s=float(read_option(self._conf, HighAvailabilityOptions.JOB_STORE_EXPIRATION)))

    def _retire(self, expire_s: float) -> None:
        """Keep the ended job readable for ``expire_s`` (RESULT_GRACE_S once its result was read), then go."""
        deadline = time.monotonic() + expire_s
        while time.monotonic() < deadline:
            if self._result_read.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
                deadline = min(deadline, time.monotonic() + RESULT_GRACE_S)
                self._result_read.clear()
        try:
            ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already going
            pass

    def _started(self, timeout: float) -> Any:
        if not self._ready.wait(min(timeout, CALL_SLICE_S)):
            return None
        if self._error is not None:
            raise self._error
        return self.client

    # -- the remote JobClient API --------------------------------------------------------------------
    def ready(self, timeout: float = CALL_SLICE_S) -> Optional[dict]:
        """The job's summary once its JobMaster runs (raises why it could not start); None if not yet."""
        client = self._started(timeout)
        return None if client is None else self.summary()

    def summary(self) -> dict:
        client = self.client
        status = str(client.get_job_status()) if client is not None else ("FAILED" if self._error else "INITIALIZING")
        return {
            "jobId": self.job_id,
            "jobName": client.job_name if client is not None else "",
            "status": status,
            "detached": self.detached,
            "jobMasterIncarnation": self.incarnation,
            "recovered": bool(getattr(client, "recovered", False)),
            "numRestarts": client.num_restarts if client is not None else 0,
            "pid": os.getpid(),
            "startTime": int(self.started_at * 1000),
        }

    def pid(self) -> int:
        return os.getpid()

    def wait(self, timeout: float) -> bool:
        client = self._started(timeout)
        if client is None:
            return False
        return client.wait(min(timeout, CALL_SLICE_S))

    def cancel(self) -> str:
        client = self._started(CALL_SLICE_S)
        if client is not None:
            client.cancel()
            return str(client.get_job_status())
        return "INITIALIZING"

    def result(self, timeout: float) -> Optional[bytes]:
        """The pickled JobExecutionResult (or the exception the job ended with), None if not ended yet."""
        client = self._started(timeout)
        if client is None or not client.wait(min(timeout, CALL_SLICE_S)):
            return None
        self._result_read.set()
        try:
            return cloudpickle.dumps(client.get_job_execution_result(0))
        except Exception as exc:  # noqa: BLE001 - the job failed or was cancelled: its exception
            try:
                return cloudpickle.dumps(exc)
            except Exception:  # noqa: BLE001 - an exception that does not pickle
                return cloudpickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))

    def savepoint(self, directory: Optional[str], stop: Optional[str], timeout: float) -> str:
        """A savepoint of the job (``stop`` None) or a stop with one ("suspend" / "drain"); its folder."""
        from raylink.state.savepoint_targets import check_savepoint_target

        client = self._started(CALL_SLICE_S)
        if client is None:
            raise JobMasterLostError(f"job {self.job_id}: its JobMaster is still starting")
        directory = check_savepoint_target(directory, client.configuration, "raylink savepoint")
        future = (
            client.trigger_savepoint(directory)
            if stop is None
            else client.stop_with_savepoint(stop == "drain", directory)
        )
        return future.result(timeout)

    def checkpoint_stats(self) -> dict:
        client = self._started(CALL_SLICE_S)
        return client.get_checkpoint_stats() if client is not None else {}

    def metrics(self, kind: str) -> Any:
        client = self._started(CALL_SLICE_S)
        if client is None:
            return [] if kind == "subtasks" else {}
        return client.get_vertex_metrics() if kind == "vertices" else client.get_metrics()

    def task_executor_pids(self) -> list[int]:
        client = self._started(CALL_SLICE_S)
        if client is None:
            return []
        return [loc.get("pid") for loc in client.locations.values() if loc.get("pid")]

    def fetch_collected_chunks(self, timeout: float) -> Optional[list]:
        client = self._started(timeout)
        return [] if client is None else client.fetch_collected_chunks(min(timeout, CALL_SLICE_S))


# -- the client side -----------------------------------------------------------------------------------
def _unpickle_answer(data: bytes) -> Any:
    value = cloudpickle.loads(data)
    if isinstance(value, BaseException):
        raise value
    return value


class JobMasterActorClient:
    """A JobClient of a job whose JobMaster runs in a :class:`JobMasterActor` (PyFlink's
    ``JobClient`` calls; ``of(job_id)`` reattaches from any process connected to the cluster)."""

    def __init__(self, handle: Any, job_id: str, job_name: str, execution_graph: Any = None) -> None:
        self._handle = handle
        self.job_id = job_id
        self.job_name = job_name
        self.execution_graph = execution_graph
        self.executions = (
            {ev.current_execution.attempt_id: ev for ev in execution_graph.all_vertices()} if execution_graph else {}
        )
        self._result: Any = None
        self._done = False

    @classmethod
    def of(cls, job_id: str) -> "JobMasterActorClient":
        """Reattach to job ``job_id`` (a detached or high-availability job of the connected Ray
        cluster); raises ``ValueError`` naming the job when no JobMaster actor holds it."""
        from raylink.actors.ray_executor import ensure_ray

        ensure_ray()
        try:
            handle = ray.get_actor(job_master_actor_name(job_id), namespace=JOB_MASTER_NAMESPACE)
        except ValueError:
            raise ValueError(
                f"no job {job_id} on this Ray cluster (no JobMaster actor {job_master_actor_name(job_id)!r} "
                f"in namespace {JOB_MASTER_NAMESPACE!r}: it never ran detached, or ended and expired)"
            ) from None
        summary = ray.get(handle.summary.remote(), timeout=CALL_SLICE_S + 10)
        return cls(handle, job_id, summary["jobName"])

    def _call(self, method: str, *args: Any, timeout: float = CALL_SLICE_S + 30) -> Any:
        try:
            return ray.get(getattr(self._handle, method).remote(*args), timeout=timeout)
        except ray.exceptions.RayActorError as exc:
            raise JobMasterLostError(
                f"job {self.job_id}: its JobMaster actor is gone ({type(exc).__name__}); "
                f"high-availability.type none does not restart it"
            ) from None

    def get_job_id(self) -> str:
        return self.job_id

    def get_job_status(self) -> JobStatus:
        return JobStatus(self._call("summary")["status"]) if not self._done else self._final_status()

    def _final_status(self) -> JobStatus:
        result = self._result
        if isinstance(result, JobExecutionResult):
            return JobStatus.FINISHED
        return JobStatus(getattr(result, "status", JobStatus.FAILED))

    def summary(self) -> dict:
        """The job's id, name, status, JobMaster incarnation and restarts."""
        return self._call("summary")

    def job_master_pid(self) -> int:
        """The process id of the job's JobMaster actor (for failover tests and benchmarks)."""
        return self._call("pid")

    def task_executor_pids(self) -> list[int]:
        return self._call("task_executor_pids")

    def cancel(self) -> None:
        self._call("cancel")

    def wait(self, timeout: Optional[float] = None) -> bool:
        """True once the job has ended (its result is fetched then)."""
        if self._done:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = CALL_SLICE_S if deadline is None else max(0.0, deadline - time.monotonic())
            answer = self._call("result", min(left, CALL_SLICE_S))
            if answer is not None:
                try:
                    self._result = _unpickle_answer(answer)
                except BaseException as exc:  # noqa: BLE001 - kept and raised by get_job_execution_result
                    self._result = exc
                self._done = True
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def get_job_execution_result(self, timeout: Optional[float] = None) -> JobExecutionResult:
        if not self.wait(timeout):
            raise TimeoutError(f"job '{self.job_name}' did not finish within {timeout} s")
        if isinstance(self._result, BaseException):
            raise self._result
        return self._result

    def trigger_savepoint(self, savepoint_directory: Optional[str] = None, formatType: Any = None) -> Future:
        return self._savepoint(savepoint_directory, None)

    def stop_with_savepoint(
        self,
        advance_to_end_of_event_time: bool = False,
        savepoint_directory: Optional[str] = None,
        formatType: Any = None,
    ) -> Future:
        return self._savepoint(savepoint_directory, "drain" if advance_to_end_of_event_time else "suspend")

    def _savepoint(self, directory: Optional[str], stop: Optional[str]) -> Future:
        if directory is not None and "://" not in directory:
            directory = os.path.abspath(directory)  # the JobMaster runs in another folder
        future: Future = Future()
        ref = self._handle.savepoint.remote(directory, stop, 600.0)

        def done(_: Any) -> None:
            try:
                future.set_result(ray.get(ref))
            except BaseException as exc:  # noqa: BLE001 - the savepoint's failure, for the caller
                future.set_exception(exc.cause if isinstance(exc, ray.exceptions.RayTaskError) else exc)

        ref.future().add_done_callback(done)
        return future

    def get_checkpoint_stats(self) -> dict:
        return self._call("checkpoint_stats")

    def get_metrics(self) -> list[dict]:
        return self._call("metrics", "subtasks")

    def get_vertex_metrics(self) -> dict:
        return self._call("metrics", "vertices")

    def fetch_collected(self, timeout: float = 0.5) -> Optional[list]:
        chunks = self._call("fetch_collected_chunks", timeout)
        return None if chunks is None else collected_records(chunks)

    def collect(self, limit: Optional[int] = None) -> CloseableIterator:
        return CloseableIterator(self, limit)


def list_jobs() -> list[dict]:
    """Every job with a JobMaster actor on the connected Ray cluster (detached or highly
    available), oldest first: their summaries."""
    from raylink.actors.ray_executor import ensure_ray

    ensure_ray()
    handles = [
        ray.get_actor(a["name"], namespace=JOB_MASTER_NAMESPACE)
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a.get("namespace") == JOB_MASTER_NAMESPACE and a.get("name", "").startswith(JOB_MASTER_PREFIX)
    ]
    refs = [h.summary.remote() for h in handles]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=10) if refs else ([], [])
    out = []
    for ref in ready:
        try:
            out.append(ray.get(ref))
        except Exception:  # noqa: BLE001 - it ended meanwhile
            pass
    return sorted(out, key=lambda s: s["startTime"])


def job_master_actors(dashboard: str) -> list[tuple[str, str]]:
    """``(job id, actor state)`` of every JobMaster actor the Ray dashboard at ``dashboard`` lists
    (its state API: no Ray connection needed); empty when it cannot say."""
    try:
        from ray.util.state import list_actors

        actors = list_actors(
            address=dashboard,
            filters=[("class_name", "=", "JobMasterActor")],
            raise_on_missing_output=False,
            _explain=False,
        )
    except Exception:  # noqa: BLE001 - an older dashboard, no state API, refused: nothing to show
        return []
    return sorted(
        (a.name[len(JOB_MASTER_PREFIX) :], a.state)
        for a in actors
        if (a.name or "").startswith(JOB_MASTER_PREFIX) and a.state != "DEAD"
    )


def find_job(job_id: str) -> Optional[JobMasterActorClient]:
    """The JobClient of job ``job_id`` if a JobMaster actor holds it, else None."""
    try:
        return JobMasterActorClient.of(job_id)
    except ValueError:
        return None


def runs_in_actor(configuration: Any) -> bool:
    """A job of ``configuration`` has its JobMaster in a :class:`JobMasterActor`: it is detached
    (``execution.attached: false``) or highly available (``high-availability.type``)."""
    return not configuration.get(ExecutionOptions.ATTACHED) or ha_enabled(configuration)


def ha_settings_of(conf: Any) -> dict:
    """The options the JobMaster actor reads before it has the program (HA and retention)."""
    keys = [HighAvailabilityOptions.TYPE, HighAvailabilityOptions.STORAGE_PATH, HighAvailabilityOptions.CLUSTER_ID]
    keys.append(HighAvailabilityOptions.JOB_STORE_EXPIRATION)
    return {opt.key: conf.get_string(opt.key) for opt in keys if conf.contains_key(opt.key)}


def _cancel_at_exit(client: JobMasterActorClient) -> None:
    """An attached job ends with its program (cancelled; its HA entries removed)."""
    try:
        if not client.wait(0):
            client.cancel()
            client.wait(10)
    except Exception:  # noqa: BLE001 - Ray is going down with the program
        pass


def submit_job(env: Any, job_name: Optional[str] = None, actor_options: Optional[dict] = None) -> JobMasterActorClient:
    """Run ``env``'s program with its JobMaster in a :class:`JobMasterActor` (detached when
    ``execution.attached`` is false; restarted by Ray with high availability); returns its
    client once the job runs (raises what kept it from starting)."""
    from raylink.actors.ray_executor import _executor_runtime_env, ensure_ray
    from raylink.graph.execution_graph import build_execution_graph
    from raylink.runtime.client.rest_cluster_client import _absolute_paths, _by_value, _program_modules

    conf = env.configuration
    detached = not conf.get(ExecutionOptions.ATTACHED)
    ha = create_ha_services(conf)  # a missing storage folder is refused here, before anything runs
    ensure_ray()
    with _by_value(_program_modules()):  # the JobGraph holds the program's functions pickled
        job_graph = env.get_job_graph(job_name)
        conf = _absolute_paths(conf)
        program = serialize_program(job_graph, conf)
    import uuid

    job_id = uuid.uuid4().hex
    max_restarts = read_option(conf, HighAvailabilityOptions.JOB_MASTER_MAX_RESTARTS) if ha is not None else 0
    options: dict = {
        "name": job_master_actor_name(job_id),
        "namespace": JOB_MASTER_NAMESPACE,
        "max_restarts": max_restarts,
        "max_task_retries": -1 if ha is not None else 0,  # calls in flight wait for the restarted JobMaster
        "max_concurrency": 64,
        "runtime_env": _executor_runtime_env(read_option(conf, RaylinkOptions.MAX_BATCH_BYTES), conf),
    }
    if detached:
        options["lifetime"] = "detached"
    options.update(JOB_MASTER_ACTOR_OPTIONS)
    options.update(actor_options or {})
    handle = JobMasterActor.options(**options).remote(job_id, program, ha_settings_of(conf), detached)
    try:
        summary = None
        while summary is None:
            summary = ray.get(handle.ready.remote(CALL_SLICE_S))
    except BaseException as exc:
        try:
            ray.kill(handle, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        if ha is not None:
            ha.cleanup_job_data(job_id)
            ha.remove_record(f"jobmaster-{job_id}")
        if isinstance(exc, ray.exceptions.RayTaskError):
            raise exc.cause from None
        raise
    client = JobMasterActorClient(handle, job_id, summary["jobName"], build_execution_graph(job_graph))
    if not detached:
        atexit.register(_cancel_at_exit, client)
    return client


__all__ = [
    "DetachedJobExecutionResult",
    "JOB_MASTER_ACTOR_OPTIONS",
    "JOB_MASTER_NAMESPACE",
    "JobMasterActor",
    "JobMasterActorClient",
    "JobMasterLostError",
    "SubmittedProgram",
    "fence_previous_attempt",
    "find_job",
    "ha_settings_of",
    "job_master_actor_name",
    "job_master_actors",
    "list_jobs",
    "runs_in_actor",
    "start_job",
    "submit_job",
]
