//! A handle's claim word: the generation of its slot, whether a thread has taken its dispatch,
//! and whether the kernel reported it again meanwhile. The one owner of "one thread dispatches a
//! handle at a time" now that handles are edge-triggered.
//!
//! # Why a word, not `EPOLLONESHOT`
//! A ONESHOT handle is disarmed by the wait that reports it and re-armed by an `epoll_ctl(MOD)`
//! after its handler: a system call per event. Handles are instead registered once,
//! edge-triggered (`EPOLLET`), and stay armed: the kernel reports a handle again whenever new
//! readiness arrives (a datagram, a timer expiry, an eventfd write), also while a thread still
//! runs its handler, and to any thread waiting on the set. Which thread dispatches is decided
//! here, in user space, by a compare-and-swap on this word (the model of HAProxy's fd state and
//! tokio's readiness: ownership in memory, the kernel only says that something changed).
//!
//! ```text
//!   63             32 31                         2    1          0
//!  ┌─────────────────┬──────────────────────────────┬──────────┬───────┐
//!  │   generation    │              0               │ NOTIFIED │ OWNED │
//!  └─────────────────┴──────────────────────────────┴──────────┴───────┘
//!
//!            claim (a wait reported it)                 claim (reported again)
//!    IDLE ───────────────────────────────► OWNED ───────────────────────────► OWNED|NOTIFIED
//!     ▲  ▲                                  │ ▲                                     │
//!     │  └──── finish: nothing new ─────────┘ └── finish: run again (NOTIFIED) ─────┘
//!     │                                                                             │
//!     └───────── finish: no run left (Released { notified: true }: re-check) ───────┘
//!
//!   begin (a run starts): OWNED|NOTIFIED ──► OWNED (the run covers what was reported so far)
//!   vacate (the handle is removed, under its slot lock): any state ──► generation + 1, IDLE
//! ```
//!
//! Invariants (the loom models in `claim/loom_tests.rs` check them against a model of an
//! edge-triggered kernel):
//! * **one thread dispatches a handle at a time**: only a claim that finds the word `IDLE` sets
//!   `OWNED`, and only the owner clears it (`finish`), or the slot's vacate, which runs under the
//!   slot lock the owner holds while it runs the handler;
//! * **no lost report**: a report that finds the handle owned sets `NOTIFIED` in the same
//!   compare-and-swap that sees `OWNED`; the owner's `finish` clears `OWNED` only in a
//!   compare-and-swap that sees `NOTIFIED` clear, so it either sees the report (and runs the
//!   handler again, or tells its caller to ask the kernel to check the handle's readiness once
//!   more, `Released { notified: true }`), or the report came after the finish and found the
//!   word `IDLE`, and claims it. Every report is followed by a run of the handler that starts
//!   after it;
//! * **stale reports never claim**: a report carries the generation of the token it was
//!   registered with; a claim of another generation fails, so an event of a removed handle
//!   never reaches the handler that reused its slot, and a claim taken before a vacate is void
//!   after it (its owner finds the generation changed when it locks the slot);
//! * **exactly once, per report**: a report is claimed (one dispatch) or folded into the
//!   owner's next run (`NOTIFIED`, one flag however many reports arrive): each report causes
//!   at most one run more, and at least one run starts after it.
//!
//! Memory order: the owner's `finish` releases and the next `claim` acquires, so what a run of
//! the handler wrote is visible to the next run, on whichever thread.

use crate::sync::atomic::{AtomicU64, Ordering::*};

/// A thread has taken the handle's dispatch.
const OWNED: u64 = 1;
/// The kernel reported the handle again while it was owned.
const NOTIFIED: u64 = 2;

/// What a report of a handle became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// The caller owns the handle's dispatch: it must dispatch it (or give it up).
    Owned,
    /// Another thread owns it: the report is folded into that thread's next run.
    Busy,
    /// The report is of an earlier generation of the slot (the handle was removed).
    Stale,
}

/// How the owner's [`finish`](Claim::finish) left the handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finished {
    /// Reported again while it ran: still owned, run the handler once more.
    Again,
    /// No longer owned. `notified`: a report came while it ran and no run is left to fold it
    /// into, so the caller asks the kernel to check the handle's readiness again.
    Released { notified: bool },
}

/// One slot's claim word.
#[derive(Debug)]
pub(crate) struct Claim {
    word: AtomicU64,
}

impl Claim {
    /// Generation 0, nobody owns it.
    pub(crate) fn new() -> Claim {
        Claim {
            word: AtomicU64::new(0),
        }
    }

    /// The slot's generation now.
    pub(crate) fn generation(&self) -> u32 {
        (self.word.load(Acquire) >> 32) as u32
    }

    /// A wait reported the handle of `generation`: take its dispatch if nobody has it, else mark
    /// it reported for its owner.
    pub(crate) fn claim(&self, generation: u32) -> Claimed {
        let mut w = self.word.load(Relaxed);
        loop {
            if (w >> 32) as u32 != generation {
                return Claimed::Stale;
            }
            let (next, got) = match w & (OWNED | NOTIFIED) {
                0 => (w | OWNED, Claimed::Owned),
                OWNED => (w | NOTIFIED, Claimed::Busy),
                // Owned and reported already: one more run covers this report too.
                _ => return Claimed::Busy,
            };
            match self.word.compare_exchange_weak(w, next, AcqRel, Relaxed) {
                Ok(_) => return got,
                Err(now) => w = now,
            }
        }
    }

    /// The owner starts a run of the handler (under the slot lock, so the generation cannot
    /// change): a report folded into it so far is covered by this run, which reads the source
    /// after every such report arrived, so it asks for no run after it.
    pub(crate) fn begin(&self) {
        self.word.fetch_and(!NOTIFIED, AcqRel);
    }

    /// The owner ran the handler of `generation`. If the handle was reported meanwhile and
    /// `may_run_again`, it stays owned and the owner runs it again ([`Finished::Again`]);
    /// otherwise it is let go. A vacate since the claim (another generation) leaves nothing to
    /// let go.
    pub(crate) fn finish(&self, generation: u32, may_run_again: bool) -> Finished {
        let mut w = self.word.load(Relaxed);
        loop {
            if (w >> 32) as u32 != generation {
                return Finished::Released { notified: false };
            }
            debug_assert!(
                w & OWNED != 0,
                "finish() by a thread that does not own the handle"
            );
            let notified = w & NOTIFIED != 0;
            let (next, out) = if notified && may_run_again {
                (w & !NOTIFIED, Finished::Again)
            } else {
                (w & !(OWNED | NOTIFIED), Finished::Released { notified })
            };
            match self.word.compare_exchange_weak(w, next, AcqRel, Relaxed) {
                Ok(_) => return out,
                Err(now) => w = now,
            }
        }
    }

    /// The handle is removed (under its slot lock): a new generation that nobody owns. Returns
    /// the new generation.
    pub(crate) fn vacate(&self) -> u32 {
        let old = self.word.load(Relaxed);
        let next = ((old >> 32) + 1) << 32;
        // Only the slot lock's holder vacates, but claims race with it: a swap, so that a claim
        // of the old generation either happened before (and is void now) or fails.
        self.word.swap(next & !(OWNED | NOTIFIED), AcqRel);
        (next >> 32) as u32
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_report_claims_an_idle_handle_and_marks_an_owned_one() {
        let c = Claim::new();
        assert_eq!(c.claim(0), Claimed::Owned);
        assert_eq!(c.claim(0), Claimed::Busy);
        assert_eq!(
            c.claim(0),
            Claimed::Busy,
            "a second report folds into the same run"
        );
        assert_eq!(c.finish(0, true), Finished::Again);
        assert_eq!(c.claim(0), Claimed::Busy);
        assert_eq!(
            c.finish(0, false),
            Finished::Released { notified: true },
            "no run left: the caller re-checks"
        );
        assert_eq!(c.claim(0), Claimed::Owned);
        assert_eq!(c.finish(0, true), Finished::Released { notified: false });
        // A report while the handle waited to run is covered by the run that starts after it.
        assert_eq!(c.claim(0), Claimed::Owned);
        assert_eq!(c.claim(0), Claimed::Busy);
        c.begin();
        assert_eq!(c.finish(0, true), Finished::Released { notified: false });
    }

    #[test]
    fn a_vacate_voids_claims_of_the_old_generation() {
        let c = Claim::new();
        assert_eq!(c.claim(0), Claimed::Owned);
        assert_eq!(c.vacate(), 1);
        assert_eq!(c.generation(), 1);
        assert_eq!(c.claim(0), Claimed::Stale, "a stale report never claims");
        assert_eq!(
            c.finish(0, true),
            Finished::Released { notified: false },
            "the old owner has nothing to let go"
        );
        assert_eq!(c.claim(1), Claimed::Owned, "the new generation starts idle");
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
