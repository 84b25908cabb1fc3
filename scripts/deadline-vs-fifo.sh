#!/usr/bin/env bash
# Issue 15 item 3: `lfrt cyclic` on a SCHED_DEADLINE lane against a SCHED_FIFO lane, each with and
# without a competing SCHED_FIFO flood, side by side in one run.
#
# Usage: scripts/deadline-vs-fifo.sh [SECONDS per cell, default 5]
#   FIFO lane:     lfrt cyclic -p 80 -t 2 -i 1000 ...
#   deadline lane: lfrt cyclic --policy deadline -p 80 --dl-runtime 100 --dl-deadline 1000
#                  --dl-period 1000 -t 2 -i 1000 ...   (each pool thread reserves 10 % of a CPU)
#   flood:         one process per CPU, pinned, SCHED_FIFO 90 (above the FIFO lane), busy 2 ms
#                  in every 4 ms (50 % duty), bursts aligned on CLOCK_MONOTONIC so both CPUs are
#                  busy at once; each stops by itself after the cell, and RLIMIT_RTTIME (100 ms
#                  without blocking: SIGXCPU, 200 ms: SIGKILL) ends it if it ever fails to sleep.
# A deadline lane cannot be pinned (the kernel admits SCHED_DEADLINE only with an affinity that
# spans the root domain), so neither lane is pinned and the flood covers every CPU.
# Each cell takes the machine-wide RT lock (/tmp/lfrt-tools.lock). SCHED_FIFO + DEADLINE
# busy time: 50 % flood + the lanes' few %, well below the kernel's 95 % RT limit.
#
# Environment: LFRT (binary; default: build it with cargo), OUT_DIR (JSON files).
set -euo pipefail
cd "$(dirname "$0")"/..
command -v python3 >/dev/null 2>&1 || { echo "python3 is needed to run the flood and read the JSON" >&2; exit 1; }
if [ -z "${LFRT:-}" ]; then
    cargo build --release --quiet --bin lfrt
    LFRT="${CARGO_TARGET_DIR:-target}/release/lfrt"
fi
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/deadline-vs-fifo.XXXXXX)}
mkdir -p "$OUT_DIR"
echo "# machine: $(nproc) CPUs, kernel $(uname -r); loadavg before: $(cat /proc/loadavg)"
echo "# results: $OUT_DIR"
exec python3 - "$LFRT" "$OUT_DIR" "${1:-5}" <<'PY'
import fcntl, json, os, subprocess, sys, time

lfrt, out_dir, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
assert 0 < secs <= 20, "SECONDS per cell: at most 20"
FLOOD_PRIO, ON_S, PERIOD_S = 90, 0.002, 0.004
LANE = ["-p", "80", "-t", "2", "-i", "1000"]
DEADLINE = ["--policy", "deadline", "--dl-runtime", "100", "--dl-deadline", "1000", "--dl-period", "1000"]
FLOOD = r'''
import os, resource, sys, time
cpu, prio, on, period, until = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
os.sched_setaffinity(0, {cpu})
resource.setrlimit(resource.RLIMIT_RTTIME, (100_000, 200_000))
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))
while True:
    now = time.monotonic()
    if now >= until:
        break
    start = now - now % period
    burst_end = min(start + on, until)
    while time.monotonic() < burst_end:
        pass
    time.sleep(max(0.0, min(start + period, until) - time.monotonic()))
'''

def cell(name, lane, flood):
    path = os.path.join(out_dir, name + ".json")
    cmd = [lfrt, "cyclic", "-q", "-N", "-D", f"{secs:g}s", f"--json={path}"] + lane
    with open("/tmp/lfrt-tools.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        floods = []
        if flood:
            until = time.monotonic() + secs + 1.0
            floods = [subprocess.Popen([sys.executable, "-c", FLOOD, str(c), str(FLOOD_PRIO), str(ON_S), str(PERIOD_S), str(until)])
                      for c in sorted(os.sched_getaffinity(0))]
            time.sleep(0.2)
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, RUST_LOG="warn"))
        for f in floods:
            f.wait()
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {r.stderr.decode()}")
    if any(f.returncode != 0 for f in floods):
        sys.exit(f"flood ended with {[f.returncode for f in floods]}")
    return json.load(open(path)), " ".join(cmd)

print(f"\nlatency us (expected expiry -> handler entry), 2 timers at 1 ms, {secs:g} s per cell; "
      f"flood: SCHED_FIFO {FLOOD_PRIO} on every CPU, {ON_S*1e3:g} ms busy in every {PERIOD_S*1e3:g} ms")
print(f"{'lane':<9} {'flood':<6} {'cycles':>7} {'missed':>7} {'avg':>8} {'p99':>8} {'p99.9':>8} {'max':>8}  command")
for lane_name, lane in (("fifo", LANE), ("deadline", DEADLINE + LANE)):
    for flood in (False, True):
        doc, cmd = cell(f"{lane_name}-{'flood' if flood else 'quiet'}", lane, flood)
        g = doc["lanes"][0]
        assert g["policy"] == lane_name, g["policy"]
        print(f"{lane_name:<9} {'yes' if flood else 'no':<6} {g['cycles']:>7} {g['missed_periods']:>7} {g['avg']/1000:>8.1f} "
              f"{g['p99']/1000:>8.1f} {g['p999']/1000:>8.1f} {g['max']/1000:>8.1f}  {cmd}{'  + flood' if flood else ''}")
print(f"# loadavg after: {open('/proc/loadavg').read().strip()}")
PY
