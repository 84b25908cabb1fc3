#!/usr/bin/env bash
# Compares two builds of the `lfrt` command side by side, alternating A and B, on the two paths
# a service runs: timer latency (`lfrt cyclic`) and UDP echo throughput (`lfrt run` of
# configs/udp-echo.toml, loaded by lfrt-loadgen from build B). Used to show that a change cost
# nothing (issue #11: the workspace split).
#
#   scripts/ab-builds.sh A/lfrt B/lfrt [ROUNDS]        (default 2 rounds)
#
# Bounded: per round and build, one 10 s cyclic run (-m -p 80 -i 1000 -t 2) and one 5 s echo
# load (closed loop, window 8 per port, 4 ports, 64-byte datagrams) against a FIFO 50 server.
# Every run holds the machine-wide RT lock. Prints one line per run and the B/A ratios of the
# medians.
set -euo pipefail
cd "$(dirname "$0")"/..
A=${1:?usage: ab-builds.sh A/lfrt B/lfrt [ROUNDS]}
B=${2:?usage: ab-builds.sh A/lfrt B/lfrt [ROUNDS]}
ROUNDS=${3:-2}
LOADGEN=$(dirname "$B")/lfrt-loadgen
LOCK=/tmp/lfrt-tools.lock
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for r in $(seq 1 "$ROUNDS"); do
    for side in A B; do
        bin=${!side}
        flock "$LOCK" "$bin" cyclic -m -p 80 -i 1000 -t 2 -D 10 -q -N -h 2000000 \
            --json="$out/cyc-$side-$r.json" > /dev/null 2>&1
        flock "$LOCK" bash -c '
            /usr/bin/time -f "%U %S" -o "$4" "$1" run configs/udp-echo.toml --duration 7 \
                > /dev/null 2>&1 &
            server=$!
            sleep 1
            "$2" --ports 7000-7003 --window 8 --size 64 --duration 5 --json "$3" > /dev/null
            wait $server' _ "$bin" "$LOADGEN" "$out/echo-$side-$r.json" "$out/cpu-$side-$r.txt"
    done
done

python3 - "$out" "$ROUNDS" <<'EOF'
import json, sys, statistics as st
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {"A": [], "B": []}
for r in range(1, rounds + 1):
    for side in "AB":
        c = json.load(open(f"{out}/cyc-{side}-{r}.json"))
        th = list(c["thread"].values())
        scale = 1000.0 if c.get("unit") == "ns" else 1.0
        cycles = sum(t["cycles"] for t in th)
        avg = sum(t["avg"] * t["cycles"] for t in th) / cycles / scale
        p99 = max(t["p99"] for t in th) / scale
        missed = c.get("missed_periods", c.get("overruns"))
        e = json.load(open(f"{out}/echo-{side}-{r}.json"))
        rep = e.get("report", e)
        thr = rep["throughput_msgs_per_s"]
        rtt99 = rep["rtt_us"]["p99"] if "rtt_us" in rep else rep.get("rtt_p99_us")
        u, s = map(float, open(f"{out}/cpu-{side}-{r}.txt").read().split()[-2:])
        cpu_us = (u + s) * 1e6 / max(rep["received"], 1)
        rows[side].append((avg, p99, missed, thr, rtt99, cpu_us))
        print(f"round {r} {side}: cyclic avg {avg:6.1f} us  p99(max of threads) {p99:7.1f} us  missed {missed:4}  |"
              f"  echo {thr:9.0f} msg/s  RTT p99 {rtt99:7.1f} us  server CPU {cpu_us:5.2f} us/msg")
med = {k: [st.median(x[i] for x in v) for i in range(6)] for k, v in rows.items()}
names = ["cyclic avg", "cyclic p99", "missed periods", "echo msg/s", "echo RTT p99", "server CPU/msg"]
print("median B/A: " + ", ".join(
    f"{n} {med['B'][i] / med['A'][i]:.2f}" if med["A"][i] else f"{n} {med['A'][i]}->{med['B'][i]}"
    for i, n in enumerate(names)))
EOF
