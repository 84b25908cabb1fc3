#!/usr/bin/env bash
# Runs the unit tests of the library's raw memory under valgrind's memcheck: the task layer's
# slab, cells and tagged wakers (src/task/: raw.rs, waker.rs, and the executor tests that
# spawn, poll, complete, cancel and reuse slots), the queue no thread waits in
# (src/sync/queue.rs) and its doorbell. Miri cannot be installed on these machines (no
# toolchain can be fetched), so this is the memory checker CI runs: an invalid read or write,
# a use of uninitialised memory or a double free in those tests fails it.
#
# Leaks are not checked: the tests keep threads and runtimes whose memory the process frees
# at exit. About a minute (valgrind runs the code some 20-50 times slower).
#
# Usage: scripts/memcheck.sh [extra test-name filters]
set -euo pipefail
cd "$(dirname "$0")"/..
command -v valgrind >/dev/null || { echo "memcheck: valgrind is not installed (Debian: valgrind)" >&2; exit 1; }

# The library's unit-test binary (a debug build: full debug info, no inlining to hide a frame).
bin=$(cargo test -p lfrt --lib --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") \
            and m["target"]["name"] == "lfrt" and m.get("executable"):
        print(m["executable"])')
[ -n "$bin" ] || { echo "memcheck: no unit-test binary of lfrt found" >&2; exit 1; }

filters=(task:: sync::queue:: sync::doorbell:: sync::free:: "$@")
# Tests whose assertions rest on deadlines of 1-2 ms of wall-clock time: under valgrind's
# slowdown the deadline has passed before the first poll, so they test a different path (they
# run, unchecked by memcheck, in the normal test suite).
skip=(--skip a_stale_deadline_does_not_wake_the_slots_next_task
      --skip a_sleep_under_a_wrapping_combinator_completes
      --skip a_full_channel_send_under_a_combinator_waits_on_the_lane_timer)
set -x
# --error-exitcode: any memory error fails the run (99), as a failing test does (101).
valgrind --tool=memcheck --error-exitcode=99 --leak-check=no --track-origins=yes \
    --quiet "$bin" --test-threads=1 "${filters[@]}" "${skip[@]}"
