"""The progress line of a job a program waits for (``env.execute()``): nothing for a job that
ends within :data:`FIRST_LINE_AFTER_S`, then one ``raylink: job 'NAME' RUNNING for 12 s: 1,234,567
records in`` line every :data:`LINE_EVERY_S` (no Flink counterpart: Flink's client prints the
job's id and waits silently; its web UI shows the progress).

The lines go through the ``raylink`` logger at INFO, so they appear where raylink's other lines
do (stderr, see :mod:`raylink.runtime.logging_setup`) and not at all under a logging
configuration that leaves INFO out. ``raylink run`` shows its own per-vertex progress instead.
Stateless; each waiting thread has its own loop.
"""

from __future__ import annotations

import logging
import time
from typing import Any

#: a job that ends sooner prints no progress line
FIRST_LINE_AFTER_S = 5.0
#: the interval between two progress lines
LINE_EVERY_S = 10.0

_log = logging.getLogger("raylink")


def records_in(client: Any) -> int:
    """Records every task of the job took in so far (its live metrics; 0 when they cannot be read)."""
    try:
        return sum(int(m.get("numRecordsIn", 0) or 0) for m in client.get_metrics())
    except Exception:  # metrics are a courtesy: an executor may be gone or restarting
        return 0


def wait_with_progress(client: Any) -> Any:
    """``client.get_job_execution_result()``, logging a progress line now and then (see the
    module doc) while the job runs (``client.wait(timeout)`` tells whether it ended)."""
    started = time.monotonic()
    wait = FIRST_LINE_AFTER_S
    while not client.wait(wait):  # JobClient.wait: True once the job has ended
        elapsed = time.monotonic() - started
        _log.info(
            "job '%s' %s for %.0f s: %s records in",
            client.job_name,
            client.get_job_status(),
            elapsed,
            f"{records_in(client):,}",
        )
        wait = LINE_EVERY_S
    return client.get_job_execution_result()


__all__ = ["FIRST_LINE_AFTER_S", "LINE_EVERY_S", "records_in", "wait_with_progress"]
