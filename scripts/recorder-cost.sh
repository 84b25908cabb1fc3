#!/usr/bin/env bash
# Issue 31, "zero cost when not triggered": `lfrt cyclic` timer latency with the flight
# recorder off, on (lfrt's rings, a trigger armed that never fires) and on with the kernel
# recorder (a private ftrace instance), alternating in one run; prints each round's figures
# and the ratios on/off and kernel/off of avg, p50, p99 and max.
#
# Usage: scripts/recorder-cost.sh [-D SECONDS] [-r ROUNDS]
#   -D SECONDS  length of each run (default 10)
#   -r ROUNDS   off/on/kernel rounds (default 3)
# The lane: SCHED_FIFO 80, two pool threads, two 1 ms timers (as `lfrt cyclic -t 2 -i 1000`),
# memory locked. Bounded: every run has -D. Holds the machine-wide RT lock.
set -euo pipefail
cd "$(dirname "$0")"/..

DURATION=10
ROUNDS=3
while getopts "D:r:h" opt; do
    case $opt in
        D) DURATION=$OPTARG ;;
        r) ROUNDS=$OPTARG ;;
        *) sed -n '2,11p' "$0"; exit 2 ;;
    esac
done
if [ -z "${LFRT:-}" ]; then
    cargo build --release --quiet --bin lfrt
    LFRT="${CARGO_TARGET_DIR:-target}/release/lfrt"
fi
exec 9>/tmp/lfrt-tools.lock
flock 9
export LFRT_RT_LOCK_HELD=1

dir=$(mktemp -d /tmp/lfrt-recorder-cost.XXXXXX)
trap 'rm -rf "$dir"' EXIT
lane='[runtime]
rt = "required"
lock_memory = true

[[lane]]
name = "cyclic"
priority = 80
threads = 2
buffer_bytes = 4096
max_handles = 8
TRIGGER

[[lane.handler]]
kind = "timer"
interval_us = 1000
count = 2
distance_us = 500
'
printf '%s\n[trace]\nwindow_ms = 0\n' "${lane/TRIGGER/}" >"$dir/off.toml"
printf '%s\n[trace]\ndir = "%s"\n' "${lane/TRIGGER/trace_over_us = 10000000}" "$dir" >"$dir/on.toml"
printf '%s\n[trace]\nkernel = true\ndir = "%s"\n' "${lane/TRIGGER/trace_over_us = 10000000}" "$dir" >"$dir/kernel.toml"

echo "# recorder cost: $ROUNDS rounds of off/on/kernel, ${DURATION} s each; $(nproc) CPUs; $(uname -r)"
for r in $(seq 1 "$ROUNDS"); do
    for mode in off on kernel; do
        "$LFRT" cyclic --config "$dir/$mode.toml" -D "$DURATION" -q --json "$dir/$mode-$r.json" >/dev/null 2>&1
    done
done
python3 - "$dir" "$ROUNDS" <<'EOF'
import json, sys
d, rounds = sys.argv[1], int(sys.argv[2])
keys = ["avg", "p50", "p99", "max"]
def lane(mode, r):
    return json.load(open(f"{d}/{mode}-{r}.json"))["lanes"][0]
print(f"{'round':>5} {'mode':>7} {'cycles':>8} " + " ".join(f"{k + '_us':>8}" for k in keys)
      + "   ratio to off: " + " ".join(f"{k:>5}" for k in keys))
for r in range(1, rounds + 1):
    off = lane("off", r)
    for mode in ["off", "on", "kernel"]:
        l = lane(mode, r)
        row = f"{r:>5} {mode:>7} {l['cycles']:>8} " + " ".join(f"{l[k]:>8.1f}" for k in keys)
        if mode != "off":
            ratios = " ".join(f"{l[k] / off[k]:>5.2f}" if off[k] else "    -" for k in keys)
            row += " " * 17 + ratios
        print(row)
EOF
