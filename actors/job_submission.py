"""The Ray side of ``raylink submit | list | status | logs | cancel``: a client of Ray's Job
Submission API (the dashboard, ``http://HEAD:8265``) and the files Ray packs for a job's
``working_dir``. The CLI (``raylink.cli.jobs``) reaches Ray only through these.

Stateless; the client is as thread-safe as Ray's ``JobSubmissionClient``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Optional

from raylink.errors import RaylinkError

#: Ray's switch: "1" uploads the files .gitignore files exclude
IGNORE_GITIGNORE_ENV = "RAY_RUNTIME_ENV_IGNORE_GITIGNORE"
#: the SDK's loggers whose INFO lines (uploads, websocket closed) are noise on the command line
QUIET_LOGGERS = (
    "ray.dashboard.modules.job.sdk",
    "ray.dashboard.modules.dashboard_sdk",
    "ray._private.runtime_env.packaging",
)


class DashboardAuthenticationError(RaylinkError, PermissionError):
    """The Ray dashboard refused the request: it needs the cluster's token."""


def job_submission_client(address: str, headers: Optional[dict] = None) -> Any:
    """Ray's ``JobSubmissionClient`` for the dashboard at ``address``, the SDK's INFO lines
    silenced (``QUIET_LOGGERS``); raises ``DashboardAuthenticationError`` when the dashboard wants
    a token, ``ConnectionError`` when it cannot be reached, ``RuntimeError`` when it is not a
    usable Ray dashboard."""
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    for name in QUIET_LOGGERS:  # after Ray's import, which sets up its loggers
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        return JobSubmissionClient(address, headers=headers)
    except AuthenticationError as exc:
        raise DashboardAuthenticationError(str(exc)) from None


def files_ray_packs(root: str, excludes: list[str]) -> list[tuple[str, int]]:
    """The files Ray packs for ``working_dir=root`` with ``excludes`` (relative paths and sizes,
    sorted): Ray's own traversal (its gitignore-syntax matching, .gitignore / .rayignore in every
    folder unless ``RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1``)."""
    from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

    base = Path(root).absolute()
    found: list[tuple[str, int]] = []

    def handler(path: Path) -> None:
        if path.is_file():
            found.append((path.relative_to(base).as_posix(), path.stat().st_size))

    include_gitignore = os.environ.get(IGNORE_GITIGNORE_ENV, "0") != "1"
    quiet = logging.getLogger("raylink.submit.walk")
    quiet.setLevel(logging.WARNING)
    _dir_travel(base, [_get_excludes(base, list(excludes))], handler, include_gitignore=include_gitignore, logger=quiet)
    return sorted(found)


__all__ = [
    "DashboardAuthenticationError",
    "IGNORE_GITIGNORE_ENV",
    "QUIET_LOGGERS",
    "files_ray_packs",
    "job_submission_client",
]
