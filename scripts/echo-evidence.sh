#!/usr/bin/env bash
# Where the time and the wake-ups of a UDP echo server go (issue 22, "evidence first"): one
# echo cell per architecture, with the unbatched client, unpinned and pinned; while the load
# runs, the kernel is asked what happened:
#   perf stat -a -e context-switches,cpu-migrations,sched:sched_wakeup   (whole machine)
#   /proc/interrupts RES and CAL                                          (IPIs, both CPUs)
#   perf sched record + perf sched timehist -s                            (per server thread)
# and one line per cell gives, per message: server wake-ups (sched-ins of the server process's
# threads), IPIs, context switches, and the messages a server thread handles per wake-up.
#
# Usage: scripts/echo-evidence.sh [ARCH,...] [extra echo-bench args]
#   ARCH defaults to lfrt,lfrt-cc,tokio,tokio-fifo; extra args e.g. --work 5 --gen-threads 1.
# Needs root (perf sched), perf (Debian linux-perf) and a release build of the echo bench.
# Bounded: each cell runs 8 s (the recordings take 3 s of its middle); about 20 s per cell.
# Takes the real-time lock the tests take, so it never overlaps an RT test.
set -euo pipefail
cd "$(dirname "$0")"/..
archs=${1:-lfrt,lfrt-cc,tokio,tokio-fifo}
[ $# -gt 0 ] && shift
command -v perf >/dev/null || { echo "perf is not installed (Debian: linux-perf)"; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo bench -q --bench echo --no-run >/dev/null 2>&1
irq() { awk '/RES:|CAL:/{s=0; for(i=2;i<=NF;i++) if ($i ~ /^[0-9]+$/) s+=$i; else break; print s}' /proc/interrupts | paste -sd' '; }

printf '%-11s %-8s %9s %8s %6s %9s %8s %8s %9s %8s\n' arch place msgs/s cpu_us/m gen% wake/msg ipi/msg csw/msg msg/wake run_us
for place in unpinned pinned; do
    pin=(); [ "$place" = pinned ] && pin=(--pin)
    for arch in ${archs//,/ }; do
        flock /tmp/lfrt-tools.lock cargo bench -q --bench echo -- --duration 8s --threads 2 \
            --ports 4 --window 16 --work 0 --fifo 80 --arch "$arch" --clients unbatched \
            --gen-threads 2 "${pin[@]}" "$@" > "$out/bench" 2>&1 &
        bp=$!
        sleep 3.5
        pid=$(pgrep -f 'deps/echo-' | head -1)
        read -r res0 cal0 < <(irq)
        perf stat -a -x, -e context-switches,cpu-migrations -o "$out/stat" -- sleep 2 >/dev/null 2>&1
        read -r res1 cal1 < <(irq)
        perf sched record -a -o "$out/sched.data" -- sleep 1 >/dev/null 2>&1
        wait "$bp"
        line=$(grep -E "^$arch +0 " "$out/bench" | tail -1)
        msgs=$(awk '{print $3}' <<<"$line")
        cpu=$(awk '{print $10}' <<<"$line")
        gen=$(awk '{print $11}' <<<"$line")
        csw=$(awk -F, '/context-switches/{print $1}' "$out/stat")
        # Per server thread: sched-ins and run time over the 1 s recording.
        perf sched timehist -i "$out/sched.data" -s 2>/dev/null \
            | awk -v pid="$pid" '$1 ~ "/" pid "\\]" {n+=$3; rt+=$4} END {print n+0, rt+0}' > "$out/ts"
        read -r wakes run_ms < "$out/ts"
        awk -v m="$msgs" -v u="$cpu" -v g="$gen" -v w="$wakes" -v r="$run_ms" -v res=$((res1 - res0)) \
            -v cal=$((cal1 - cal0)) -v c="$csw" -v a="$arch" -v p="$place" 'BEGIN {
                printf "%-11s %-8s %9d %8s %6s %9.3f %8.3f %8.3f %9.2f %8.1f\n", a, p, m, u, g,
                    w / m, (res + cal) / 2 / m, c / 2 / m, (w > 0 ? m / w : 0),
                    (w > 0 ? r * 1000 / w : 0) }'
    done
done
echo "# cpu_us/m: server CPU per message; gen%: the generator's busiest thread (% of a CPU)"
echo "# wake/msg: sched-ins of the server's threads per message (perf sched, 1 s); ipi/msg: RES+CAL"
echo "# interrupts per message; csw/msg: machine-wide context switches per message (perf stat, 2 s);"
echo "# msg/wake: messages per server wake-up; run_us: average run of a server thread per wake-up."
