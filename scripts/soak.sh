#!/usr/bin/env bash
# Soak test: one process, one lfrt runtime of two lanes (SCHED_FIFO when permitted) under a UDP
# flood, TCP connection churn, periodic timers and handle churn from other threads, for a while;
# prints the figures, and fails if a datagram was lost inside the server, duplicated or
# corrupted, a handler saw a stale event, a timer period or a notification went missing, RSS
# grew after the warm-up, or shutdown under load took 2 s or more. What is measured and why:
# rt-tests/tests/soak.rs (the test suite runs the same test for 10 s).
#
# Usage: scripts/soak.sh [--duration D]
#   D in lfrt's duration syntax: 60, 60s, 10m (at least 5 s; default 60 s). Two bitmaps of one
#   bit per datagram (10,000 a second) are preallocated: 1.5 MiB for 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=60
while [ $# -gt 0 ]; do
    case "$1" in
        --duration) duration="${2:?--duration needs a value (60, 60s, 10m)}"; shift 2 ;;
        --duration=*) duration="${1#*=}"; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "soak.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
    esac
done

cargo test --release -q -p lfrt-tools --test soak --no-run
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "soak: running for $duration (LFRT_SOAK_DURATION=$duration) ..."
status=0
LFRT_SOAK_DURATION="$duration" cargo test --release -q -p lfrt-tools --test soak \
    -- --nocapture --test-threads=1 >"$log" 2>&1 || status=$?
sed -n '/^=== lfrt soak/,/^=== end ===/p' "$log"
if [ "$status" -ne 0 ]; then
    echo "soak: FAILED (exit $status); the test's output:" >&2
    cat "$log" >&2
else
    echo "soak: passed"
fi
exit "$status"
