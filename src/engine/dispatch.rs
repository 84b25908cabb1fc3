//! A pool thread's dispatch loops: the Leader/Followers loop (join → lead → promote →
//! process → rejoin), the concurrent loop, and the processing of one event. The lender's turn
//! is in `lend.rs`, a thread's set-up in `thread.rs`.
//!
//! # The Leader/Followers loop
//!
//! ```text
//!   join ─► lead: an event of the batch? ──yes── (kept: still the leader; or handed on) ──┐
//!              │ no                                                                        │
//!              ▼                                                                           ▼
//!           epoll_wait ─► drained the set? ─yes─► keep(rest)       (deferred) ─► process ─► join
//!                                  └──────────no──► promote_with(rest) (eager)  ──┘
//! ```
//!
//! A leader takes as many events per wait as there are idle threads to take them (all that is
//! ready, up to `MAX_BATCH`, when it may defer); what it does not process at once is the batch
//! (`leader.rs`). With deferred promotion (the default) it keeps its role through its events
//! and arms the promotion timer of the follower it would have woken: an event costs no wake-up
//! of a second thread unless it takes longer than `promote_after_us`. It defers only when its
//! wait drained the handle set (took fewer events than it asked for); a lane with more than one
//! thread's work promotes at once. Before its wait blocks, it cancels that timer (after a look that does not block),
//! so an idle lane wakes nobody. `promote_after_us = 0` always promotes at once.
//!
//! # Concurrent mode (`promotion = "concurrent"`)
//!
//! The POSA2 variant *Relaxing Serialization Constraints*: an epoll set whose handles are all
//! `EPOLLONESHOT` is a concurrent handle set, so the group needs no leader. Every idle thread
//! waits in `epoll_wait` (one event per call) on the same epoll instance:
//!
//! ```text
//!   ┌─► WAITING (in epoll_wait, any number of threads at once) ── one event ──► PROCESSING ─┐
//!   │                              │ shutdown event: pass it on, return                        │
//!   └──────────────────────────────┴───────────────────────────────────────────────────────────┘
//! ```
//!
//! Invariants, and what carries each:
//! * **a handle is dispatched on at most one thread at a time**: the wait that reports an event
//!   disarms its handle (ONESHOT), and it is re-armed only inside its dispatch, under its slot
//!   lock, after the handler returned; a thread that gets the next event of that handle before
//!   the dispatch released the lock blocks on that (PI) lock, it never runs the handler beside
//!   it (`handle_set.rs`);
//! * **every event is dispatched exactly once**: the kernel's ready list holds each armed
//!   handle once and `epoll_wait` removes what it returns under the epoll instance's own lock,
//!   so an event goes to exactly one waiter; a stale token is dropped by the slot generation as
//!   in the leader mode;
//! * **no lost wake-up**: epoll queues its waiters exclusively and wakes one per ready event;
//!   an event that becomes ready while no thread waits stays on the ready list, and the next
//!   thread to call `epoll_wait` takes it without sleeping;
//! * **shutdown from every state**: the shutdown eventfd is level-triggered and never read, so
//!   every later `epoll_wait` reports it; a processing thread sees it at its next wait, and a
//!   thread that sees it writes it once more before it returns, which wakes one more exclusive
//!   waiter, so the threads asleep in `epoll_wait` are woken one after the other.
//!
//! What it gives up: the [`Protocol`](crate::engine::leader::Protocol) is not used (no leader,
//! no follower queue, no promotion counters): "at most one leader" becomes "up to `threads` waiters", and the follower queue's
//! order (priority, LIFO, FIFO) becomes the kernel's choice of waiter, so per-thread priorities
//! no longer decide which thread takes the next event. It is a per-group mode, not the
//! mechanism under the heap, because that order is the point of the other three.
//!
//! # Lane borrowing (`borrow_from`)
//! A lane that borrows arms its links in its lenders' epoll sets when a promotion finds no
//! follower; a lender's leader woken by such a link promotes its own follower, raises itself
//! to the borrower's priority, takes one event from the borrower's epoll fd, dispatches it with
//! the borrower's handle set, restores its own priority and rejoins its own lane. The protocol
//! and the proof that a handle is still dispatched on at most one thread at a time are in
//! `borrow.rs`.
//!
//! # Real-time safety of the loop
//! No allocation, no formatting, no logging, no user-space lock other than PI locks (the
//! group's, and a borrower's while lent); it blocks only in `epoll_wait` (as leader, on the
//! handle set; as follower, on its parker's own set: its token and promotion timer) or the
//! handler. Lane borrowing adds the kernel's epoll locks of the lanes it
//! links, which are not priority-inheriting (`borrow.rs`). A test counts the
//! allocations of 100,000 dispatches for every event source and promotion order.

use crate::engine::group::Group;
use crate::engine::handle_set::Wait;
use crate::engine::handler::{self, Context, Dispatched, Event, Handles};
use crate::engine::leader::{Joined, Kept, Lead, Promoted, MAX_BATCH};
use crate::engine::slot::ThreadSlot;
use crate::observe::alloc_count;
use crate::observe::metrics::Counters;
use crate::observe::telemetry::Sample;
use crate::sys::{self, mem, sched::Sched};
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::*;

/// Dispatches a thread makes before its allocation and page-fault baselines are taken.
/// Covers one-time lazy initialisation (first use of a handler, thread-locals).
pub const WARMUP_DISPATCHES: u64 = 64;

/// One pool thread's loop state.
pub(crate) struct PoolThread<'a> {
    pub(super) group: &'a Group,
    pub(super) idx: u16,
    pub(super) slot: &'a ThreadSlot,
    pub(super) ctx: &'a mut Context,
    pub(super) ring: &'a mut rtrb::Producer<Sample>,
    pub(super) dispatches: u64,
    /// Runs time-shared (no RT priority to raise when lent, `borrow.rs`).
    pub(super) time_shared: bool,
}

impl PoolThread<'_> {
    /// The Leader/Followers loop (activities 3–5). See the module docs for its real-time
    /// contract.
    pub(super) fn run(&mut self, time_shared: bool) {
        let group = self.group;
        let c = &group.counters;
        let after = group.spec.promote_after_ns;
        let mut batch = [(0u32, 0u64); MAX_BATCH];
        // The follower whose promotion timer this thread armed last (deferred promotion), so
        // that the timer is cancelled before this thread's wait blocks, or re-armed.
        let mut armed: Option<u16> = None;
        loop {
            // A handle stays disarmed until its handler returns. Under time-sharing the
            // scheduler can preempt a sibling in the middle of its handler (typically: this
            // thread woke as leader on the sibling's CPU), and that handle's events then wait
            // out a time slice. Yielding before rejoining lets such a sibling finish first.
            // Equal-priority FIFO/RR siblings never preempt each other, so real-time threads
            // skip this.
            if time_shared && c.processing.load(Relaxed) > 0 {
                std::thread::yield_now();
            }
            if group.protocol.join(self.idx, self.slot.priority) == Joined::Shutdown {
                return;
            }
            // Leader: the next event of the batch (kept, or left by the previous leader, the
            // role then passing on in the same lock), or a wait on the handle set for as many
            // events as there are idle threads to take them. ONESHOT disarms every handle a
            // wait reports.
            let (ready, promoted) = match group.protocol.lead(self.idx) {
                Lead::Lost => {
                    armed = None; // its timer fired: that is how the role was lost
                    continue;
                }
                Lead::Take(ready, promoted) => (ready, promoted),
                Lead::Wait { max } => {
                    // Deferring, a leader takes all that is ready (up to MAX_BATCH), so that
                    // it can tell whether it drained the set; a borrowing lane keeps to its
                    // idle threads, so that lenders see the rest (`borrow.rs`).
                    let max = if after > 0 && group.borrow.is_none() {
                        MAX_BATCH
                    } else {
                        max
                    };
                    let n = match self.wait(&mut batch[..max], &mut armed) {
                        Ok(0) => continue, // EINTR: still the leader
                        Ok(n) => n,
                        Err(e) => {
                            self.epoll_failed(&e);
                            group.protocol.resign(self.idx);
                            continue;
                        }
                    };
                    let got = &batch[..n];
                    if got
                        .iter()
                        .any(|&r| matches!(Handles::decode(r), Wait::Shutdown))
                    {
                        // The group stops: whatever else the wait reported is not dispatched.
                        group.protocol.resign(self.idx);
                        continue;
                    }
                    // Deferred promotion (`leader.rs`) only after a wait that took everything that
                    // was ready (fewer events than it asked for): every event still in the kernel
                    // became ready after it, and waits at most `promote_after`. A full wait says
                    // the lane has more than one thread's work: a follower is promoted now, with
                    // the rest of the batch.
                    let deferred = after > 0
                        && n < max
                        && !matches!(Handles::decode(got[0]), Wait::Link { .. });
                    if deferred {
                        // Keep the role through these events; the follower that would be woken
                        // now is woken only if this thread still holds them `promote_after`
                        // from now.
                        let at = sys::now_ns().saturating_add(after);
                        match group.protocol.keep(self.idx, &got[1..], at) {
                            Kept::Keeping(s) => {
                                if armed.is_some_and(|a| a != s) {
                                    group.protocol.cancel(armed);
                                }
                                armed = Some(s);
                                (got[0], None)
                            }
                            Kept::Promoted(p) => (got[0], Some(p)),
                        }
                    } else {
                        // Promote before processing, so the handle set is never left without
                        // a leader while there is a follower; the rest of the batch goes with
                        // the role.
                        (
                            got[0],
                            Some(group.protocol.promote_with(self.idx, &got[1..])),
                        )
                    }
                }
            };
            let woke_ns = sys::now_ns();
            let wait = Handles::decode(ready);
            // A kept role is handed on before this thread is lent to another lane: lending
            // never takes the role away from its own lane's idle threads (`borrow.rs`).
            let promoted = match (promoted, &wait) {
                (None, Wait::Link { .. }) => Some(group.protocol.hand_on(self.idx)),
                (p, _) => p,
            };
            match promoted {
                None => Counters::add(&c.kept, 1),
                Some(Promoted::Follower(_)) => Counters::add(&c.promotions, 1),
                Some(Promoted::Vacant) => {
                    Counters::add(&c.vacant, 1);
                    // Every thread of this lane is busy now: call the lenders (`borrow.rs`).
                    if let Some(b) = &group.borrow {
                        b.arm(group.handles.epoll_fd().as_raw_fd(), group.index);
                    }
                }
            }
            match wait {
                Wait::Event { token, readiness } => {
                    self.process(group, token, readiness, woke_ns);
                }
                Wait::Link { borrower } => self.lend(group, borrower, woke_ns),
                Wait::BoundConnection => unreachable!("only a bound pool's set"),
                Wait::Shutdown | Wait::Interrupted => unreachable!("filtered above"),
            }
        }
    }

    /// The leader's wait on the handle set. A promotion timer it armed (`armed`) is cancelled
    /// before the wait blocks, so that an idle lane wakes nobody: a look without blocking
    /// first, and the cancel only if it found nothing.
    fn wait(&self, out: &mut [(u32, u64)], armed: &mut Option<u16>) -> io::Result<usize> {
        let handles = &self.group.handles;
        if armed.is_some() {
            let n = handles.poll_many(out)?;
            if n > 0 {
                return Ok(n);
            }
            self.group.protocol.cancel(armed.take());
        }
        handles.wait_many(out)
    }

    /// The concurrent loop (module docs, *Concurrent mode*): wait, process, until shutdown.
    pub(super) fn run_concurrent(&mut self) {
        let group = self.group;
        loop {
            match group.handles.wait() {
                Ok(Wait::Event { token, readiness }) => {
                    self.process(group, token, readiness, sys::now_ns());
                }
                Ok(Wait::Link { borrower }) => self.lend(group, borrower, sys::now_ns()),
                Ok(Wait::BoundConnection) => unreachable!("only a bound pool's set"),
                Ok(Wait::Shutdown) => {
                    // Wake one more sleeping waiter (epoll wakes its waiters one at a time).
                    group.handles.wake_for_shutdown();
                    return;
                }
                Ok(Wait::Interrupted) => {}
                Err(e) => {
                    self.epoll_failed(&e);
                    return;
                }
            }
        }
    }

    /// The epoll fd itself failed: nothing can be waited on any more. Exceptional, so it is
    /// logged even though this is a pool thread.
    #[cold]
    fn epoll_failed(&self, e: &std::io::Error) {
        tracing::error!(group = %self.group.spec.name, error = %e, "epoll_wait failed; stopping the group");
        self.group.stop();
    }

    /// Sets this thread's policy under its watchdog lock (a lent thread's raise, `restore`:
    /// its return to its own). A failure is exceptional (the privilege was taken away while
    /// running): logged, and counted if it was the return.
    pub(super) fn set_sched(&self, s: Sched, restore: bool) {
        if let Err(e) = self.slot.take_sched(s) {
            self.sched_failed(s, restore, &e);
        }
    }

    /// A refused raise is counted in this thread's lane (`raise_failures`) and logged once per
    /// lane: it fails the same way on every lent event, and a log line per event from a
    /// real-time thread would be a write on the dispatch path. The handler then runs at the
    /// thread's own priority. A refused restore is counted and logged each time (it leaves the
    /// thread at the higher priority, which must not pass unseen).
    #[cold]
    fn sched_failed(&self, s: Sched, restore: bool, e: &io::Error) {
        let c = &self.group.counters;
        if restore {
            Counters::add(&c.restore_failures, 1);
        } else {
            Counters::add(&c.raise_failures, 1);
            if c.raise_failure_said.swap(true, Relaxed) {
                return;
            }
        }
        tracing::error!(
            group = %self.group.spec.name,
            thread = self.idx,
            policy = ?s,
            error = %e,
            "a thread lent to a higher lane could not {} its policy{}",
            if restore { "restore" } else { "raise" },
            if restore {
                ""
            } else {
                "; lent events run at the lender's priority (counted in raise_failures, \
                 logged once)"
            }
        );
    }

    /// Processing: dispatches one event of `lane` (its own group, or the lane it is lent to),
    /// counts it in that lane and records its sample. Returns false for a stale event.
    pub(super) fn process(
        &mut self,
        lane: &Group,
        token: crate::engine::handle_set::Token,
        readiness: u32,
        woke_ns: u64,
    ) -> bool {
        let (group, slot, idx) = (lane, self.slot, self.idx);
        let c = &group.counters;
        self.group.counters.processing.fetch_add(1, Relaxed);
        self.ctx.origin_ns = 0;
        self.ctx.missed_periods = 0;
        let event = Event {
            token,
            readiness,
            woke_ns,
        };
        let start_ns = sys::now_ns();
        slot.busy_token.store(token.raw(), Relaxed);
        slot.busy_since.store(start_ns, SeqCst);
        let outcome = handler::dispatch(&group.handles, &event, self.ctx);
        let arrival_ns = self.ctx.datagrams().take_first_arrival();
        slot.busy_since.store(0, SeqCst);
        slot.restore_if_demoted(&self.group.counters, &self.group.spec.name);
        let end_ns = sys::now_ns();
        self.group.counters.processing.fetch_sub(1, Relaxed);
        match outcome {
            Dispatched::Stale => return false,
            Dispatched::Panicked => {
                Counters::add(&c.panics, 1);
                // Exceptional path only (the panic itself already allocated and wrote to
                // stderr); normal dispatches never log.
                tracing::error!(
                    group = %group.spec.name,
                    thread = idx,
                    handle = token.index(),
                    "event handler panicked; panic caught, thread rejoins the pool"
                );
            }
            Dispatched::Closed => Counters::add(&c.closed_by_handler, 1),
            Dispatched::Handled => {}
        }
        Counters::add(&c.dispatched, 1);
        self.dispatches += 1;

        let sample = Sample {
            group: group.index,
            thread: idx,
            token: token.raw(),
            origin_ns: self.ctx.origin_ns,
            woke_ns,
            start_ns,
            end_ns,
            missed_periods: self.ctx.missed_periods.min(u64::from(u32::MAX)) as u32,
            arrival_ns,
        };
        slot.samples.fetch_add(1, Relaxed);
        if self.ring.push(sample).is_err() {
            slot.samples_dropped.fetch_add(1, Relaxed);
        }

        slot.allocs_now
            .store(alloc_count::thread_allocations(), Relaxed);
        if self.dispatches == WARMUP_DISPATCHES {
            slot.faults_base.store(mem::thread_minor_faults(), Release);
            slot.allocs_base
                .store(alloc_count::thread_allocations(), Release);
        }
        true
    }
}
