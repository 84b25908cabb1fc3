#!/usr/bin/env bash
# Runs real cyclictest and `lfrt cyclic` back to back with the same parameters and prints both
# summaries side by side, with lfrt/cyclictest ratios for avg and p99.
#
# Usage: scripts/compare-cyclictest.sh [OPTIONS...]
#        scripts/compare-cyclictest.sh --staggered-and-aligned [OPTIONS...]
#   OPTIONS are given to both programs unchanged; default: -m -p 80 -i 1000 -t 2 -D 30
#   --staggered-and-aligned: two comparisons in one invocation, first with OPTIONS as given
#   (staggered: the timers start unaligned, as cyclictest's threads do by default), then with
#   --aligned=0 added (every timer expires at the same instant), and both ratio lines together
#   at the end (issue 13: staggered about 1.0x, aligned avg <= 1.3x and p99 <= 1.5x).
#   The script adds to both: -q -N -h $HIST_NS --histfile=/dev/null --json=FILE
#   (ns resolution, so cyclictest's avg is not biased by its truncation to µs; p50/p99/p99.9
#   are computed the same way for both, from the histograms).
#
# Environment:
#   LFRT     lfrt binary (default: build target/release/lfrt with cargo)
#   HIST_NS  histogram range in ns (default 2000000 = 2 ms; larger latencies count as
#            overflows, and a percentile inside them is printed as >=range)
#   OUT_DIR  where the JSON files go (default: a new temporary directory)
#   LFRT_RT_LOCK_HELD  set by a caller that already holds the RT lock (scripts/rteval.sh): the
#            runs then do not take it again
#   LFRT_EXTRA  extra options for lfrt only, for diagnosis (e.g. "--pool-threads 1"); the
#            parameters are then no longer identical, and the report says so
#
# Each run holds the machine-wide RT lock (/tmp/lfrt-tools.lock), as every SCHED_FIFO
# user on this machine must. cyclictest comes from Debian/Ubuntu's rt-tests package.
set -euo pipefail
cd "$(dirname "$0")"/..

if [ "${1:-}" = "--staggered-and-aligned" ]; then
    shift
    [ "$#" -gt 0 ] || set -- -m -p 80 -i 1000 -t 2 -D 30
    both=$(mktemp -d /tmp/compare-cyclictest-both.XXXXXX)
    echo "### staggered: $0 $*"
    "$0" "$@" | tee "$both/staggered"
    echo
    echo "### aligned: $0 $* --aligned=0"
    "$0" "$@" --aligned=0 | tee "$both/aligned"
    echo
    echo "### side by side (lfrt/cyclictest, all threads)"
    for mode in staggered aligned; do
        printf '%-10s %s\n' "$mode" "$(grep '^ratios lfrt/cyclictest' "$both/$mode" | cut -d: -f2-)"
    done
    exit 0
fi

if ! command -v cyclictest >/dev/null 2>&1; then
    echo "cyclictest not found: install it with 'apt-get install -y rt-tests' (as root), then rerun." >&2
    exit 1
fi
command -v python3 >/dev/null 2>&1 || { echo "python3 is needed to read the JSON results" >&2; exit 1; }

if [ "$#" -gt 0 ]; then
    OPTS=("$@")
else
    OPTS=(-m -p 80 -i 1000 -t 2 -D 30)
fi
HIST_NS=${HIST_NS:-2000000}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/compare-cyclictest.XXXXXX)}
mkdir -p "$OUT_DIR"
if [ -z "${LFRT:-}" ]; then
    cargo build --release --quiet --bin lfrt
    LFRT="${CARGO_TARGET_DIR:-target}/release/lfrt"
fi
LOCK=/tmp/lfrt-tools.lock
COMMON=(-q -N -h "$HIST_NS" --histfile=/dev/null)

CT_CMD=(cyclictest "${OPTS[@]}" "${COMMON[@]}" --json="$OUT_DIR/cyclictest.json")
read -r -a EXTRA <<<"${LFRT_EXTRA:-}"
LF_CMD=("$LFRT" cyclic "${OPTS[@]}" ${EXTRA[@]+"${EXTRA[@]}"} "${COMMON[@]}" --json="$OUT_DIR/lfrt.json")

# Inter-processor interrupts (rescheduling + function call) on all CPUs, for the whole machine:
# a cross-CPU wake-up costs one, and in a VM each is an exit to the hypervisor.
ipis() { awk '$1 == "RES:" || $1 == "CAL:" { for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) n += $i } END { print n + 0 }' /proc/interrupts; }

# Runs a command under the RT lock (held on fd 9 by a subshell); counts the IPIs of the run.
run_locked() { # OUT_FILE CMD...
    local out=$1
    shift
    (
        [ -n "${LFRT_RT_LOCK_HELD:-}" ] || flock 9
        before=$(ipis)
        "$@" >"$out"
        echo $(($(ipis) - before)) >"$out.ipis"
    ) 9>"$LOCK"
}

echo "# machine: $(nproc) CPUs, kernel $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "# loadavg before: $(cat /proc/loadavg)"
[ -n "${LFRT_EXTRA:-}" ] && echo "# NOTE: lfrt runs with extra options ($LFRT_EXTRA): the parameters are not identical"
echo "# 1) ${CT_CMD[*]}"
run_locked "$OUT_DIR/cyclictest.out" "${CT_CMD[@]}"
echo "# 2) RUST_LOG=warn ${LF_CMD[*]}"
run_locked "$OUT_DIR/lfrt.out" env RUST_LOG=warn "${LF_CMD[@]}"
echo "# loadavg after:  $(cat /proc/loadavg)"
echo "# results: $OUT_DIR"

python3 - "$OUT_DIR/cyclictest.json" "$OUT_DIR/lfrt.json" "$HIST_NS" \
    "$(cat "$OUT_DIR/cyclictest.out.ipis")" "$(cat "$OUT_DIR/lfrt.out.ipis")" <<'PY'
import json, sys

ct, lf, hist_ns = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
ipis_ct, ipis_lf = int(sys.argv[4]), int(sys.argv[5])
for doc, name in ((ct, "cyclictest"), (lf, "lfrt")):
    if doc.get("resolution_in_ns") != 1:
        sys.exit(f"{name}: expected ns resolution (-N)")

def in_range(t):
    """A thread's histogram without overflows: cyclictest leaves them out; lfrt counts them in
    the last bucket too (and says how many in hist_overflow)."""
    h = {int(k): c for k, c in t["histogram"].items()}
    if t.get("hist_overflow"):
        h[hist_ns - 1] -= t["hist_overflow"]
    return h

def stats(threads):
    """Merged figures of some threads, in ns. Percentiles come from the histograms, the same
    way for both programs: the smallest bucket whose cumulative count reaches q * cycles
    (infinite if that rank lies among the overflows)."""
    cycles = sum(t["cycles"] for t in threads)
    hist = {}
    for t in threads:
        for k, c in in_range(t).items():
            hist[k] = hist.get(k, 0) + c
    def pct(q):
        run = 0
        for k in sorted(hist):
            run += hist[k]
            if run > 0 and run >= q * cycles:
                return float(k)
        return float("inf")
    return {
        "cycles": cycles,
        "min": min(t["min"] for t in threads),
        "avg": sum(t["avg"] * t["cycles"] for t in threads) / cycles if cycles else 0.0,
        "p50": pct(0.50),
        "p99": pct(0.99),
        "p999": pct(0.999),
        "max": max(t["max"] for t in threads),
    }

def us(ns):
    return f">={hist_ns/1000:.0f}" if ns == float("inf") else f"{ns/1000:.1f}"

def ratio(a, b):
    if a == float("inf") or b == float("inf") or b == 0:
        return "-"
    return f"{a/b:.2f}"

ctt = [ct["thread"][str(i)] for i in range(ct["num_threads"])]
lft = [lf["thread"][str(i)] for i in range(lf["num_threads"])]
cols = ["cycles", "min", "avg", "p50", "p99", "p999", "max"]
def row(label, c, l):
    cells = [label.ljust(10)]
    for s in (c, l):
        cells.append(f"{s['cycles']:>8}" + "".join(f"{us(s[k]):>9}" for k in cols[1:]))
    cells.append(f"{ratio(l['avg'], c['avg']):>7}{ratio(l['p99'], c['p99']):>7}")
    return " | ".join(cells)

head = f"{'cycles':>8}" + "".join(f"{k:>9}" for k in cols[1:])
print()
print("latency in us (cyclictest: clock_nanosleep wake-up; lfrt: expected expiry -> handler entry)")
print(" | ".join(["".ljust(10), "cyclictest".center(len(head)), "lfrt cyclic".center(len(head)), "lfrt/cyclictest".center(14)]))
print(" | ".join(["thread".ljust(10), head, head, f"{'avg':>7}{'p99':>7}"]))
for i in range(max(len(ctt), len(lft))):
    if i < len(ctt) and i < len(lft):
        print(row(f"T{i}", stats([ctt[i]]), stats([lft[i]])))
print(row("all", stats(ctt), stats(lft)))
ca, la = stats(ctt), stats(lft)
print("ratios lfrt/cyclictest (all threads): " + " ".join(
    f"{k}={ratio(la[k], ca[k])}" for k in ("avg", "p99", "p999", "max")))
print("latency_us cyclictest: " + " ".join(f"{k}={us(ca[k])}" for k in ("avg", "p99", "p999", "max")))
print("latency_us lfrt:       " + " ".join(f"{k}={us(la[k])}" for k in ("avg", "p99", "p999", "max")))

# The highest-priority lfrt lane against all cyclictest threads (cyclictest runs every thread
# at one priority when -h is given).
top = max(lf["lanes"], key=lambda g: g["priority"])
lg = stats([lft[i] for i in top["timers"]])
print()
print(f"lfrt lane '{top['name']}' (priority {top['priority']}, {top['pool_threads']} pool threads): "
      f"avg ratio {ratio(lg['avg'], stats(ctt)['avg'])}, p99 ratio {ratio(lg['p99'], stats(ctt)['p99'])} (target <= 1.2)")
w, d = top["wake"], top["dispatch"]
print(f"lfrt split (us)  wake = expiry -> leader awake: avg {w['avg']/1000:.1f} p99 {w['p99']/1000:.1f} max {w['max']/1000:.1f};"
      f"  dispatch = leader awake -> handler entry: avg {d['avg']/1000:.1f} p99 {d['p99']/1000:.1f} max {d['max']/1000:.1f}")
print(f"lfrt: missed_periods={lf['missed_periods']} pool_allocations={lf['pool_allocations']} pool_minor_faults={lf['pool_minor_faults']} "
      f"samples_dropped={lf['samples_dropped']} promotions={top['promotions']} no_follower={top['promotions_no_follower']} "
      f"rt_applied={lf['rt_applied']} memory_locked={lf['memory_locked']}")
def late(t):
    """Samples at least one period late (cyclictest then skips the missed periods; lfrt counts
    them as overruns)."""
    h = in_range(t)
    return sum(c for k, c in h.items() if k >= t["_period"]) + (t["cycles"] - sum(h.values()))
for i, t in enumerate(ctt):
    t["_period"] = lft[min(i, len(lft) - 1)]["interval"] * 1000  # same parameters: same periods
for t in lft:
    t["_period"] = t["interval"] * 1000
print(f"samples >= 1 period late: cyclictest {sum(late(t) for t in ctt)}, lfrt {sum(late(t) for t in lft)}"
      f" (lfrt missed periods: {lf['missed_periods']})")
print(f"IPIs (rescheduling + function call, whole machine) per cycle: cyclictest {ipis_ct / stats(ctt)['cycles']:.3f}, "
      f"lfrt {ipis_lf / stats(lft)['cycles']:.3f}")
PY
