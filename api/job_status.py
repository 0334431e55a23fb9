"""PyFlink's ``pyflink.common.job_status``: ``JobStatus`` (``raylink.core.job_status``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core.job_status import (
    JobStatus,
)

__all__ = [
    "JobStatus",
]
