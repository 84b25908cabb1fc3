//! A per-thread parker: the follower's own synchronizer ("specific notification").
//!
//! Conceptually each parker holds a token that is initially absent. `unpark` makes the token
//! present; `park` waits until it is present and consumes it. An `unpark` that happens before
//! the matching `park` is therefore never lost.
//!
//! A futex word with three states: `EMPTY` (no token, nobody asleep), `PARKED` (owner asleep or
//! about to sleep), `NOTIFIED` (token present).

// Loom builds park on the model in `sync/mod.rs`; this one is compiled but unused there.
#![cfg_attr(loom, allow(dead_code))]

use crate::sys::futex;
use std::sync::atomic::{AtomicU32, Ordering::*};

const EMPTY: u32 = 0;
const PARKED: u32 = 1;
const NOTIFIED: u32 = 2;

/// A single-owner parker; any thread may `unpark` it.
#[derive(Debug)]
pub(crate) struct Parker {
    state: AtomicU32,
}

impl Parker {
    /// A parker without a token.
    pub(crate) fn new() -> Parker {
        Parker {
            state: AtomicU32::new(EMPTY),
        }
    }

    /// Blocks until the token is present, then consumes it. Only the owner thread calls this.
    pub(crate) fn park(&self) {
        // Fast path: the token arrived already. Acquire pairs with the Release in `unpark`, so
        // writes made before `unpark` (e.g. "you are the leader now") are visible after return.
        if self
            .state
            .compare_exchange(NOTIFIED, EMPTY, Acquire, Relaxed)
            .is_ok()
        {
            return;
        }
        if let Err(s) = self.state.compare_exchange(EMPTY, PARKED, Relaxed, Relaxed) {
            assert_eq!(s, NOTIFIED, "inconsistent parker state: {s}");
            self.state.swap(EMPTY, Acquire);
            return;
        }
        loop {
            // Sleeps only while the word is still PARKED, so an unpark between the CAS above
            // and this call is not lost (the kernel compares atomically).
            futex::wait(&self.state, PARKED);
            if self
                .state
                .compare_exchange(NOTIFIED, EMPTY, Acquire, Relaxed)
                .is_ok()
            {
                return;
            }
            // Spurious wake-up (signal, EAGAIN): still PARKED, sleep again.
        }
    }

    /// Like [`park`](Self::park), but gives up at `deadline_ns` (absolute `CLOCK_MONOTONIC`).
    /// Returns `true` if the token was consumed, `false` on timeout (the token stays absent;
    /// an `unpark` racing with the timeout is not lost: it is either consumed here or kept).
    pub(crate) fn park_until(&self, deadline_ns: u64) -> bool {
        if self
            .state
            .compare_exchange(NOTIFIED, EMPTY, Acquire, Relaxed)
            .is_ok()
        {
            return true;
        }
        if let Err(s) = self.state.compare_exchange(EMPTY, PARKED, Relaxed, Relaxed) {
            assert_eq!(s, NOTIFIED, "inconsistent parker state: {s}");
            self.state.swap(EMPTY, Acquire);
            return true;
        }
        loop {
            let timed_out = !futex::wait_until(&self.state, PARKED, deadline_ns)
                || crate::sys::now_ns() >= deadline_ns;
            if self
                .state
                .compare_exchange(NOTIFIED, EMPTY, Acquire, Relaxed)
                .is_ok()
            {
                return true;
            }
            if timed_out {
                // Withdraw: PARKED -> EMPTY. If an unpark won the race, the word is NOTIFIED
                // and the token is consumed instead, so it is never left behind half-delivered.
                return match self.state.compare_exchange(PARKED, EMPTY, Relaxed, Acquire) {
                    Ok(_) => false,
                    Err(_) => {
                        self.state.swap(EMPTY, Acquire);
                        true
                    }
                };
            }
        }
    }

    /// Makes the token present and wakes the owner if it sleeps.
    pub(crate) fn unpark(&self) {
        match self.state.swap(NOTIFIED, Release) {
            EMPTY | NOTIFIED => {}
            PARKED => futex::wake(&self.state, 1),
            s => panic!("inconsistent parker state: {s}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A token given before the park is kept: the park returns with it (and does not wait
    /// out its deadline), and consumes it.
    #[test]
    fn unpark_before_park_is_kept() {
        let p = Parker::new();
        p.unpark();
        let deadline = crate::sys::now_ns() + 10_000_000_000;
        assert!(p.park_until(deadline), "the early token was lost");
        assert!(crate::sys::now_ns() < deadline, "waited for the deadline");
        assert!(!p.park_until(0), "the token was not consumed");
    }

    #[test]
    fn park_until_times_out_without_token_and_returns_with_one() {
        let p = Parker::new();
        assert!(!p.park_until(crate::sys::now_ns() + 1_000_000));
        p.unpark();
        assert!(p.park_until(crate::sys::now_ns() + 1_000_000));
        // A deadline in the past still consumes a present token.
        p.unpark();
        assert!(p.park_until(0));
        assert!(!p.park_until(0));
    }

    /// 10,000 hand-offs between two threads: every wake-up arrives (each wait is bounded, so a
    /// lost wake-up fails the test instead of hanging it), and no token is left over.
    #[test]
    fn ping_pong() {
        const ROUNDS: u32 = 10_000;
        let a = Arc::new((Parker::new(), Parker::new()));
        let b = a.clone();
        let bounded = |p: &Parker| p.park_until(crate::sys::now_ns() + 10_000_000_000);
        let t = std::thread::spawn(move || {
            let mut woken = 0;
            for _ in 0..ROUNDS {
                woken += u32::from(bounded(&b.0));
                b.1.unpark();
            }
            woken
        });
        let mut woken = 0;
        for _ in 0..ROUNDS {
            a.0.unpark();
            woken += u32::from(bounded(&a.1));
        }
        assert_eq!(woken, ROUNDS, "this side lost a wake-up");
        assert_eq!(t.join().unwrap(), ROUNDS, "the other side lost a wake-up");
        assert!(
            !a.0.park_until(0) && !a.1.park_until(0),
            "a token was left over"
        );
    }
}
