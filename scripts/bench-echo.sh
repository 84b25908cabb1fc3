#!/usr/bin/env bash
# Throughput and overhead of a UDP echo service: lfrt vs Half-Sync/Half-Reactive vs tokio,
# side by side in one run (issue #6). Bounded: 12 runs of --duration each (default 5s).
# Extra arguments go to the benchmark, e.g. --threads 2 --window 8 --work 0,5,50 --fifo 50.
# On a terminal, stderr shows "cell k/n" and the time left; nothing of it in a pipe or file.
set -euo pipefail
cd "$(dirname "$0")"/..
mkdir -p results
exec flock /tmp/lfrt-rt-tests.lock cargo bench --bench echo -- --json "$PWD/benches/results/echo.json" "$@"
