#!/usr/bin/env bash
# Set up (if needed) and run the demo job on the embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo needs raylink[spark] and nothing else (no browser, no Kafka broker): a fresh checkout
# installs only that; one already set up with more (e.g. for the tests) is used as it is.
if [ -z "${RAYLINK_EXTRAS:-}" ]; then
    installed=$(cat .venv/.raylink-installed 2>/dev/null || true)
    case ",$installed," in
        *,spark,*) RAYLINK_EXTRAS="$installed" ;;
        *) RAYLINK_EXTRAS=spark ;;
    esac
fi
case ",$RAYLINK_EXTRAS," in
    *,spark,*) ;;
    *) RAYLINK_EXTRAS="$RAYLINK_EXTRAS,spark" ;;
esac
export RAYLINK_EXTRAS
bash scripts/setup.sh
exec .venv/bin/python -m raylink demo "$@"
