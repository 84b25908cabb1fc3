#!/usr/bin/env bash
# Measurement pass 3 (after the quick-prefix fix): old engine (7f2d804) beside the final new one, alternating.
set -u
O=${O:-/tmp/pass}
mkdir -p $O
NEW=/work/main/target/release
OLD=/work/old/target/release
L=/tmp/lfrt-tools.lock
NEWE=/work/main/target/release/deps/echo-d28c251745980ab9
OLDE=/work/old/target/release/deps/echo-d28c251745980ab9
NEWS=/work/main/target/release/deps/sockperf-e18324d2c4dd42c8
OLDS=/work/old/target/release/deps/sockperf-e18324d2c4dd42c8
FLOOR=/work/main/target/release/deps/timer_floor-20d8753a3face6bc
echo "start $(date -u +%H:%M:%S) $(uptime)" > $O/log
cd /work/main
python3 scripts/latency-split.py timers -D 5 > $O/split-timers-new.txt 2>&1
LFRT=$OLD/lfrt python3 scripts/latency-split.py timers -D 5 > $O/split-timers-old.txt 2>&1
python3 scripts/latency-split.py timers -D 5 --aligned > $O/split-aligned-new.txt 2>&1
python3 scripts/latency-split.py echo -D 3 > $O/split-echo-new.txt 2>&1
LFRT=$OLD/lfrt python3 scripts/latency-split.py echo -D 3 > $O/split-echo-old.txt 2>&1
echo "split done $(date -u +%H:%M:%S)" >> $O/log
for r in 1 2 3; do
  LFRT=$NEW/lfrt scripts/compare-cyclictest.sh --staggered-and-aligned -m -p 80 -t 2 -i 1000 -d 0 -D 10 > $O/timers-new-$r.txt 2>&1
  LFRT=$OLD/lfrt scripts/compare-cyclictest.sh --staggered-and-aligned -m -p 80 -t 2 -i 1000 -d 0 -D 10 > $O/timers-old-$r.txt 2>&1
done
echo "timers done $(date -u +%H:%M:%S)" >> $O/log
E="--duration 5s --threads 2 --ports 4 --window 16 --work 0,5,50 --fifo 80 --arch lfrt,tokio,tokio-fifo --gen-threads 2 --clients unbatched"
for r in 1 2; do
for place in "" "--pin"; do
  (cd /work/main/rt-tests && flock $L $NEWE $E $place > $O/echo-new${place:+-pinned}-$r.txt 2>&1)
  (cd /work/old/rt-tests && flock $L $OLDE $E $place > $O/echo-old${place:+-pinned}-$r.txt 2>&1)
done
done
for pw in "64 4" "256 1"; do
  set -- $pw
  P="--duration 5s --threads 2 --ports $1 --window $2 --work 0 --fifo 80 --arch lfrt,tokio,tokio-fifo --gen-threads 2 --clients unbatched"
  (cd /work/main/rt-tests && flock $L $NEWE $P > $O/echo-new-ports$1.txt 2>&1)
  (cd /work/old/rt-tests && flock $L $OLDE $P > $O/echo-old-ports$1.txt 2>&1)
done
echo "echo done $(date -u +%H:%M:%S)" >> $O/log
(cd /work/main/rt-tests && flock $L $NEWS --duration 10s --rounds 3 --pin > $O/sockperf-new-pinned.txt 2>&1)
(cd /work/old/rt-tests && flock $L $OLDS --duration 10s --rounds 3 --pin > $O/sockperf-old-pinned.txt 2>&1)
(cd /work/main/rt-tests && flock $L $NEWS --duration 10s --rounds 3 > $O/sockperf-new.txt 2>&1)
echo "sockperf done $(date -u +%H:%M:%S)" >> $O/log
flock $L $FLOOR -t 256 -i 1000 -D 10 -p 80 > $O/t256-floor.txt 2>&1
flock $L $NEW/lfrt cyclic -m -p 80 -t 256 -i 1000 -d 0 --pool-threads 2 -D 10 -q > $O/t256-new.txt 2>&1
flock $L $OLD/lfrt cyclic -m -p 80 -t 256 -i 1000 -d 0 --pool-threads 2 -D 10 -q > $O/t256-old.txt 2>&1
flock $L $NEW/lfrt cyclic -m -p 80 -t 256 -i 1000 -d 0 --pool-threads 2 --promotion concurrent -D 10 -q > $O/t256-new-cc.txt 2>&1
flock $L $FLOOR -t 256 -i 1000 -D 10 -p 80 > $O/t256-floor2.txt 2>&1
echo "t256 done $(date -u +%H:%M:%S)" >> $O/log
LFRT=$NEW/lfrt scripts/rteval.sh -D 20 -r 2 > $O/rteval-new.txt 2>&1
LFRT=$OLD/lfrt scripts/rteval.sh -D 20 -r 2 > $O/rteval-old.txt 2>&1
echo "rteval done $(date -u +%H:%M:%S)" >> $O/log
grep -A1 '^Udp:' /proc/net/snmp > $O/snmp-before.txt
RUST_LOG=warn flock $L $NEW/lfrt inversion --json $O/inversion-new.json > $O/inversion-new.txt 2>&1
grep -A1 '^Udp:' /proc/net/snmp > $O/snmp-after.txt
echo "inversion done $(date -u +%H:%M:%S)" >> $O/log
scripts/soak.sh --duration 60 > $O/soak-new.txt 2>&1
echo "end $(date -u +%H:%M:%S) $(uptime)" >> $O/log
