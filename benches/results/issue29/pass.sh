#!/usr/bin/env bash
# Issue 29's measurement pass, one benchmark at a time on a quiet machine (about 12 min).
# Output beside this file. z_ping/z_pong are Zenoh's examples built against zenoh 1.10.2
# outside the repository (/tmp/zping; see BENCHMARKS §5.6); skipped if absent.
set -u
cd "$(dirname "$0")/../../.."
out=benches/results/issue29
cargo bench -p lfrt-zenoh --no-run -q 2>/dev/null
cargo bench -p lfrt-iceoryx2 --no-run -q 2>/dev/null
z() { cargo bench -q -p lfrt-zenoh --bench latency -- "$@"; }
z                          > $out/zenoh-loopback-2links.txt 2>&1
z --links 1                > $out/zenoh-loopback-1link.txt 2>&1
z --flood-per-ms 20        > $out/zenoh-loopback-bounded.txt 2>&1
z --rx-priority 10         > $out/zenoh-loopback-rxfifo.txt 2>&1
z --isolated               > $out/zenoh-loopback-isolated.txt 2>&1
z --netns 10               > $out/zenoh-netns-10mbit-2links.txt 2>&1
z --netns 10 --links 1     > $out/zenoh-netns-10mbit-1link.txt 2>&1
if [ -x /tmp/zping/target/release/z_ping ]; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    /tmp/zping/target/release/z_pong tcp/127.0.0.1:$port 40 & pong=$!
    sleep 1
    /tmp/zping/target/release/z_ping tcp/127.0.0.1:$port 16 10000 1000 > $out/z_ping.txt 2>&1
    /tmp/zping/target/release/z_ping tcp/127.0.0.1:$port 16 10000 0 >> $out/z_ping.txt 2>&1
    kill $pong
fi
cargo bench -q -p lfrt-iceoryx2 --bench latency > $out/iceoryx2.txt 2>&1
cargo bench -q -p lfrt-iceoryx2 --bench latency -- --publisher-fifo 70 > $out/iceoryx2-publisher-fifo.txt 2>&1
echo done
