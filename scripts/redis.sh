#!/usr/bin/env bash
# Redis for the tests of Ray's GCS fault tolerance (tests/test_netns_host_failover.py): Debian's redis-server,
# installed when missing; idempotent (nothing happens when redis-server is on PATH). The package's
# own service is not used: the tests start redis-server on a free port in a folder of their own.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "scripts/redis.sh: redis-server is missing; run as root (apt-get install redis-server)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# the package's post-install starts its service when it can: keep it off (policy-rc.d 101)
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod +x "$policy"
    made_policy=1
fi
trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get install -y --no-install-recommends redis-server >/dev/null 2>&1 || {
    apt-get update -qq
    apt-get install -y --no-install-recommends redis-server
}
command -v redis-server >/dev/null
