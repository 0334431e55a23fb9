"""``python -m raylink``: the command line (see :mod:`raylink.cli.main`)."""

import sys


def main() -> int:
    from raylink.cli.main import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
