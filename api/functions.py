"""PyFlink's ``pyflink.datastream.functions``: the user function classes
(``raylink.core.functions``, the async retry interfaces ``raylink.core.async_retry``).

Only re-exports: the implementation lives on a lower floor."""

from raylink.core import functions as _functions
from raylink.core.async_retry import AsyncRetryPredicate, AsyncRetryStrategy
from raylink.core.functions import *  # noqa: F401,F403 - every name of core.functions' __all__

__all__ = [*_functions.__all__, "AsyncRetryPredicate", "AsyncRetryStrategy"]
