#!/usr/bin/env bash
# Model-checks the Leader/Followers protocol (src/engine/leader.rs: the unbound promotion and the bound
# variant's hand-off, failure, shutdown and timeout races) with loom.
#
# LOOM_MAX_PREEMPTIONS=2: the 3-thread models are exhaustive only up to 2 preemptions; unbounded
# they take minutes (218 s measured for a similar model), while 2 covers the interleavings that
# matter for a hand-off between a leader, a follower and a rejoining thread in seconds. The
# timeout-race model sets 3 itself (about 2 s): the stale-token interleaving needs a third.
# The batch_* models (a leader's left-over events pass on with the role, each taken once) and the
# deferred_promotion_* models (a kept role, the watchdog's relief at any point, a link in a
# wait's batch with 3 workers; about 25 s together) run with them.
# The no_starvation_* models (a ready handle is taken by an idle thread, every promotion mode,
# concurrent mode and borrowing) take about a second together.
set -euxo pipefail
cd "$(dirname "$0")"/..
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom \
    cargo test -p lfrt --release --lib leader::loom_tests -- --test-threads=1 "$@"

# A handle's claim word (src/engine/claim.rs) against a model edge-triggered kernel: two
# waiters and two arrivals, with a run again or a re-check (no lost report, never two runs at
# once), and a vacate against a report. Up to 4 preemptions (about 5 s; exhaustive takes 9
# minutes; a mutant that drops the "reported meanwhile" flag fails at 3).
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=4 CARGO_TARGET_DIR=target/loom \
    cargo test -p lfrt --release --lib claim::loom_tests -- --test-threads=1 "$@"

# The bound pool (src/bound/table.rs) on that protocol. Its models set their preemption bound
# themselves: 3 for the 3-thread models and 2 for the 4-thread one (about 20 s in all).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p lfrt --release --lib bound::table::loom_tests -- --test-threads=1 "$@"

# The queue no thread waits in (src/sync/queue.rs) and the doorbell that wakes its consumer
# (src/sync/doorbell.rs; lane inboxes, task ready sets, the relay) and the bitmap free lists
# (src/sync/free.rs): a popper never waits for a
# pusher that claimed a cell but has not written it, each value goes to one popper, and every
# push is delivered or rung (two pushers against a draining consumer).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p lfrt --release --lib -- sync::queue::loom_tests sync::doorbell::loom_tests sync::free::loom_tests --test-threads=1 "$@"

# Lane borrowing's arming flag and borrowed count (src/engine/borrow.rs) against a model kernel: two
# lenders, a vacancy and arrivals; no event stranded while the lane is busy.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p lfrt --release --lib borrow::loom_tests -- --test-threads=1 "$@"

# Lane tasks' state word (src/task/state.rs): two wakers against the poller (no lost wake, no
# overlapping polls, queued at most once), completion against the join handle (freed exactly
# once, an awaiting handle is woken), a stale waker against the slot's reuse, and shutdown's
# cancel from another thread against the poller (never polled once dropped). The 3-thread
# model sets preemption bound 3 itself (under a second in all).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p lfrt --release --lib task::state::loom_tests -- --test-threads=1 "$@"

# A lane's wake path against its turn (state word, ready queue, doorbell; src/task/loom.rs):
# no lost wake, a cancel racing a wake drops the future exactly once (exhaustive, about a second).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p lfrt --release --lib task::loom:: -- --test-threads=1 "$@"

# Reply slots (src/task/channel.rs): the replying or vanishing sender against the receiver;
# released exactly once, a sent value dropped exactly once (exhaustive, two threads).
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p lfrt --release --lib task::channel::loom_tests -- --test-threads=1 "$@"
