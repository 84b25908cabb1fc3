//! Lane borrowing (issue 15 §2; TAO's `allow_borrowing`, which TAO itself leaves
//! unimplemented): when every thread of a lane is busy and an event arrives on that lane's
//! handles, an idle thread of a lower lane it names in `borrow_from` is lent to it for that one
//! event.
//!
//! # How a lent thread learns of the event
//! An epoll fd is itself pollable: it is readable while its ready list is not empty. So the
//! borrower's epoll fd is a member of each lender's epoll set, under a reserved data word
//! (`Word::Link`, `word.rs`), registered `EPOLLONESHOT` and *disarmed* (no interest) at first:
//!
//! ```text
//!   borrower lane B (1 thread)                         lender lane L (idle leader in epoll_wait)
//!   leader: event ─► promote(): no follower (Vacant)
//!       └─► arm(): flag armed[L] false→true ─► epoll_ctl(L, MOD, B's fd, IN|ONESHOT)
//!   PROCESSING (busy) …  a new event is queued on B's ready list: B's fd turns readable
//!                                                      ─► L's leader wakes with B's link word
//!                                                         (ONESHOT: the link is disarmed again)
//!                                                      promote L's follower (the L/F rule)
//!                                                      fired(): armed[L] = false
//!                                                      B has a leader again? → done (it takes it)
//!                                                      try_take(): borrowed < max_borrowed? else
//!                                                        refused (counted), done
//!                                                      raise to B's policy and priority
//!                                                      epoll_wait(B's fd, 1 event, timeout 0)
//!                                                      dispatch it with B's handle set
//!                                                      restore own priority; give_back()
//!                                                      B still without a leader? → arm() again
//!                                                      rejoin L (follower or leader)
//! ```
//!
//! The link is armed only while the borrower has no leader: a borrower thread arms it when its
//! promotion finds no follower (the lane's last idle thread just took an event), and a lent
//! thread re-arms it after its dispatch if the lane still has no leader. Nobody disarms it when
//! the borrower gets a leader back: the next event then wakes the lender's leader too, which
//! finds the borrower's leader present and leaves the event to it (one wasted wake-up of a
//! lower-priority thread per vacancy, instead of an `epoll_ctl` on the borrower's path at every
//! rejoin). `max_borrowed` bounds how many threads the lane borrows at once, over all lenders.
//!
//! # Invariants
//! * **a handle is dispatched on at most one thread at a time**, lent or not: the
//!   `epoll_wait` that reports a handle, whether the borrower's own leader or a lent thread
//!   calls it on the borrower's epoll fd, claims it (`claim.rs`), and the claim is let go only
//!   at the end of its dispatch, under its slot lock, after its handler returned; a report that
//!   finds it claimed is folded into the owner's next run and never runs the handler beside
//!   it; the slot generation drops an event of a removed handle (`handle_set.rs`). The links
//!   themselves stay `EPOLLONESHOT` (below). Nothing here depends on *which* thread called
//!   `epoll_wait`: lending adds callers of the same wait on the same epoll instance, which is
//!   exactly the argument of the concurrent promotion mode (`dispatch.rs`);
//! * **every event is dispatched exactly once**: `epoll_wait` removes what it returns under the
//!   epoll instance's lock, so an event goes to the borrower's leader or to one lent thread; a
//!   lent thread whose `epoll_wait(…, 0)` finds nothing (the leader or another lent thread was
//!   first) dispatches nothing;
//! * **the borrowed count never exceeds `max_borrowed`**: [`Gate::try_take`] increments it only
//!   below the limit (one compare-and-swap loop), [`Gate::give_back`] after the dispatch;
//! * **no lost borrow** (the loom models in `borrow/loom_tests.rs` check it): while the borrower
//!   has no leader, its events have a lender coming: the link is armed in the kernel, or a lender
//!   holds its report and will look, or a borrowed thread is dispatching and will re-arm it. The
//!   arming flag only saves `epoll_ctl` calls: `arm` calls the kernel when it turns the flag on,
//!   and a lender turns it off *before* it looks at the borrower's leader, so a vacancy that began
//!   after that look arms again; a lender refused by the count leaves the link disarmed, but the
//!   count was at the limit, so a borrowed thread is still to give back and re-arm;
//! * **priorities**: a lent thread runs a borrower's handler at the borrower's policy and
//!   priority and nothing of its own lane at it: it raises itself after its own lane's
//!   promotion and restores itself before it rejoins (a failed restore is counted in its own
//!   lane's `restore_failures`). A time-shared lender (real time refused in best-effort mode)
//!   has no priority to change and lends as it is. Validation refuses a lender that would get
//!   its own priority but not its borrower's; a raise refused all the same (the privilege was
//!   taken away after validation) is counted in the lender's `raise_failures`, logged once per
//!   lane, and the handler runs at the lender's priority.
//!
//! # What a lent thread brings with it
//! Its own thread: its buffers, stack, CPUs and overrun budget. Validation therefore asks every
//! lender for at least the borrower's `buffer_bytes` and `stack_bytes`; an overrun of a lent
//! dispatch is judged by the lender's `budget_us` and counted in the lender's metrics.
//!
//! # A kernel lock that is not priority-inheriting
//! Arming a link is an `epoll_ctl` on the *lender's* epoll instance, and a lender's wake-up polls
//! the borrower's epoll fd: both take the other lane's epoll mutex inside the kernel, which has
//! no priority inheritance on a kernel without PREEMPT_RT. So a borrowing lane can wait, for the
//! length of an `epoll_wait` bookkeeping step, on a lower lane's thread. Lanes without
//! `borrow_from` never touch another lane's epoll instance.
//!
//! # What it may not do
//! Only a real-time lane (fifo or rr) may borrow, from real-time lanes of lower priority, and
//! neither side may be a bound lane (its threads serve a bound pool, not the lane loop); the
//! borrower may not use `promotion = "concurrent"` (it has no leader whose absence means "all
//! busy"). Deadline lanes neither borrow nor lend: a `SCHED_DEADLINE` reservation is admitted by
//! the kernel per thread (`sched_setattr` can fail with `EBUSY`), so it cannot be taken on and
//! handed back per event, and a deadline lane's bandwidth is what bounds its service anyway.

use crate::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};

/// The atomic protocol of one borrowing lane: an arming flag per lender link and the count of
/// threads borrowed now. No system call: the caller passes the kernel's re-arm as a closure, so
/// the model runs it as it is.
#[derive(Debug)]
pub(crate) struct Gate {
    /// Per link: armed in the kernel, or fired and not yet seen by its lender.
    armed: Box<[AtomicBool]>,
    borrowed: AtomicU32,
    max: u32,
}

impl Gate {
    /// A gate for `links` lenders and at most `max` threads borrowed at once.
    pub(crate) fn new(links: usize, max: u32) -> Gate {
        Gate {
            armed: (0..links).map(|_| AtomicBool::new(false)).collect(),
            borrowed: AtomicU32::new(0),
            max,
        }
    }

    /// The lane has no leader: arms every link that is not armed; `rearm(j)` re-arms link `j`
    /// in the kernel (`EPOLL_CTL_MOD` with `EPOLLONESHOT`).
    pub(crate) fn arm(&self, mut rearm: impl FnMut(usize)) {
        for (j, a) in self.armed.iter().enumerate() {
            if !a.swap(true, SeqCst) {
                rearm(j);
            }
        }
    }

    /// Link `j` fired (the kernel disarmed it). Called by its lender before it looks at the
    /// borrower's leader.
    pub(crate) fn fired(&self, j: usize) {
        // A swap, not a store: loom 0.7 lets a later read-modify-write of the same thread read
        // past a plain store (a two-thread model of `store(false); swap(true)` against
        // `swap(true)` fails in it), so the model checks the protocol only with an RMW here.
        // Once per link report (and after a failed re-arm), before any lent dispatch.
        self.armed[j].swap(false, SeqCst);
    }

    /// Counts one more borrowed thread, unless `max` are borrowed already.
    pub(crate) fn try_take(&self) -> bool {
        self.borrowed
            .fetch_update(SeqCst, SeqCst, |n| (n < self.max).then_some(n + 1))
            .is_ok()
    }

    /// A borrowed thread is done (before it decides whether to re-arm).
    pub(crate) fn give_back(&self) {
        self.borrowed.fetch_sub(1, SeqCst);
    }

    /// Threads borrowed now.
    #[cfg(test)]
    pub(crate) fn borrowed(&self) -> u32 {
        self.borrowed.load(SeqCst)
    }
}

pub(crate) use lanes::{Borrow, BorrowSpec};

/// The lanes' side: the links in the kernel (the lent thread's turn is in `lend.rs`, the
/// wiring at start in `LanePool::wire_borrowing`).
mod lanes {
    use super::Gate;
    use crate::engine::handler::Handles;
    use crate::engine::word::Word;
    use crate::sys::{epoll, sched::Sched};
    use std::os::fd::RawFd;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, OnceLock};

    /// Per lender: its lane index and its handle set.
    type Links = Box<[(u16, Arc<Handles>)]>;

    /// What a lane that borrows asks for: the engine's own parameters, from `borrow_from` and
    /// `max_borrowed`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct BorrowSpec {
        /// The lenders, by lane name, in `borrow_from` order.
        pub(crate) from: Vec<String>,
        /// What a lent thread raises itself to: the lane's policy at the lane's priority.
        pub(crate) sched: Sched,
        /// At most this many threads lent to the lane at once.
        pub(crate) max: u32,
    }

    /// A borrowing lane's state (in its `LanePool`).
    #[derive(Debug)]
    pub(crate) struct Borrow {
        pub(crate) gate: Gate,
        /// What a lent thread raises itself to: the lane's policy at the lane's priority.
        pub(crate) sched: Sched,
        /// The lenders, by lane name, in `borrow_from` order.
        pub(crate) from: Box<[String]>,
        /// The lenders' handle sets, in `borrow_from` order (set once at start).
        links: OnceLock<Links>,
        /// Set by `LanePool::stop`: no lender takes this lane's events any more.
        pub(crate) stopped: AtomicBool,
    }

    impl Borrow {
        /// The borrowing state of a lane that borrows as `spec` says.
        pub(crate) fn new(spec: &BorrowSpec) -> Borrow {
            Borrow {
                gate: Gate::new(spec.from.len(), spec.max),
                sched: spec.sched,
                from: spec.from.clone().into_boxed_slice(),
                links: OnceLock::new(),
                stopped: AtomicBool::new(false),
            }
        }

        /// Sets the lenders' handle sets once, at start (`LanePool::wire_borrowing`).
        pub(crate) fn set_links(&self, links: Vec<(u16, Arc<Handles>)>) {
            let _ = self.links.set(links.into_boxed_slice());
        }

        /// The lane (epoll fd `own`, index `me`) has no leader: arms every link not armed.
        pub(crate) fn arm(&self, own: RawFd, me: u16) {
            let Some(links) = self.links.get() else {
                return;
            };
            self.gate.arm(|j| {
                // A failure (ENOMEM) leaves the link disarmed in the kernel: the lane serves
                // itself this time, and the flag is cleared so that the next vacancy tries again.
                if links[j]
                    .1
                    .rewatch(own, epoll::IN | epoll::ONESHOT, Word::Link { borrower: me })
                    .is_err()
                {
                    self.gate.fired(j);
                }
            });
        }

        /// The index of lender `lender`'s link.
        pub(crate) fn link_of(&self, lender: u16) -> Option<usize> {
            self.links.get()?.iter().position(|(l, _)| *l == lender)
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The kernel is called only when a flag turns on; a fired link is armed again; the count
    /// stops at `max`.
    #[test]
    fn gate_arms_once_per_firing_and_counts_up_to_max() {
        let g = Gate::new(2, 2);
        let mut calls = Vec::new();
        g.arm(|j| calls.push(j));
        g.arm(|j| calls.push(j));
        assert_eq!(calls, [0, 1]);
        g.fired(1);
        g.arm(|j| calls.push(j));
        assert_eq!(calls, [0, 1, 1]);
        assert!(g.try_take() && g.try_take());
        assert!(!g.try_take(), "a third borrowed thread with max 2");
        g.give_back();
        assert_eq!(g.borrowed(), 1);
        assert!(g.try_take());
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
