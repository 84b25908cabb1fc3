//! A per-thread parker: the follower's own synchronizer ("specific notification").
//!
//! Conceptually each parker holds a token that is initially absent. `unpark` makes the token
//! present; `park` waits until it is present and consumes it. An `unpark` that happens before
//! the matching `park` is therefore never lost.
//!
//! Two kinds:
//! * a **futex** parker (the bound pool's threads, and any protocol built without one):
//!   states of the futex word `EMPTY` (no token, nobody asleep), `PARKED` (owner asleep or
//!   about to sleep), `NOTIFIED` (token present);
//! * a **timed** parker (the unbound Leader/Followers threads): the thread sleeps in
//!   `epoll_wait` on a small epoll set of its own holding an eventfd (the token: edge-triggered,
//!   so each `unpark` is one event, and never read) and a timerfd, its *promotion timer*. A
//!   leader that keeps its role while it processes the events of its wait arms the timer of
//!   the follower it would have promoted ([`promote_at`]): if it still holds them when the timer
//!   expires, the kernel wakes that follower, which takes the role (`leader.rs`, deferred
//!   promotion); a leader that is back first cancels it before its next wait blocks
//!   ([`cancel_promotion`]), and nobody was woken.
//!
//! [`promote_at`]: Parker::promote_at
//! [`cancel_promotion`]: Parker::cancel_promotion

// Loom builds park on the model in `sync/mod.rs`; this one is compiled but unused there.
#![cfg_attr(loom, allow(dead_code))]

use crate::sys::epoll::{self, Epoll};
use crate::sys::fd::{EventFd, TimerFd};
use crate::sys::futex;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

const EMPTY: u32 = 0;
const PARKED: u32 = 1;
const NOTIFIED: u32 = 2;

/// Data word of the token's eventfd in a timed parker's set.
const BELL: u64 = 0;
/// Data word of the promotion timer in a timed parker's set.
const TIMER: u64 = 1;

/// A timed parker's epoll set, its token eventfd and its promotion timer.
#[derive(Debug)]
struct Timed {
    set: Epoll,
    bell: EventFd,
    timer: TimerFd,
    /// When the armed promotion timer expires (`CLOCK_MONOTONIC` ns); 0 when not armed.
    due_ns: AtomicU64,
}

/// A single-owner parker; any thread may `unpark` it.
#[derive(Debug)]
pub(crate) struct Parker {
    state: AtomicU32,
    timed: Option<Timed>,
}

impl Parker {
    /// A futex parker.
    pub(crate) fn new() -> Parker {
        Parker {
            state: AtomicU32::new(EMPTY),
            timed: None,
        }
    }

    /// A timed parker (module docs): an epoll set with the token eventfd and a promotion
    /// timer, both edge-triggered.
    pub(crate) fn timed() -> io::Result<Parker> {
        let set = Epoll::new()?;
        let bell = EventFd::new()?;
        let timer = TimerFd::new()?;
        set.add(bell.as_fd().as_raw_fd(), epoll::IN | epoll::ET, BELL)?;
        set.add(timer.as_fd().as_raw_fd(), epoll::IN | epoll::ET, TIMER)?;
        Ok(Parker {
            state: AtomicU32::new(EMPTY),
            timed: Some(Timed {
                set,
                bell,
                timer,
                due_ns: AtomicU64::new(0),
            }),
        })
    }

    /// Blocks until the token is present, then consumes it. Only the owner thread calls this.
    /// A timed parker may also return for its promotion timer or a signal: its callers
    /// re-check their state after every park.
    pub(crate) fn park(&self) {
        if let Some(t) = &self.timed {
            // One event: the token or the promotion timer (each edge-triggered: reported once
            // per unpark or expiry, nothing to read). EINTR: a spurious return.
            let _ = t.set.wait_one(-1);
            return;
        }
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
        if let Some(t) = &self.timed {
            let now = crate::sys::now_ns();
            let left_ms = deadline_ns.saturating_sub(now).div_ceil(1_000_000);
            return matches!(
                t.set.wait_one(left_ms.min(i32::MAX as u64) as i32),
                Ok(Some(_))
            );
        }
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
        if let Some(t) = &self.timed {
            // The woken owner re-locks the protocol state, which orders what the waker wrote
            // before it.
            if t.bell.write(1).is_err() {
                // Only at a counter of 2^64 - 2 writes: reset it and ring again.
                let _ = t.bell.read();
                let _ = t.bell.write(1);
            }
            return;
        }
        match self.state.swap(NOTIFIED, Release) {
            EMPTY | NOTIFIED => {}
            PARKED => futex::wake(&self.state, 1),
            s => panic!("inconsistent parker state: {s}"),
        }
    }

    /// Arms the promotion timer: the owner is woken at `at_ns` (absolute `CLOCK_MONOTONIC`)
    /// unless [`cancel_promotion`](Self::cancel_promotion) comes first. A futex parker has no
    /// timer: it is woken at once (an eager promotion is always correct).
    pub(crate) fn promote_at(&self, at_ns: u64) {
        match &self.timed {
            Some(t) => {
                t.due_ns.store(at_ns.max(1), Release);
                if t.timer.set_abs(at_ns.max(1), 0).is_err() {
                    // Cannot happen for a live timerfd; an eager wake is always correct.
                    self.unpark();
                }
            }
            None => self.unpark(),
        }
    }

    /// Disarms the promotion timer (an expiry that already woke the owner is not undone: it
    /// finds [`promotion_due`](Self::promotion_due) false and parks again).
    pub(crate) fn cancel_promotion(&self) {
        if let Some(t) = &self.timed {
            t.due_ns.store(0, Release);
            let _ = t.timer.set_abs(0, 0);
        }
    }

    /// Whether the armed promotion timer has expired (read by the owner after it woke).
    pub(crate) fn promotion_due(&self) -> bool {
        match &self.timed {
            Some(t) => {
                let due = t.due_ns.load(Acquire);
                due != 0 && crate::sys::now_ns() >= due
            }
            None => false,
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

    /// A timed parker: a token given before the park is kept; an armed promotion timer wakes
    /// the owner once, at its time, and says it is due; a cancelled one does not wake it.
    #[test]
    fn a_timed_parker_wakes_for_its_token_and_its_promotion_timer() {
        let p = Parker::timed().unwrap();
        let far = || crate::sys::now_ns() + 10_000_000_000;
        p.unpark();
        assert!(p.park_until(far()), "the early token was lost");
        assert!(
            !p.park_until(crate::sys::now_ns() + 20_000_000),
            "the token was not consumed"
        );

        let at = crate::sys::now_ns() + 5_000_000;
        p.promote_at(at);
        assert!(!p.promotion_due(), "due before its time");
        assert!(p.park_until(far()), "the promotion timer did not wake it");
        assert!(crate::sys::now_ns() >= at, "woken before the timer");
        assert!(p.promotion_due());
        p.cancel_promotion();
        assert!(!p.promotion_due(), "cancelled but still due");

        p.promote_at(crate::sys::now_ns() + 20_000_000);
        p.cancel_promotion();
        assert!(
            !p.park_until(crate::sys::now_ns() + 60_000_000),
            "a cancelled timer woke it"
        );
    }
}
