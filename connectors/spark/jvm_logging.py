"""The log4j2 configuration raylink starts Spark's JVMs with: their log lines in the run's log
folder, only errors on the terminal (Spark's own default prints INFO/WARN lines such as
``WARN Utils``, ``NativeCodeLoader`` and log4j's ``StatusConsoleListener`` into the driver's
terminal).

:func:`log4j2_spark_configs` writes ``log4j2-spark.properties`` into the run's log folder
(:func:`raylink.runtime.logging_setup.run_log_dir`) and returns the Spark configs naming it
(RayDP's ``spark.log4j.config.file.name``, which RayDP hands the driver JVM); the driver JVM
writes ``spark-driver.log`` there, and :func:`driver_jvm_output` sends what the JVM prints
outside log4j to ``spark-driver.out`` next to it. Verbose runs (``RAYLINK_LOG_LEVEL=DEBUG``) keep RayDP's
configuration; a user's own ``spark.log4j.config.file.name`` wins.
Stateless apart from the file; safe to call from any thread.
"""

from __future__ import annotations

import os

from raylink.runtime.logging_setup import is_verbose, run_log_dir

PROPERTIES_FILE = "log4j2-spark.properties"

#: Spark's log4j2 properties layout; the file appender takes everything from INFO, the
#: console (stderr) only errors; log4j's own status messages only on errors (the level of
#: ``org.apache.spark.repl.Main`` equal to the root's: PySpark's driver then does not announce
#: a console level of its own)
LOG4J2_PROPERTIES = """\
status = error
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
rootLogger.appenderRef.console.ref = console

appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:raylink.log.dir}/spark-${sys:raylink.jvm.role:-jvm}.log
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c: %m%n%ex

appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %p %c{1}: %m%n%ex
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = error

logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = info
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = warn
"""

#: RayDP's setting naming the driver JVM's log4j2 configuration (it passes it to the JVM as
#: ``-Dlog4j2.configurationFile``, after every other option, so only this setting takes effect)
RAYDP_LOG4J_CONFIG_KEY = "spark.log4j.config.file.name"
#: RayDP's environment variable for the same (an administrator's choice wins over raylink's)
RAYDP_LOG4J_CONFIG_ENV_VAR = "SPARK_LOG4J_CONFIG_FILE_NAME"
DRIVER_JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"


def log4j2_spark_configs() -> dict:
    """The Spark configs that give Spark's driver JVM raylink's log4j2 configuration (its log
    file ``spark-driver.log`` in the run's log folder); empty when verbose or when
    ``SPARK_LOG4J_CONFIG_FILE_NAME`` names another configuration. The JVMs RayDP runs as Ray
    actors (its app master, the executors) log into Ray's own log files already."""
    if is_verbose() or os.environ.get(RAYDP_LOG4J_CONFIG_ENV_VAR):
        return {}
    folder = run_log_dir()
    path = os.path.join(folder, PROPERTIES_FILE)
    if not os.path.exists(path):
        temp = f"{path}.{os.getpid()}.tmp"
        with open(temp, "w", encoding="utf-8") as fh:
            fh.write(LOG4J2_PROPERTIES)
        os.replace(temp, path)
    return {
        RAYDP_LOG4J_CONFIG_KEY: f"file:{path}",
        DRIVER_JAVA_OPTIONS_KEY: f"-Draylink.log.dir={folder} -Draylink.jvm.role=driver",
    }


def driver_jvm_output() -> dict:
    """``Popen`` keyword arguments for Spark's driver JVM (pyspark's ``launch_gateway``): its
    stdout and stderr -- what log4j does not format (Spark's "Setting default log level" notice,
    log4j's own status lines, the lines Ray's native client prints while the JVM connects to
    Ray) -- appended to ``spark-driver.out`` in the run's log folder; empty when verbose."""
    if is_verbose():
        return {}
    out = open(os.path.join(run_log_dir(), "spark-driver.out"), "ab")  # noqa: SIM115 - the JVM's, for its life
    return {"stdout": out, "stderr": out}


__all__ = [
    "DRIVER_JAVA_OPTIONS_KEY",
    "driver_jvm_output",
    "LOG4J2_PROPERTIES",
    "PROPERTIES_FILE",
    "RAYDP_LOG4J_CONFIG_ENV_VAR",
    "RAYDP_LOG4J_CONFIG_KEY",
    "log4j2_spark_configs",
]
