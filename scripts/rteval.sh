#!/usr/bin/env bash
# Latency under load, the rteval way: hackbench (rt-tests) in a loop at normal priority as
# background load, and under it real cyclictest and `lfrt cyclic` alternately with the same
# options; prints each round's ratios lfrt/cyclictest for avg, p99, p99.9 and max.
#
# Usage: scripts/rteval.sh [-D SECONDS] [-r ROUNDS] [-b US -T FILE] [-- CYCLICTEST OPTIONS...]
#   -D SECONDS   length of each cyclictest / lfrt cyclic run (default 20)
#   -r ROUNDS    cyclictest-then-lfrt rounds (default 1)
#   -b US        after the rounds, one more `lfrt cyclic` under the same load with -b US: it
#                stops at the first cycle later than US and writes the flight recorder's
#                window (with the kernel's events, as root) to FILE (-T, default
#                lfrt-rteval-trace.json); then `lfrt explain FILE` says why it was late
#   OPTIONS      default: -m -p 80 -t 2 -i 1000 (plus -D); the histogram is 5000 µs (-h 5000),
#                kept in ns (HIST_NS=5000000) by scripts/compare-cyclictest.sh, which runs
#                both programs and computes every percentile the same way from the histograms.
#
# Bounded: every run has -D, hackbench runs are short and the loop is killed on exit (also on
# error or ^C). The whole measurement holds the machine-wide RT lock (/tmp/lfrt-tools.lock).
set -euo pipefail
cd "$(dirname "$0")"/..

DURATION=20
ROUNDS=1
BREAK=
TRACE=lfrt-rteval-trace.json
while getopts "D:r:b:T:h" opt; do
    case $opt in
        D) DURATION=$OPTARG ;;
        r) ROUNDS=$OPTARG ;;
        b) BREAK=$OPTARG ;;
        T) TRACE=$OPTARG ;;
        *) sed -n '2,19p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ "$#" -gt 0 ]; then OPTS=("$@"); else OPTS=(-m -p 80 -t 2 -i 1000); fi
command -v hackbench >/dev/null || { echo "hackbench not found: apt-get install -y rt-tests" >&2; exit 1; }

if [ -z "${LFRT:-}" ]; then
    cargo build --release --quiet --bin lfrt
    export LFRT="${CARGO_TARGET_DIR:-target}/release/lfrt"
fi

exec 9>/tmp/lfrt-tools.lock
flock 9
export LFRT_RT_LOCK_HELD=1 HIST_NS=${HIST_NS:-5000000}

# The load: hackbench at normal priority (SCHED_OTHER, nice 0), short runs back to back.
load_pid=
stop_load() {
    if [ -n "$load_pid" ]; then
        kill "$load_pid" 2>/dev/null || true
        wait "$load_pid" 2>/dev/null || true
    fi
}
trap stop_load EXIT INT TERM
(
    trap 'exit 0' TERM
    while :; do chrt -o 0 hackbench -g 4 -l 200 >/dev/null 2>&1 || sleep 0.1; done
) &
load_pid=$!
sleep 1

echo "# load: hackbench -g 4 -l 200 in a loop at SCHED_OTHER; uptime: $(uptime)"
for r in $(seq 1 "$ROUNDS"); do
    echo "# round $r of $ROUNDS"
    scripts/compare-cyclictest.sh "${OPTS[@]}" -D "$DURATION"
done
if [ -n "$BREAK" ]; then
    echo "# flight recorder: lfrt cyclic ${OPTS[*]} -D $DURATION -q -b $BREAK --trace $TRACE"
    "$LFRT" cyclic "${OPTS[@]}" -D "$DURATION" -q -b "$BREAK" --trace "$TRACE" | grep '^# \(Break\|Trace\|No cycle\)' || true
    if [ -f "$TRACE" ]; then "$LFRT" explain "$TRACE"; fi
fi
echo "# uptime after: $(uptime)"
