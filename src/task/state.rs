//! The state word of one task slot: which thread may touch the future, and who frees the slot.
//!
//! ```text
//!                 spawn                      start (pop)              poll: Pending
//!   FREE ──────────────────▶ SCHEDULED ─────────────────▶ RUNNING ────────────────▶ IDLE
//!    ▲                           ▲  ▲                      │   │ wake                  │
//!    │                           │  └── poll: Pending ─────┼── NOTIFIED                │
//!    │                           │      (re-queued)        │   (while running)         │
//!    │                           └─────────── wake ────────┼───────────────────────────┘
//!    │ free (generation + 1)                               │ poll: Ready / panicked /
//!    └──────────────── COMPLETE ◀──────────────────────────┘ cancelled
//! ```
//!
//! One `u32`: the slot's 16-bit **generation** in the high half, flags in the low half. A
//! waker names `(slot, generation)`; every transition that a waker or a handle can cause
//! first compares the generation, so a waker left over from an earlier task of the same
//! slot never schedules the slot's new task (until the generation wraps: see below).
//!
//! Invariants (each transition is one compare-and-swap on this word, so they hold at every
//! instant; the loom models in `state/loom_tests.rs` check them):
//! * **polled by at most one thread**: only [`start`](TaskState::start) sets `RUNNING`, and it
//!   requires `SCHEDULED` and clears it; `SCHEDULED` is set again only when `RUNNING` is clear
//!   ([`wake`](TaskState::wake)) or by the poller itself as it clears `RUNNING`
//!   ([`pending`](TaskState::pending));
//! * **never polled once dropped, never dropped while polled**: shutdown cancels from any
//!   thread with [`take_unpolled`](TaskState::take_unpolled), which requires `RUNNING` clear
//!   and sets it, as `start` does, and clears `SCHEDULED`; `start` requires `SCHEDULED` set
//!   and `RUNNING` clear; each is one CAS on this word, so exactly one of them takes a
//!   scheduled task (the other finds `Start::Gone` or `false`);
//! * **a handle sees the end only after the future is gone**: `COMPLETE` is set by
//!   [`complete`](TaskState::complete) alone, which the thread holding `RUNNING` calls after
//!   the poll returned `Ready` or after it dropped the future (a cancel, by the poller or by
//!   shutdown);
//! * **in the ready set at most once**: the thread whose transition sets `SCHEDULED` pushes the
//!   slot, and only [`start`](TaskState::start) clears it, after the slot was popped; so the
//!   ready queue never holds more than `max_tasks` entries;
//! * **exactly-once wake-up**: a wake of a live, unfinished task either schedules it (it was
//!   idle), or finds it already scheduled (the coming poll sees the waker's writes: the
//!   waker's CAS releases, `start`'s CAS acquires), or marks it `NOTIFIED` while it runs, and
//!   the poller then re-schedules it as it returns `Pending`. No wake is lost and a wake
//!   causes at most one extra poll;
//! * **freed exactly once**: a finished task's slot is freed by whichever of the completing
//!   poller and the [`JoinHandle`](super::JoinHandle) acts second: completion sets `COMPLETE`
//!   and reads `HANDLE` in one CAS, dropping the handle clears `HANDLE` and reads `COMPLETE`
//!   in one RMW.
//!
//! Not guaranteed: a waker that outlives 65 536 reuses of its slot aliases the slot's current
//! task again; it then causes one spurious poll, which the `Future` contract allows.

use crate::sync::atomic::{AtomicU32, Ordering::*};

/// In the ready queue or the polling thread's heap; a poll is owed.
pub(crate) const SCHEDULED: u32 = 1 << 0;
/// A thread is polling (or cancelling) the future.
pub(crate) const RUNNING: u32 = 1 << 1;
/// Woken while `RUNNING`: the poller re-schedules the task when the poll returns `Pending`.
pub(crate) const NOTIFIED: u32 = 1 << 2;
/// The future is gone; the outcome bits below are final.
pub(crate) const COMPLETE: u32 = 1 << 3;
/// A [`JoinHandle`](super::JoinHandle) still refers to the task.
pub(crate) const HANDLE: u32 = 1 << 4;
/// [`JoinHandle::cancel`](super::JoinHandle::cancel) was called.
pub(crate) const CANCEL: u32 = 1 << 5;
/// The slot holds a task (set at spawn, cleared when the slot is freed).
pub(crate) const LIVE: u32 = 1 << 6;
/// Outcome: the output is stored in the slot, not yet taken.
pub(crate) const OUTPUT: u32 = 1 << 7;
/// Outcome: the future panicked.
pub(crate) const PANICKED: u32 = 1 << 8;

const GEN_SHIFT: u32 = 16;
const FLAGS: u32 = (1 << GEN_SHIFT) - 1;

/// The generation of a state word.
pub(crate) fn generation(s: u32) -> u16 {
    (s >> GEN_SHIFT) as u16
}

/// How the poller found the task when it took it from the ready set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Start {
    /// Poll it.
    Poll(u16),
    /// Cancellation was requested: drop the future instead.
    Cancel(u16),
    /// Nothing to run: shutdown took the task while its entry waited in the ready set
    /// ([`take_unpolled`](TaskState::take_unpolled) from another thread, which cleared
    /// `SCHEDULED`), so the entry was stale.
    Gone,
}

/// A task slot's state word (module docs).
#[derive(Debug)]
pub(crate) struct TaskState(AtomicU32);

impl TaskState {
    /// A free slot of generation 0.
    pub(crate) fn new() -> TaskState {
        TaskState(AtomicU32::new(0))
    }

    pub(crate) fn load(&self) -> u32 {
        self.0.load(Acquire)
    }

    /// CAS loop: applies `f` until it succeeds or `f` declines; returns the word `f` saw last
    /// and whether it was changed.
    fn update(&self, f: impl Fn(u32) -> Option<u32>) -> (u32, bool) {
        let mut s = self.0.load(Acquire);
        loop {
            let Some(n) = f(s) else { return (s, false) };
            match self.0.compare_exchange(s, n, AcqRel, Acquire) {
                Ok(_) => return (s, true),
                Err(now) => s = now,
            }
        }
    }

    /// A free slot becomes a scheduled task (the spawner owns the free slot exclusively; the
    /// release store publishes the future written before it). Returns the task's generation.
    pub(crate) fn spawn(&self, with_handle: bool) -> u16 {
        let s = self.0.load(Relaxed);
        assert_eq!(s & FLAGS, 0, "inconsistent task state at spawn: {s:#x}");
        let handle = if with_handle { HANDLE } else { 0 };
        self.0.store(s | LIVE | SCHEDULED | handle, Release);
        generation(s)
    }

    /// A wake of generation `gen`: true if the caller must push the slot into the ready set.
    pub(crate) fn wake(&self, gen: u16) -> bool {
        let (s, changed) = self.update(|s| {
            if generation(s) != gen || s & LIVE == 0 || s & COMPLETE != 0 {
                None // stale or finished: no poll will come
            } else if s & (SCHEDULED | NOTIFIED) != 0 {
                // A poll is owed already. Still an RMW (writing the same word), not a plain
                // load: it releases the waker's earlier writes into the word's modification
                // order, so the owed poll, whose `start` RMW comes later in that order,
                // acquires them. A plain load here loses the wake's data (the loom model
                // `every_wake_is_followed_by_a_poll_and_polls_never_overlap` finds it).
                Some(s)
            } else if s & RUNNING != 0 {
                Some(s | NOTIFIED)
            } else {
                Some(s | SCHEDULED)
            }
        });
        // `s` is the word our CAS replaced: we set SCHEDULED iff it was neither running nor
        // scheduled.
        changed && s & (RUNNING | SCHEDULED | NOTIFIED) == 0
    }

    /// The poller took the slot from the ready set: `SCHEDULED` → `RUNNING`, unless shutdown
    /// took the task meanwhile ([`Start::Gone`]): one CAS decides between this and
    /// [`take_unpolled`](Self::take_unpolled), so a future is never polled after it was
    /// dropped nor dropped while it is polled.
    pub(crate) fn start(&self) -> Start {
        let (s, changed) = self.update(|s| {
            (s & SCHEDULED != 0 && s & (RUNNING | COMPLETE) == 0)
                .then_some((s & !SCHEDULED) | RUNNING)
        });
        if !changed {
            // A stale entry: shutdown took the task (it holds `RUNNING` while it drops the
            // future) or completed it already.
            assert!(
                s & SCHEDULED == 0,
                "inconsistent task state at start: {s:#x}"
            );
            return Start::Gone;
        }
        assert!(s & LIVE != 0, "inconsistent task state at start: {s:#x}");
        if s & CANCEL != 0 {
            Start::Cancel(generation(s))
        } else {
            Start::Poll(generation(s))
        }
    }

    /// The poll returned `Pending`: true if the task was woken meanwhile and the caller must
    /// push it into the ready set again.
    pub(crate) fn pending(&self) -> bool {
        let (s, _) = self.update(|s| {
            if s & NOTIFIED != 0 {
                Some((s & !(RUNNING | NOTIFIED)) | SCHEDULED)
            } else {
                Some(s & !RUNNING)
            }
        });
        debug_assert!(s & RUNNING != 0, "pending without running: {s:#x}");
        s & NOTIFIED != 0
    }

    /// The future is gone with `outcome` (`OUTPUT`, `PANICKED` or 0 for cancelled). Returns
    /// true if no handle refers to the task: the caller drops the output and frees the slot.
    pub(crate) fn complete(&self, outcome: u32) -> bool {
        let (s, _) =
            self.update(|s| Some((s & !(RUNNING | NOTIFIED | SCHEDULED)) | COMPLETE | outcome));
        debug_assert!(s & COMPLETE == 0, "completed twice: {s:#x}");
        s & HANDLE == 0
    }

    /// Takes a task that no thread is polling, to drop its future (shutdown, from any thread,
    /// also while the lane runs; or a spawn that lost the race with it): `RUNNING` set and
    /// `SCHEDULED` cleared, as [`start`](Self::start) would, so the caller then drops the
    /// future and calls [`complete`](Self::complete)`(0)`. False if the task is already
    /// complete, running or not of generation `gen`. A ready-set entry it leaves behind is
    /// [`Start::Gone`].
    pub(crate) fn take_unpolled(&self, gen: u16) -> bool {
        let (_, changed) = self.update(|s| {
            if generation(s) != gen || s & LIVE == 0 || s & (COMPLETE | RUNNING) != 0 {
                None
            } else {
                Some((s & !(SCHEDULED | NOTIFIED)) | RUNNING)
            }
        });
        changed
    }

    /// Requests cancellation of generation `gen`; true if the task is live and unfinished
    /// (the caller then wakes it so the poller sees the request).
    pub(crate) fn cancel(&self, gen: u16) -> bool {
        let (_, changed) = self.update(|s| {
            if generation(s) != gen || s & LIVE == 0 || s & (COMPLETE | CANCEL) != 0 {
                None
            } else {
                Some(s | CANCEL)
            }
        });
        changed
    }

    /// The handle lets go: true if the task is complete, so the caller frees the slot.
    pub(crate) fn release_handle(&self) -> bool {
        let s = self.0.fetch_and(!HANDLE, AcqRel);
        debug_assert!(s & HANDLE != 0, "handle released twice: {s:#x}");
        s & COMPLETE != 0
    }

    /// The output was taken by the handle.
    pub(crate) fn output_taken(&self) {
        self.0.fetch_and(!OUTPUT, AcqRel);
    }

    /// Frees a complete slot: the next task gets the next generation.
    pub(crate) fn free(&self) {
        let s = self.0.load(Acquire);
        assert!(
            s & COMPLETE != 0 && s & (RUNNING | SCHEDULED | HANDLE) == 0,
            "inconsistent task state at free: {s:#x}"
        );
        let gen = generation(s).wrapping_add(1);
        self.0.store(u32::from(gen) << GEN_SHIFT, Release);
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
