"""``raylink kafka start`` / ``raylink kafka stop``: a local single-node Kafka broker for trying
the Kafka examples (:class:`raylink.connectors.kafka.broker.KafkaBroker`, left running).

``start`` formats a broker's storage in a private folder of the per-user runtime folder
(``<runtime dir>/kafka/raylink-kafka-*``), starts it on free ports of 127.0.0.1, returns once it
answers and prints its bootstrap address; its PID, address and folder go to
``<runtime dir>/kafka/broker.json`` (a private file). A second ``start`` while that broker runs
prints its address again. ``stop`` ends it by PID (SIGTERM, then SIGKILL; only if that PID is
still the broker started from that folder) and removes its folder. Not thread-safe (one command
line per process).
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from raylink.cli.common import EXIT_CODES_HELP, EXIT_OK, EXIT_USAGE, CliError, err

EXAMPLES = """examples:
  raylink kafka start          # prints the bootstrap address, e.g. 127.0.0.1:39241
  raylink kafka stop
"""

STATE_FILE = "broker.json"


def add_parser(sub: Any, fmt: type, handler: Any) -> None:
    """The ``kafka`` sub-command and its ``start`` / ``stop`` actions."""
    kafka = sub.add_parser(
        "kafka",
        help="start or stop a local single-node Kafka broker (for the Kafka examples)",
        description="A local Apache Kafka broker (KRaft, one node) on 127.0.0.1, from the jars "
        "scripts/setup.sh resolved; it keeps running until `raylink kafka stop`.",
        epilog=EXAMPLES + "\n" + EXIT_CODES_HELP,
        formatter_class=fmt,
    )
    action = kafka.add_subparsers(dest="kafka_command", required=True)
    start = action.add_parser("start", help="start the broker, print its bootstrap address once it answers")
    start.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for it to answer (90)")
    start.set_defaults(func=handler("kafka", "cmd_kafka_start"))
    stop = action.add_parser("stop", help="stop the broker `raylink kafka start` started")
    stop.set_defaults(func=handler("kafka", "cmd_kafka_stop"))


def _state_path() -> str:
    from raylink.runtime.runtime_dir import runtime_dir

    return os.path.join(runtime_dir("kafka"), STATE_FILE)


def _read_state() -> Optional[dict]:
    from raylink.runtime.runtime_dir import read_private_file

    try:
        return json.loads(read_private_file(_state_path()))
    except FileNotFoundError:
        return None
    except ValueError:
        return None


def cmd_kafka_start(args: Any) -> int:
    from raylink.connectors.kafka.broker import KafkaBroker, KafkaBrokerError, is_broker_process
    from raylink.runtime.runtime_dir import runtime_dir, write_private_file

    state = _read_state()
    if state and is_broker_process(state["pid"], state["workdir"]):
        print(state["bootstrap_servers"])
        err(f"raylink: a Kafka broker is already running (pid {state['pid']}); `raylink kafka stop` ends it")
        return EXIT_OK
    broker = KafkaBroker(startup_timeout_s=args.timeout, workdir_parent=runtime_dir("kafka"))
    try:
        broker.start()
    except KafkaBrokerError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None
    state = {"pid": broker.pid, "bootstrap_servers": broker.bootstrap_servers, "workdir": broker.workdir}
    try:
        write_private_file(_state_path(), json.dumps(state).encode())
    except BaseException:
        broker.stop()
        raise
    broker.detach()
    print(state["bootstrap_servers"])
    err(f"raylink: Kafka broker running (pid {state['pid']}, log {state['workdir']}/broker.log)")
    return EXIT_OK


def cmd_kafka_stop(args: Any) -> int:
    from raylink.connectors.kafka.broker import stop_broker_process
    from raylink.runtime.runtime_dir import remove_private_file

    state = _read_state()
    if not state:
        err("raylink: no Kafka broker was started with `raylink kafka start`")
        return EXIT_OK
    was_running = stop_broker_process(state["pid"], state["workdir"])
    remove_private_file(_state_path())
    if was_running:
        err(f"raylink: Kafka broker on {state['bootstrap_servers']} (pid {state['pid']}) stopped")
    else:
        err(f"raylink: the Kafka broker on {state['bootstrap_servers']} was no longer running")
    return EXIT_OK


__all__ = ["add_parser", "cmd_kafka_start", "cmd_kafka_stop"]
