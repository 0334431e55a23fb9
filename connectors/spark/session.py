"""Spark on the job's Ray cluster, through RayDP.

``get_spark()`` returns the Spark session raylink reads and writes with:

* a session the user already started with ``raydp.init_spark`` is reused (and
  never stopped by raylink);
* otherwise raylink connects to Ray the way the executor does (``RAY_ADDRESS``
  or a local Ray), checks that a Java runtime exists, and starts Spark-on-Ray
  with the Java 17 module openings and small defaults (1 executor, 1 core,
  1 GiB; configurable by arguments or ``raylink.spark.*`` configuration keys).

``stop()`` releases only what raylink started: the bridge actor, the Spark
session it started, and the local Ray it started for Spark.

Start-up, as fast as RayDP allows (the phases are in :func:`start_phases`): Spark's
driver JVM (``spark-submit``, the slowest part) is launched in a thread while RayDP
starts its master actor and app-master JVM; the executors then register with the
master; the driver JVM's own connection to Ray (which only ``from_spark`` and RayDP's
``ray.data.from_spark`` need) is made in a thread after ``get_spark`` returned
(:func:`wait_driver_connected` waits for it).

Thread-safety: ``get_spark``/``stop`` serialize on one lock; the start threads only
touch pyspark's and RayDP's own locked state.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from typing import Any, Dict, Optional

from raylink.actors.ray_executor import init_ray
from raylink.connectors.spark import bridge, shared_session
from raylink.connectors.spark.errors import SparkStartError
from raylink.connectors.spark.jvm_logging import driver_jvm_output, log4j2_spark_configs
from raylink.connectors.spark.table_formats import table_format_configs
from raylink.core.options import ConfigOption, SparkConnectorOptions
from raylink.runtime.logging_setup import setup_logging

#: Java 17 packages Spark and Ray's Java workers reflect into (see DESIGN.md)
JAVA_OPEN_PACKAGES = (
    "java.lang",
    "java.lang.invoke",
    "java.io",
    "java.net",
    "java.nio",
    "java.math",
    "java.text",
    "java.util",
    "java.util.concurrent",
    "java.util.concurrent.atomic",
    "sun.nio.ch",
    "sun.nio.cs",
    "sun.security.action",
    "sun.util.calendar",
)
JAVA_OPTION_KEYS = (
    "spark.ray.raydp_app_master.extraJavaOptions",
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
)
#: JIT and GC of the two JVMs that coordinate (RayDP's app master, Spark's driver): only the
#: quick compiler and the serial collector, so that on a small machine they do not take the
#: cores the executors and Ray start on (measured on 2 cores: Spark on Ray ready 1.5-2 s
#: sooner, the first query 0.5 s sooner). The executors, which run the data, keep HotSpot's
#: defaults (with the quick compiler only, Spark's native pipeline on 10 M rows took 2.5x as
#: long). A user's own options come after these, and HotSpot takes the last of a flag.
COORDINATOR_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
COORDINATOR_JAVA_OPTION_KEYS = JAVA_OPTION_KEYS[:2]

DEFAULT_APP_NAME = "raylink"

# the options get_spark(configuration=...) reads (raylink.core.options.SparkConnectorOptions)
CONF_EXECUTORS = SparkConnectorOptions.EXECUTORS
CONF_EXECUTOR_CORES = SparkConnectorOptions.EXECUTOR_CORES
CONF_EXECUTOR_MEMORY = SparkConnectorOptions.EXECUTOR_MEMORY
CONF_WAREHOUSE = SparkConnectorOptions.WAREHOUSE_DIR
CONF_USE_SESSION_CLUSTER = SparkConnectorOptions.USE_SESSION_CLUSTER
CONF_PREFIX = SparkConnectorOptions.CONF.key  # raylink.spark.conf.<spark key> = value

_SMALL_DEFAULTS = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}

#: comma-separated lists a user's value is added to rather than replacing raylink's
_LIST_KEYS = ("spark.jars", "spark.sql.extensions")

_lock = threading.RLock()
_state: Dict[str, Any] = {"spark": None, "started_spark": False, "started_ray": False}
_phases: Dict[str, float] = {}
_connected = threading.Event()  # the driver JVM is connected to Ray (or raylink did not start Spark)
_connect_error: Dict[str, str] = {}
CONNECT_TIMEOUT_S = 300.0


def java_options() -> str:
    return " ".join(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in JAVA_OPEN_PACKAGES)


def spark_configs(extra: Optional[Dict[str, str]] = None, warehouse_dir: Optional[str] = None) -> Dict[str, str]:
    """Spark configs raylink starts Spark with: Java 17 openings under all three keys, small
    defaults, the driver JVM's log4j2 configuration (:mod:`~raylink.connectors.spark.jvm_logging`),
    Delta's and Iceberg's local jars and catalogs when set up (:mod:`.table_formats`), then
    ``extra`` (user keys win; Java options, ``spark.jars`` and ``spark.sql.extensions`` are appended)."""
    configs = dict(_SMALL_DEFAULTS)
    opens = java_options()
    for key in JAVA_OPTION_KEYS:
        configs[key] = f"{opens} {COORDINATOR_JAVA_OPTIONS}" if key in COORDINATOR_JAVA_OPTION_KEYS else opens
    for key, value in log4j2_spark_configs().items():  # Spark's log lines to the run's log folder
        configs[key] = f"{configs[key]} {value}" if key in JAVA_OPTION_KEYS else value
    if warehouse_dir:
        configs["spark.sql.warehouse.dir"] = os.path.abspath(warehouse_dir)
    configs.update(table_format_configs(warehouse_dir))  # Delta's and Iceberg's local jars and catalogs
    for key, value in (extra or {}).items():
        if key in JAVA_OPTION_KEYS:
            configs[key] = f"{configs[key]} {value}"
        elif key in _LIST_KEYS and configs.get(key):  # the user's jars and extensions join raylink's
            configs[key] = f"{configs[key]},{value}"
        else:
            configs[key] = str(value)
    return configs


def find_java() -> str:
    """The java executable Spark will use, or SparkStartError saying what is missing."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = os.path.join(java_home, "bin", "java")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
        raise SparkStartError(
            f"Spark cannot start: JAVA_HOME={java_home!r} has no executable bin/java. "
            "Point JAVA_HOME to a Java 17 runtime or unset it to use 'java' from PATH "
            "(install one with: apt-get install openjdk-17-jre-headless)."
        )
    found = shutil.which("java")
    if found is None:
        raise SparkStartError(
            "Spark cannot start: no Java runtime found (JAVA_HOME is not set and there is no "
            "'java' on PATH). Install Java 17 (apt-get install openjdk-17-jre-headless) or set JAVA_HOME."
        )
    return found


def existing_raydp_session() -> Any:
    """The session of ``raydp.init_spark`` in this process, if any."""
    try:
        import raydp.context as raydp_context
    except ImportError:
        return None
    context = getattr(raydp_context, "_global_spark_context", None)
    return getattr(context, "_spark_session", None) if context is not None else None


def is_raydp_session(spark: Any) -> bool:
    """True for a Spark session running on Ray through RayDP."""
    if spark is None:
        return False
    if spark is existing_raydp_session():
        return True
    try:
        return str(spark.sparkContext.master).startswith("ray://")
    except Exception:
        return False


def _conf_value(configuration: Any, option: ConfigOption) -> Any:
    return option.default if configuration is None else configuration.get(option)


def get_spark(
    num_executors: Optional[int] = None,
    executor_cores: Optional[int] = None,
    executor_memory: Optional[str] = None,
    configs: Optional[Dict[str, str]] = None,
    app_name: Optional[str] = None,
    warehouse_dir: Optional[str] = None,
    configuration: Any = None,
) -> Any:
    """The Spark-on-Ray session: the user's ``raydp.init_spark`` session, else one raylink starts."""
    with _lock:
        existing = existing_raydp_session()
        if existing is not None:
            return existing
        ours = _state["spark"]
        if ours is not None:
            return ours
        use_session_cluster = bool(_conf_value(configuration, CONF_USE_SESSION_CLUSTER))
        num_executors = int(num_executors or _conf_value(configuration, CONF_EXECUTORS))
        executor_cores = int(executor_cores or _conf_value(configuration, CONF_EXECUTOR_CORES))
        executor_memory = executor_memory or _conf_value(configuration, CONF_EXECUTOR_MEMORY)
        warehouse_dir = warehouse_dir or _conf_value(configuration, CONF_WAREHOUSE)
        extra = dict(configs or {})
        if configuration is not None:
            for key in configuration.key_set():
                if key.startswith(CONF_PREFIX):
                    extra.setdefault(key[len(CONF_PREFIX) :], configuration.get_string(key))
        if num_executors < 1 or executor_cores < 1:
            raise ValueError(f"Spark needs at least one executor with one core, got {num_executors} x {executor_cores}")
        find_java()  # fail before anything is started
        import ray
        import raydp

        setup_logging()  # Ray's notices (imported now) to the run's log file, before Ray starts

        # Spark's Python workers must run this interpreter (else "No module named pyspark").
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        configs = spark_configs(extra, warehouse_dir)
        _phases.clear()
        _connected.clear()
        _connect_error.clear()
        started = time.perf_counter()
        started_ray = False
        driver_jvm = None
        try:
            if not ray.is_initialized():
                address = os.environ.get("RAY_ADDRESS")
                new_local = _prepare_new_local_ray(address)
                if new_local:  # the driver JVM needs Ray only after return: it starts while Ray does
                    driver_jvm = _launch_driver_jvm(configs, num_executors, executor_cores, executor_memory)
                init_ray(
                    address,
                    ignore_reinit_error=True,
                    log_to_driver=False,
                    configure_logging=False,
                    **({"include_dashboard": False} if new_local else {}),
                )
                started_ray = True
                _phases["Ray (started for Spark)" if new_local else "Ray (connected)"] = time.perf_counter() - started
            if use_session_cluster and driver_jvm is None:
                shared = _attach_shared_spark(warehouse_dir)
                if shared is not None:
                    _state.update(spark=shared, started_spark=False, started_ray=started_ray, shared=True)
                    return shared
            spark_started = time.perf_counter()
            if driver_jvm is None:
                driver_jvm = _launch_driver_jvm(configs, num_executors, executor_cores, executor_memory)
            spark = raydp.init_spark(
                app_name or DEFAULT_APP_NAME,
                num_executors,
                executor_cores,
                executor_memory,
                fault_tolerant_mode=False,  # connected below, in a thread
                configs=configs,
            )
            driver_jvm.join()
        except BaseException as exc:
            if driver_jvm is not None:
                _stop_driver_jvm(driver_jvm)
            if started_ray:
                ray.shutdown()
            if isinstance(exc, SparkStartError):  # says itself what is wrong
                raise
            raise SparkStartError(
                f"Spark on Ray failed to start ({num_executors} executor(s) x {executor_cores} core(s), "
                f"{executor_memory}): {type(exc).__name__}: {exc}"
            ) from exc
        _phases["Spark on Ray (master, driver, context)"] = time.perf_counter() - spark_started
        spark.sparkContext.setLogLevel("ERROR")
        threading.Thread(target=_connect_driver_to_ray, name="raylink-spark-connect", daemon=True).start()
        _state.update(spark=spark, started_spark=True, started_ray=started_ray)
        return spark


def _attach_shared_spark(warehouse_dir: Optional[str]) -> Any:
    """The session cluster's warm Spark session, attached to (None: no session cluster keeps one)."""
    info = shared_session.shared_spark_info()
    if info is None or not info.get("running"):
        return None
    started = time.perf_counter()
    spark = shared_session.attach(info)
    # A program's own spark.stop() (or ``with spark:``) leaves the shared session, as raylink's
    # stop() does, instead of stopping it for every other program.
    spark.stop = spark.sparkContext.stop = _leave_shared_spark
    _phases["attached to the session cluster's Spark"] = time.perf_counter() - started
    _state["namespace"] = info["namespace"]
    if warehouse_dir and os.path.abspath(warehouse_dir) != info["warehouse"].replace("file:", ""):
        import logging

        logging.getLogger(__name__).warning(
            "the session cluster's Spark session keeps its warehouse in %s; %s is not used",
            info["warehouse"],
            warehouse_dir,
        )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _leave_shared_spark() -> None:
    stop(shutdown_ray=False)


def attached_to_shared_spark() -> bool:
    """True while this process uses the session cluster's shared Spark session."""
    return bool(_state.get("shared"))


def spark_namespace() -> Optional[str]:
    """The Ray namespace RayDP's actors of the session in use live in (None: this driver's)."""
    return _state.get("namespace")


def _prepare_new_local_ray(address: Optional[str]) -> bool:
    """True when ``ray.init(address)`` will start a new local Ray (no address, and no cluster
    started with ``ray start`` on this machine). Ray's own default for a new local cluster, token
    authentication unless ``RAY_AUTH_MODE`` says otherwise, is then settled now (Ray's function
    sets the variable in this process), so that a JVM started before ``ray.init`` inherits it.
    False (nothing settled) when it cannot be told, e.g. another Ray version."""
    try:
        from ray._private.authentication.authentication_token_setup import enable_token_auth_by_default
        from ray._private.services import canonicalize_bootstrap_address

        if canonicalize_bootstrap_address(address) is not None:
            return False
        enable_token_auth_by_default()
    except Exception:
        return False
    return True


def _launch_driver_jvm(
    configs: Dict[str, str], num_executors: int, executor_cores: int, executor_memory: Any
) -> threading.Thread:
    """Start pyspark's gateway (Spark's driver JVM) in a thread, with the JVM options RayDP will
    give it, so it starts while RayDP starts its master; the session then reuses it."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from raydp.spark import SparkCluster

    # the driver settings RayDP derives (class path, java agent, host), computed as RayDP does
    probe = SparkCluster.__new__(SparkCluster)
    probe._configs = dict(configs)
    probe._num_executors, probe._executor_cores, probe._executor_memory = (
        num_executors,
        executor_cores,
        executor_memory,
    )
    probe._prepare_spark_configs()
    conf = SparkConf(loadDefaults=False)
    conf.setAll(list(probe._configs.items()))

    def launch() -> None:
        started = time.perf_counter()
        try:
            gateway = launch_gateway(conf, popen_kwargs=driver_jvm_output())  # its output: the log folder
            SparkContext._ensure_initialized(gateway=gateway, conf=conf)
        except Exception:  # RayDP's own start launches it (and reports the error)
            return
        _phases["driver JVM (in parallel)"] = time.perf_counter() - started

    thread = threading.Thread(target=launch, name="raylink-spark-driver-jvm", daemon=True)
    thread.start()
    return thread


def _stop_driver_jvm(launch: threading.Thread) -> None:
    """After a failed start: end the driver JVM the launch thread started, if no context uses it."""
    from pyspark import SparkContext

    launch.join(CONNECT_TIMEOUT_S)
    with SparkContext._lock:
        gateway = SparkContext._gateway
        if gateway is None or SparkContext._active_spark_context is not None:
            return
        SparkContext._gateway = SparkContext._jvm = None
    try:
        gateway.shutdown()
        gateway.proc.kill()
    except Exception:  # already gone
        pass


def _connect_driver_to_ray() -> None:
    """Connect Spark's driver JVM to Ray (what RayDP's ``fault_tolerant_mode`` does at start)."""
    import raydp.context as raydp_context

    started = time.perf_counter()
    try:
        context = raydp_context._global_spark_context
        cluster = getattr(context, "_spark_cluster", None)
        if cluster is None:
            raise SparkStartError("the Spark session was stopped")
        cluster.connect_spark_driver_to_ray()
        context._fault_tolerant_mode = True
    except Exception as exc:
        _connect_error["error"] = f"{type(exc).__name__}: {exc}"
    else:
        _phases["driver JVM to Ray (after return)"] = time.perf_counter() - started
    finally:
        _connected.set()


def wait_driver_connected(timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Wait until Spark's driver JVM is connected to Ray (RayDP's recoverable conversions need
    it); a session raylink did not start is the user's: taken as it is."""
    if not _state["started_spark"] or _state["spark"] is None:
        return
    if not _connected.wait(timeout):
        raise SparkStartError(f"Spark's driver JVM did not connect to Ray within {timeout:.0f} s")
    if _connect_error:
        raise SparkStartError(f"Spark's driver JVM could not connect to Ray: {_connect_error['error']}")


def start_phases() -> Dict[str, float]:
    """Seconds the last Spark start raylink made spent, by phase."""
    return dict(_phases)


def active_spark() -> Any:
    """A Spark-on-Ray session if one exists (no start)."""
    return existing_raydp_session() or _state["spark"]


def started_by_raylink() -> bool:
    return bool(_state["started_spark"])


def stop(shutdown_ray: Optional[bool] = None) -> None:
    """Stop what raylink started: the bridge, the Spark session raylink started and
    (``shutdown_ray=None``: only if raylink started it for Spark) the local Ray."""
    with _lock:
        bridge.shutdown_bridge()
        if _state.pop("shared", False):
            try:
                shared_session.detach(_state["spark"])
            finally:
                _state.update(spark=None)
                _state.pop("namespace", None)
        if _state["started_spark"]:
            import raydp

            try:
                raydp.stop_spark()
            finally:
                _state.update(spark=None, started_spark=False)
        ray_started = _state["started_ray"]
        _state["started_ray"] = False
        if shutdown_ray or (shutdown_ray is None and ray_started):
            import ray

            if ray.is_initialized():
                ray.shutdown()


__all__ = [
    "SparkStartError",
    "get_spark",
    "active_spark",
    "stop",
    "find_java",
    "java_options",
    "spark_configs",
    "start_phases",
    "wait_driver_connected",
    "is_raydp_session",
    "existing_raydp_session",
    "started_by_raylink",
    "spark_namespace",
    "attached_to_shared_spark",
]
