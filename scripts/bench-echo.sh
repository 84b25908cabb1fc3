#!/usr/bin/env bash
# Throughput and overhead of a UDP echo service: lfrt vs Half-Sync/Half-Reactive vs tokio,
# side by side in one run (issue #6), each cell with both client shapes (issue #22): unbatched
# independent clients (the headline columns) and the batched generator (the b: columns), with
# the generator's own CPU share (gen%; GEN-SATURATED above 80 %).
# Bounded: 5 architectures x 3 work values x 2 client shapes = 30 runs of --duration each
# (default 5s, so about 3 minutes with start-up and drain). --quick: 1s each.
# Extra arguments go to the benchmark, e.g. --threads 2 --window 8 --work 0,5,50 --fifo 50,
# --clients unbatched (one shape only), --gen-threads 2.
# On a terminal, stderr shows "cell k/n" and the time left; nothing of it in a pipe or file.
set -euo pipefail
cd "$(dirname "$0")"/..
mkdir -p benches/results
exec flock /tmp/lfrt-tools.lock cargo bench --bench echo -- --json "$PWD/benches/results/echo.json" "$@"
