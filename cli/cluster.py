"""``raylink cluster start | stop | status``: a session cluster on Ray (Flink's ``start-cluster.sh``).

``start`` connects to ``--address`` (else ``$RAY_ADDRESS``; else it starts a local
Ray head, ``ray start --head --block`` in the background, which plain ``ray.init()``
calls on this machine then find) and starts the session actor
(:mod:`raylink.actors.session_cluster`) with ``--executors`` warm TaskExecutors.
``env.execute()`` in any driver connected to that Ray then runs its job on the
session's executors; a driver on this machine that is not connected to Ray submits it
over HTTP to the session's Dispatcher instead (``--rest-bind-address``, ``--rest-port``;
an address other than a loopback one needs TLS, ``--rest-ssl-cert-file`` (and
``--rest-ssl-key-file``), PEM files drivers on this machine then trust, or
``--allow-insecure-rest-bind`` for pickle over plain HTTP). The local Ray's log goes to the user's private
runtime folder (:mod:`raylink.runtime.runtime_dir`).
``stop`` kills the session actor and its executors (and the local Ray that ``start``
started); ``status`` prints the pool's figures and the jobs submitted over HTTP, which
``cancel`` cancels.

:func:`add_parser` declares the sub-commands without importing Ray; the handlers
import it. Not thread-safe (a command line runs once per process).
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any, Optional

from raylink.cli.common import EXIT_CODES_HELP, EXIT_JOB_FAILED, EXIT_OK, CliError

EXAMPLES = """examples:
  raylink cluster start --executors 4          # a local Ray and a session with 4 warm TaskExecutors
  raylink cluster start --address HEAD:6379    # a session on an existing Ray cluster
  raylink cluster start --spark                # and a warm Spark session jobs' get_spark() attach to
  RAY_ADDRESS=HEAD:6379 python job.py          # env.execute() runs on the session's executors
  raylink cluster status                       # the pool, and the jobs submitted over HTTP
  raylink cluster cancel JOB_ID
  raylink cluster stop
"""


def add_parser(sub: Any, fmt: type, handler: Any) -> None:
    """The ``cluster`` sub-command and its ``start`` / ``stop`` / ``status`` actions."""
    cluster = sub.add_parser(
        "cluster",
        help="start, stop or show a session cluster (warm TaskExecutors jobs reuse)",
        description="A session cluster (Flink's session mode) on Ray: a detached actor "
        "keeping a pool of warm TaskExecutors that every job run on that Ray "
        "reuses.",
        epilog=EXAMPLES + "\n" + EXIT_CODES_HELP,
        formatter_class=fmt,
    )
    action = cluster.add_subparsers(dest="cluster_command", required=True)
    address_help = "Ray cluster address (HEAD:6379); default: $RAY_ADDRESS, else the local Ray"
    start = action.add_parser("start", help="start the session cluster (and a local Ray without --address)")
    start.add_argument("--address", help=address_help + " (started if none)")
    start.add_argument("--executors", type=int, default=2, help="warm TaskExecutors to start now (2)")
    start.add_argument(
        "--pool-size",
        type=int,
        default=None,
        help="most idle TaskExecutors kept warm (default: raylink.session.pool-size)",
    )
    start.add_argument(
        "--rest-bind-address",
        default="127.0.0.1",
        help="address the Dispatcher's HTTP endpoint listens on (127.0.0.1); 'none' for no endpoint",
    )
    start.add_argument("--rest-port", type=int, default=0, help="its port (0: any free one)")
    start.add_argument(
        "--rest-signature-validity",
        default=None,
        help="how long a signed request to the Dispatcher stays valid, its nonce remembered against replays "
        "(a duration, e.g. '2 min'; default: rest.signature.validity, 5 min)",
    )
    start.add_argument(
        "--rest-ssl-cert-file",
        default=None,
        help="serve the Dispatcher over HTTPS with this PEM certificate (chain), which drivers on this machine "
        "trust; needed for a non-loopback --rest-bind-address (raylink's PEM form of security.ssl.rest.keystore)",
    )
    start.add_argument(
        "--rest-ssl-key-file", default=None, help="the PEM private key of --rest-ssl-cert-file, if not in it"
    )
    start.add_argument(
        "--allow-insecure-rest-bind",
        action="store_true",
        help="let --rest-bind-address be a non-loopback address although the endpoint speaks pickle over "
        "plain HTTP without TLS (only on a network you trust)",
    )
    start.add_argument(
        "--spark",
        action="store_true",
        help="also keep a warm Spark-on-Ray session that every job's get_spark() attaches to (needs raylink[spark])",
    )
    start.add_argument("--spark-executors", type=int, default=None, help="Spark executors (raylink.spark.executors)")
    start.add_argument(
        "--spark-executor-cores", type=int, default=None, help="cores per Spark executor (raylink.spark.executor-cores)"
    )
    start.add_argument(
        "--spark-executor-memory", default=None, help="memory per Spark executor (raylink.spark.executor-memory)"
    )
    start.add_argument(
        "--spark-warehouse", default=None, help="Spark SQL warehouse folder (raylink.spark.warehouse-dir)"
    )
    start.set_defaults(func=handler("cluster", "cmd_start"))
    stop = action.add_parser("stop", help="stop the session cluster and every TaskExecutor it keeps")
    stop.add_argument("--address", help=address_help)
    stop.set_defaults(func=handler("cluster", "cmd_stop"))
    status = action.add_parser("status", help="the session cluster's pool: idle, leased, created, reused")
    status.add_argument("--address", help=address_help)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=handler("cluster", "cmd_status"))
    cancel = action.add_parser("cancel", help="cancel a job submitted to the session cluster over HTTP")
    cancel.add_argument("job_id", help="the job's id (raylink cluster status lists them)")
    cancel.add_argument("--address", help=address_help)
    cancel.set_defaults(func=handler("cluster", "cmd_cancel"))


def _connect(address: Optional[str], start_local: bool = False) -> Optional[int]:
    """Connect to ``address`` / ``$RAY_ADDRESS`` / the local Ray; with ``start_local`` and none
    running, start a local Ray head first and return its ``ray start`` process id."""
    from raylink.cli.run import connect_ray

    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        connect_ray(address)
        return None
    if start_local:
        # A new head enables Ray's token authentication unless RAY_AUTH_MODE says otherwise, and
        # Ray sends the token to a cluster named by its address only in token mode, read when Ray
        # is imported: say so now (a local Ray found instead gets the same token either way).
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    from raylink.actors.local_ray import local_ray_address
    from raylink.actors.ray_executor import init_ray

    if local_ray_address() is not None:  # a Ray on this machine (a stopped one's address file stays behind)
        init_ray("auto", configure_logging=False, log_to_driver=False)
        return None
    if not start_local:
        raise CliError(
            EXIT_JOB_FAILED,
            "raylink cluster: no session cluster (no Ray running on this machine; give --address or set RAY_ADDRESS)",
        ) from None
    pid, address = _start_local_ray()
    connect_ray(address)
    return pid


def open_ray_log(port: int) -> Any:
    """The log of the local Ray ``start`` starts (Ray on ``port``), opened for writing in the
    user's private runtime folder: created 0600, never through a symbolic link."""
    from raylink.runtime.runtime_dir import open_private_file, runtime_dir

    path = os.path.join(runtime_dir("logs"), f"cluster-ray-{port}.log")
    return open(path, "w", opener=open_private_file)


def _start_local_ray() -> tuple[int, str]:
    """``ray start --head --block`` in the background (its own session, so it outlives this
    command) with raylink's system config; returns its process id and the head's address."""
    from raylink.actors.local_ray import RayStartError, free_port, start_ray_head

    port = free_port()
    try:
        proc, address = start_ray_head(open_ray_log(port), port)
    except RayStartError as exc:
        raise CliError(EXIT_JOB_FAILED, f"raylink cluster start: {exc}") from None
    return proc.pid, address


def _signature_validity_s(text: Optional[str]) -> float:
    """``--rest-signature-validity`` in seconds (rest.signature.validity's default when not given)."""
    from raylink.core.options import RestOptions, parse_duration_ms

    option = RestOptions.SIGNATURE_VALIDITY
    try:
        ms = option.default if text is None else parse_duration_ms(text)
        if option.check is not None:
            option.check(ms)
    except ValueError as exc:
        raise CliError(2, f"raylink cluster start: --rest-signature-validity {text!r}: {exc}") from None
    return ms / 1000.0


def cmd_start(args: Any) -> int:
    from raylink.core.options import RaylinkOptions
    from raylink.runtime.client.rest_endpoint import InsecureBindError, check_rest_bind_address

    if args.executors < 0:
        raise CliError(2, f"raylink cluster start: --executors must be >= 0, got {args.executors}")
    validity_s = _signature_validity_s(args.rest_signature_validity)  # before any Ray is started
    rest_bind_address = None if args.rest_bind_address.lower() == "none" else args.rest_bind_address
    if rest_bind_address is not None:
        try:  # before any Ray is started
            check_rest_bind_address(rest_bind_address, args.allow_insecure_rest_bind or bool(args.rest_ssl_cert_file))
        except InsecureBindError as exc:
            raise CliError(2, f"raylink cluster start: {exc}") from None
    pool_size = RaylinkOptions.SESSION_POOL_SIZE.default if args.pool_size is None else args.pool_size
    ray_pid = _connect(args.address, start_local=True)
    from raylink.actors.cluster import gcs_address, shutdown_ray
    from raylink.actors.ray_executor import _executor_runtime_env
    from raylink.actors.session_entrypoint import session_status, start_session

    info = {"address": gcs_address()}
    if ray_pid is not None:
        info.update(rayPid=ray_pid, rayHost=socket.gethostname())
    try:
        session = start_session(
            args.executors,
            pool_size,
            info,
            _executor_runtime_env(RaylinkOptions.MAX_BATCH_BYTES.default),
            rest_bind_address=rest_bind_address,
            rest_port=args.rest_port,
            allow_insecure_rest_bind=args.allow_insecure_rest_bind,
            signature_validity_s=validity_s,
            rest_tls=(args.rest_ssl_cert_file, args.rest_ssl_key_file) if args.rest_ssl_cert_file else None,
        )
    except (RuntimeError, OSError, ValueError) as exc:
        raise CliError(EXIT_JOB_FAILED, f"raylink cluster start: {exc}") from None
    rest_url = session_status(session).get("restUrl")
    print(
        f"raylink cluster: session cluster started on {info['address']} with {args.executors} warm "
        f"TaskExecutor(s) (pool size {pool_size})" + (" and a local Ray" if ray_pid else "")
    )
    if rest_url:
        print(f"raylink cluster: jobs of drivers on this machine are submitted to {rest_url} (no Ray in the driver)")
        _print_dashboard("raylink cluster: web dashboard at ", rest_url)
    if args.spark:
        spark = _start_spark(args)
        print(
            f"raylink cluster: warm Spark session {spark['applicationId']} ({spark['executors']} executor(s), "
            f"warehouse {spark['warehouse']}) started in {spark['startS']:.1f} s; get_spark() attaches to it"
        )
    if ray_pid is None:
        print(f"run jobs with RAY_ADDRESS={info['address']}")
    shutdown_ray()
    return EXIT_OK


def _print_dashboard(prefix: str, url: str) -> None:
    """The dashboard's address with its token (in the fragment), read from this user's runtime
    folder; nothing when this user has no token for ``url`` (another user's session)."""
    from raylink.runtime.client.rest_tokens import dashboard_address, find_rest_token

    token = find_rest_token(url)
    if token is not None:
        print(prefix + dashboard_address(url, token))


def _start_spark(args: Any) -> dict:
    """``--spark``: the session's warm Spark session (the session cluster is stopped again if it fails)."""
    options = {
        key: value
        for key, value in (
            ("num_executors", args.spark_executors),
            ("executor_cores", args.spark_executor_cores),
            ("executor_memory", args.spark_executor_memory),
            ("warehouse_dir", os.path.abspath(args.spark_warehouse) if args.spark_warehouse else None),
        )
        if value is not None
    }
    try:
        from raylink.connectors.spark.shared_session_actor import start_shared_spark

        return start_shared_spark(options)
    except (ImportError, RuntimeError) as exc:
        from raylink.actors.session_entrypoint import stop_session

        stop_session()
        raise CliError(EXIT_JOB_FAILED, f"raylink cluster start --spark: {exc}") from None


def _shared_spark() -> Any:
    """``raylink.connectors.spark.shared_session_actor``, or None without the ``raylink[spark]``
    extra (no warm Spark session can then have been started)."""
    try:
        from raylink.connectors.spark import shared_session_actor
    except ImportError:
        return None
    return shared_session_actor


def _stop_spark() -> Optional[dict]:
    """The warm Spark session, stopped; None when there was none."""
    shared = _shared_spark()
    return None if shared is None else shared.stop_shared_spark()


def cmd_stop(args: Any) -> int:
    _connect(args.address)
    from raylink.actors.cluster import shutdown_ray
    from raylink.actors.session_entrypoint import stop_session

    spark = _stop_spark()
    status = stop_session()
    shutdown_ray()
    if status is None:
        raise CliError(EXIT_JOB_FAILED, "raylink cluster stop: no session cluster is running on this Ray cluster")
    print(f"raylink cluster: session cluster stopped ({status['killed']} TaskExecutor(s) released)")
    if spark is not None:
        print(f"raylink cluster: warm Spark session {spark.get('applicationId', '')} stopped")
    pid = status.get("rayPid")
    if pid and status.get("rayHost") == socket.gethostname():
        from raylink.actors.local_ray import stop_ray_head

        if stop_ray_head(pid, status.get("address", "")):
            print(f"raylink cluster: stopped the local Ray (pid {pid})")
    return EXIT_OK


def cmd_status(args: Any) -> int:
    _connect(args.address)
    from raylink.actors.cluster import shutdown_ray
    from raylink.actors.dispatcher import submitted_jobs
    from raylink.actors.session_entrypoint import session_status

    status = session_status()
    if status is not None:
        status["spark"] = _spark_status()
        status["submittedJobs"] = submitted_jobs()
    shutdown_ray()
    if status is None:
        raise CliError(EXIT_JOB_FAILED, "raylink cluster status: no session cluster is running on this Ray cluster")
    if args.json:
        print(json.dumps(status, indent=1, sort_keys=True))
        return EXIT_OK
    leased = ", ".join(f"{job[:8]}: {n}" for job, n in status["leased"].items()) or "none"
    print(
        f"session cluster on {status.get('address', '?')}, up {status['uptimeS']:.0f} s\n"
        f"  TaskExecutors idle {status['idle']} (pool size {status['poolSize']}), leased by job: {leased}\n"
        f"  jobs {status['jobs']}, executors created {status['created']}, reused {status['reused']}, "
        f"discarded {status['discarded']}, lost {status['lost']}"
    )
    if status.get("restUrl"):
        print(f"  Dispatcher (job submission over HTTP) at {status['restUrl']}")
        _print_dashboard("  web dashboard at ", status["restUrl"])
    for job in status["submittedJobs"]:
        print(f"    {job['jobId']}  {job['status']:<10} {job['jobName']}")
    spark = status["spark"]
    if spark:
        state = "STOPPED (restart the cluster)" if spark.get("stopped") else "running"
        print(
            f"  Spark session {spark.get('applicationId')} {state}, up {spark.get('upS', 0):.0f} s, "
            f"{spark.get('executors')} executor(s), warehouse {spark.get('warehouse')}"
        )
    return EXIT_OK


def cmd_cancel(args: Any) -> int:
    _connect(args.address)
    from raylink.actors.cluster import shutdown_ray
    from raylink.actors.dispatcher import cancel_submitted_job

    status = cancel_submitted_job(args.job_id)
    shutdown_ray()
    if status is None:
        raise CliError(
            EXIT_JOB_FAILED, f"raylink cluster cancel: no job {args.job_id} was submitted to this session cluster"
        )
    print(f"raylink cluster: job {args.job_id} {status}")
    return EXIT_OK


def add_savepoint_parsers(sub: Any, fmt: type, handler: Any) -> None:
    """Flink's ``savepoint`` and ``stop`` commands, for jobs submitted to the session cluster
    over HTTP (a job whose JobMaster runs in its own driver takes them from its JobClient)."""
    address_help = "Ray cluster address (HEAD:6379); default: $RAY_ADDRESS, else the local Ray"
    savepoint = sub.add_parser(
        "savepoint",
        help="take a savepoint of a running job (the job keeps running)",
        description="Take a savepoint of a job submitted to the session cluster; prints its folder. "
        "Start a program from it with raylink run --from-savepoint PATH.",
        formatter_class=fmt,
    )
    savepoint.add_argument("job_id", metavar="JOB_ID", help="the job's id (raylink cluster status lists them)")
    savepoint.add_argument(
        "directory", nargs="?", help="folder (or URL) the savepoint goes under (default: state.savepoints.dir)"
    )
    savepoint.add_argument("--address", help=address_help)
    savepoint.set_defaults(func=handler("cluster", "cmd_savepoint"))
    stop = sub.add_parser(
        "stop",
        help="stop a running job with a savepoint",
        description="Stop a job submitted to the session cluster with a savepoint: the sources "
        "stop, the savepoint is taken and committed by the sinks, the job ends FINISHED; prints "
        "the savepoint's folder.",
        formatter_class=fmt,
    )
    stop.add_argument("job_id", metavar="JOB_ID", help="the job's id (raylink cluster status lists them)")
    stop.add_argument(
        "--savepoint-path",
        "-p",
        metavar="DIR",
        help="folder (or URL) the savepoint goes under (default: state.savepoints.dir)",
    )
    stop.add_argument(
        "--drain", "-d", action="store_true", help="emit the end of event time first (windows and timers fire)"
    )
    stop.add_argument("--address", help=address_help)
    stop.set_defaults(func=handler("cluster", "cmd_stop_job"))


def _savepoint(args: Any, directory: Optional[str], stop: Optional[str], command: str) -> int:
    if directory is not None and "://" not in directory:
        directory = os.path.abspath(directory)  # the Dispatcher runs in another folder
    _connect(args.address)
    from raylink.actors.cluster import shutdown_ray
    from raylink.actors.dispatcher import savepoint_submitted_job

    try:
        location = savepoint_submitted_job(args.job_id, directory, stop)
    except Exception as exc:  # noqa: BLE001 - the savepoint's failure, as the JobClient raised it
        raise CliError(EXIT_JOB_FAILED, f"raylink {command}: {exc}") from None
    finally:
        shutdown_ray()
    if location is None:
        raise CliError(
            EXIT_JOB_FAILED, f"raylink {command}: no job {args.job_id} was submitted to this session cluster"
        )
    print(location)
    return EXIT_OK


def cmd_savepoint(args: Any) -> int:
    return _savepoint(args, args.directory, None, "savepoint")


def cmd_stop_job(args: Any) -> int:
    return _savepoint(args, args.savepoint_path, "drain" if args.drain else "suspend", "stop")


def _spark_status() -> Optional[dict]:
    """The warm Spark session's figures (the gateway's secret left out), else None."""
    try:
        from raylink.connectors.spark.shared_session import shared_spark_info
    except ImportError:  # no raylink[spark] extra: no warm Spark session can have been started
        return None
    try:
        info = shared_spark_info()
    except Exception:  # noqa: BLE001 - not answering: reported as none
        return None
    if info:
        info.pop("gatewaySecret", None)
    return info


__all__ = [
    "add_parser",
    "add_savepoint_parsers",
    "cmd_cancel",
    "cmd_savepoint",
    "cmd_start",
    "cmd_status",
    "cmd_stop",
    "cmd_stop_job",
    "open_ray_log",
]
