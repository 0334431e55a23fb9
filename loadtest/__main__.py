"""``python -m raylink.loadtest SCENARIO ...``: the same as ``raylink loadtest``."""

import sys

from raylink.loadtest.command import main

sys.exit(main())
