"""PyFlink stand-ins, in one place: what a PyFlink program may import that raylink deliberately does
not support — Flink's Java connectors (``raylink.api.connectors.jdbc``, ``.pulsar``, ...) and
formats (``raylink.api.formats.*``), the Table API and SQL (``raylink.table``) — importable under
PyFlink's names (where ``raylink migrate`` sends them) so a migrated program gets as far as the
call, which then fails with :class:`UnsupportedFeatureError` naming the feature and raylink's
alternative.

``unsupported`` makes the stand-in classes and functions; ``stand_ins`` lists the stand-in
modules as data and makes them on import (installed here). Nothing below ``api`` imports this.
"""

from raylink.api.pyflink_compat.stand_ins import install
from raylink.api.pyflink_compat.unsupported import UnsupportedFeatureError

install()

__all__ = ["UnsupportedFeatureError"]
