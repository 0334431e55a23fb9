#!/usr/bin/env bash
# Set up (if needed) and run the demo job on the embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
case ",${RAYLINK_EXTRAS:-spark}," in  # the demo needs raylink[spark] (setup's default installs it)
    *,spark,*) ;;
    *) export RAYLINK_EXTRAS="$RAYLINK_EXTRAS,spark" ;;
esac
bash scripts/setup.sh
exec .venv/bin/python -m raylink demo "$@"
