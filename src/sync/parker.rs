//! A per-thread parker: the follower's own synchronizer ("specific notification").
//!
//! Conceptually each parker holds a token that is initially absent. `unpark` makes the token
//! present; `park` waits until it is present and consumes it. An `unpark` that happens before
//! the matching `park` is therefore never lost.
//!
//! Two kinds:
//! * a **futex** parker (the bound pool's threads, and any protocol built without a handle
//!   set): states of the futex word `EMPTY` (no token, nobody asleep), `PARKED` (owner asleep
//!   or about to sleep), `NOTIFIED` (token present);
//! * a parker **linked to a handle set** (the unbound Leader/Followers threads): the thread
//!   sleeps in `epoll_wait` on a small epoll set of its own that holds an eventfd (the token:
//!   edge-triggered, so each `unpark` is one event, and never read) and the handle set's own
//!   epoll fd, registered `EPOLLONESHOT` without interest (the *link*). [`unpark_on_readiness`]
//!   arms the link: the owner then wakes as soon as the handle set has a ready event (at once if
//!   it has one now, since `EPOLL_CTL_MOD` checks readiness), and not before. A follower promoted
//!   that way is the leader at once, waiting on the handle set through its link, and no thread
//!   is woken until there is an event to lead for (`leader.rs`). The link nests the handle set
//!   in the parker's own set, one level of the kernel's epoll nesting; a lane whose set is
//!   already nested as deep as allowed (lane borrowing) keeps its parkers unlinked, and they
//!   then wake at once, like futex parkers (`engine/group.rs`).
//!
//! [`unpark_on_readiness`]: Parker::unpark_on_readiness

// Loom builds park on the model in `sync/mod.rs`; this one is compiled but unused there.
#![cfg_attr(loom, allow(dead_code))]

use crate::sys::epoll::{self, Epoll};
use crate::sys::fd::EventFd;
use crate::sys::futex;
use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering::*};
use std::sync::OnceLock;

const EMPTY: u32 = 0;
const PARKED: u32 = 1;
const NOTIFIED: u32 = 2;

/// Data word of the token's eventfd in a linked parker's set.
const BELL: u64 = 0;
/// Data word of the handle set's epoll fd (the link) in a linked parker's set.
const LINK: u64 = 1;

/// A linkable parker's epoll set, its token eventfd and, once linked, the handle set.
#[derive(Debug)]
struct Link {
    set: Epoll,
    bell: EventFd,
    handles: OnceLock<RawFd>,
}

/// A single-owner parker; any thread may `unpark` it.
#[derive(Debug)]
pub(crate) struct Parker {
    state: AtomicU32,
    link: Option<Link>,
}

impl Parker {
    /// A futex parker.
    pub(crate) fn new() -> Parker {
        Parker {
            state: AtomicU32::new(EMPTY),
            link: None,
        }
    }

    /// A parker that can be linked to a handle set ([`link`](Self::link), module docs). Until
    /// it is, it parks on its token eventfd alone, and
    /// [`unpark_on_readiness`](Self::unpark_on_readiness) unparks at once.
    pub(crate) fn linkable() -> io::Result<Parker> {
        let set = Epoll::new()?;
        let bell = EventFd::new()?;
        set.add(bell.as_fd().as_raw_fd(), epoll::IN | epoll::ET, BELL)?;
        Ok(Parker {
            state: AtomicU32::new(EMPTY),
            link: Some(Link {
                set,
                bell,
                handles: OnceLock::new(),
            }),
        })
    }

    /// Links a [`linkable`](Self::linkable) parker to the handle set whose epoll fd is
    /// `handles`, which must outlive the parker (the group owns both). The link nests the
    /// handle set in the parker's own, one level more of the kernel's epoll nesting
    /// (`sys::epoll::MAX_NESTED_SETS`): `ELOOP` if that is too deep. Once, before its owner
    /// first parks.
    pub(crate) fn link(&self, handles: RawFd) -> io::Result<()> {
        let Some(l) = &self.link else {
            return Err(io::Error::other("a futex parker cannot be linked"));
        };
        // No interest until armed: ONESHOT alone never reports.
        l.set.add(handles, epoll::ONESHOT, LINK)?;
        l.handles
            .set(handles)
            .map_err(|_| io::Error::other("a parker is linked once"))
    }

    /// Blocks until the token is present, then consumes it. Only the owner thread calls this.
    /// A linked parker may also return for its link (the handle set turned ready) or a
    /// signal: its callers re-check their state after every park.
    pub(crate) fn park(&self) {
        if let Some(l) = &self.link {
            // One event: the token (consumed by returning, edge-triggered) or the link (its
            // ONESHOT disarmed by the report). EINTR: a spurious return.
            let _ = l.set.wait_one(-1);
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
        if let Some(l) = &self.link {
            let now = crate::sys::now_ns();
            let left_ms = deadline_ns.saturating_sub(now).div_ceil(1_000_000);
            return matches!(
                l.set.wait_one(left_ms.min(i32::MAX as u64) as i32),
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
        if let Some(l) = &self.link {
            // Release: the eventfd write is a full barrier in the kernel, and the woken owner
            // re-locks the protocol state, which orders what the waker wrote before it.
            if l.bell.write(1).is_err() {
                // Only at a counter of 2^64 - 2 writes; the link still wakes it for events.
                let _ = l.bell.read();
                let _ = l.bell.write(1);
            }
            return;
        }
        match self.state.swap(NOTIFIED, Release) {
            EMPTY | NOTIFIED => {}
            PARKED => futex::wake(&self.state, 1),
            s => panic!("inconsistent parker state: {s}"),
        }
    }

    /// A linked parker: wake the owner when its handle set has a ready event, at once if it
    /// has one now (arms the link, `EPOLL_CTL_MOD` with `EPOLLIN | EPOLLONESHOT`). A futex
    /// parker: [`unpark`](Self::unpark).
    pub(crate) fn unpark_on_readiness(&self) {
        match self
            .link
            .as_ref()
            .and_then(|l| Some((l, *l.handles.get()?)))
        {
            Some((l, handles)) => {
                if l.set
                    .modify(handles, epoll::IN | epoll::ONESHOT, LINK)
                    .is_err()
                {
                    // Cannot happen for a live set; an eager wake is always correct.
                    self.unpark();
                }
            }
            None => self.unpark(),
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

    /// A linked parker: a token given before the park is kept; promoted (armed) while its
    /// handle set has nothing ready, it is not woken; the set turning ready wakes it, once
    /// (the link is one-shot); armed while the set is ready, it wakes at once.
    #[test]
    fn a_linked_parker_wakes_for_its_token_and_for_readiness_only() {
        let handles = Epoll::new().unwrap();
        let ev = EventFd::new().unwrap();
        handles.add(ev.as_fd().as_raw_fd(), epoll::IN, 7).unwrap();
        let p = Parker::linkable().unwrap();
        // Not linked yet: an arming unparks at once.
        p.unpark_on_readiness();
        assert!(
            p.park_until(crate::sys::now_ns() + 10_000_000_000),
            "unlinked: not woken"
        );
        p.link(handles.as_fd().as_raw_fd()).unwrap();
        let soon = || crate::sys::now_ns() + 50_000_000;

        p.unpark();
        assert!(
            p.park_until(soon() + 10_000_000_000),
            "the early token was lost"
        );
        assert!(!p.park_until(soon()), "the token was not consumed");

        p.unpark_on_readiness();
        assert!(!p.park_until(soon()), "woken with nothing ready");
        ev.write(1).unwrap();
        assert!(
            p.park_until(soon() + 10_000_000_000),
            "not woken by readiness"
        );
        assert!(!p.park_until(soon()), "a one-shot link fired twice");

        // The set is still ready (the eventfd was not read): arming wakes at once.
        p.unpark_on_readiness();
        assert!(
            p.park_until(soon() + 10_000_000_000),
            "armed while ready, not woken"
        );
    }
}
