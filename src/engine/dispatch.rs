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
//!           epoll_wait ─► drained the set, all quick? ─yes─► keep(rest)     ─► process ─► join
//!                                  └─────────────────no──► promote_with(rest after
//!                                                          the quick prefix) ──┘
//! ```
//!
//! Between `epoll_wait` returning and the handler starting there is no system call: claiming
//! the reported handles is a compare-and-swap each (`claim.rs`), keeping or handing on the
//! role is the protocol's (PI) lock, and the prediction below reads the handle table.
//!
//! A leader takes as many events per wait as there are idle threads to take them (all that is
//! ready, up to `MAX_BATCH`, when it may defer); what it does not process at once is the batch
//! (`leader.rs`). With deferred promotion (the default) its choice depends on two questions:
//! which of its events are *quick* (from the first: no borrowing link, which makes a thread
//! leave its lane, and handlers that ran, in their recent runs, for less than
//! `promote_after_us` in all, `HandleSet::quick_prefix`; a handle that has not run yet counts
//! as long), and did its wait drain the set (take fewer events than it asked for)?
//!
//! | events | wait drained the set | wait was full (more than one thread's work) |
//! |---|---|---|
//! | all quick | keep the role and the batch: wake nobody (`keep`) | promote a follower to wait for what comes next, process these itself (`own`) |
//! | a quick prefix, then the rest | process the prefix itself (`own`), promote with the rest (`promote_with`) | the same |
//! | the first is not quick | promote, the rest of the batch with the role | the same |
//!
//! So a thread that hands the role on keeps as much work as fits the budget, and the thread it
//! wakes has work of its own or the set to wait on: a batch of quick events is not passed
//! between two threads one event at a time, waking one per event. A handler that runs far
//! longer than it did before is covered by the watchdog, which relieves a leader that kept its
//! role past `promote_after_us` (`leader.rs`, `watchdog.rs`); events a thread processes itself
//! after handing the role on wait at most for the quick ones before them.
//! `promote_after_us = 0` always promotes at once, with the batch.
//!
//! # Concurrent mode (`promotion = "concurrent"`)
//!
//! The POSA2 variant *Relaxing Serialization Constraints*: an epoll set whose handles are all
//! `EPOLLONESHOT` is a concurrent handle set, so the lane needs no leader. Every idle thread
//! waits in `epoll_wait` (one event per call) on the same epoll instance:
//!
//! ```text
//!   ┌─► WAITING (in epoll_wait, any number of threads at once) ── one event ──► PROCESSING ─┐
//!   │                              │ shutdown event: pass it on, return                        │
//!   └──────────────────────────────┴───────────────────────────────────────────────────────────┘
//! ```
//!
//! Invariants, and what carries each:
//! * **a handle is dispatched on at most one thread at a time**: the waiter whose report claims
//!   it owns its dispatch until the handler returned (`claim.rs`); a report that finds it owned
//!   is folded into the owner's next run, and never runs the handler beside it
//!   (`handle_set.rs`);
//! * **every event is dispatched exactly once**: the kernel's ready list holds each handle once
//!   and `epoll_wait` removes what it returns under the epoll instance's own lock, so a report
//!   goes to exactly one waiter, which claims it or folds it into the owner's next run; a stale
//!   token is dropped by the slot generation as in the leader mode;
//! * **no lost wake-up**: epoll queues its waiters exclusively and wakes one per ready event;
//!   an event that becomes ready while no thread waits stays on the ready list, and the next
//!   thread to call `epoll_wait` takes it without sleeping;
//! * **shutdown from every state**: the shutdown eventfd is level-triggered and never read, so
//!   every later `epoll_wait` reports it; a processing thread sees it at its next wait, and a
//!   thread that sees it writes it once more before it returns, which wakes one more exclusive
//!   waiter, so the threads asleep in `epoll_wait` are woken one after the other.
//!
//! What it gives up: the [`Protocol`](crate::engine::leader::Protocol) is not used (no leader,
//! no follower queue, no promotion counters): "at most one leader" becomes "up to `threads`
//! waiters", and the follower queue's
//! order (priority, LIFO, FIFO) becomes the kernel's choice of waiter, so per-thread priorities
//! no longer decide which thread takes the next event. It is a per-lane mode, not the
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
//! lane's, and a borrower's while lent); it blocks only in `epoll_wait` (as leader, on the
//! handle set), its parker's futex (as follower) or the handler. Lane borrowing adds the
//! kernel's epoll locks of the lanes it
//! links, which are not priority-inheriting (`borrow.rs`). A test counts the
//! allocations of 100,000 dispatches for every event source and promotion order.

use crate::engine::handle_set::Wait;
use crate::engine::handler::{self, Context, Dispatched, Event, Handles};
use crate::engine::lane::LanePool;
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
    pub(super) lane: &'a LanePool,
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
        let lane = self.lane;
        let c = &lane.counters;
        let after = lane.spec.promote_after_ns;
        let mut batch = [(0u32, 0u64); MAX_BATCH];
        // Events of this thread's last wait that it processes itself after handing the role
        // on (a full wait of quick events), as indices into `batch`, which is not waited into
        // again until they are done.
        let mut own = 0..0;
        loop {
            if let Some(i) = own.next() {
                // Not the leader: no protocol step between these (module docs).
                let ready = batch[i];
                self.dispatch_ready(lane, ready, None, sys::now_ns());
                continue;
            }
            // A handle is run by one thread at a time. Under time-sharing the scheduler can
            // preempt a sibling in the middle of its handler (typically: this thread woke as
            // leader on the sibling's CPU), and that handle's next report then waits out a time
            // slice. Yielding before rejoining lets such a sibling finish first. Equal-priority
            // FIFO/RR siblings never preempt each other, so real-time threads skip this.
            if time_shared && c.processing.load(Relaxed) > 0 {
                std::thread::yield_now();
            }
            if lane.protocol.join(self.idx, self.slot.priority) == Joined::Shutdown {
                return;
            }
            // Leader: the next event of the batch (kept, or left by the previous leader, the
            // role then passing on in the same lock), or a wait on the handle set for as many
            // events as there are idle threads to take them. The wait claims every handle it
            // returns (`claim.rs`).
            let (ready, promoted, woke_ns) = match lane.protocol.lead(self.idx) {
                Lead::Lost => continue, // the watchdog handed the kept role on
                Lead::Take(ready, promoted) => (ready, promoted, sys::now_ns()),
                Lead::Wait { max } => {
                    // Deferring, a leader takes all that is ready (up to MAX_BATCH), so that
                    // it can tell whether it drained the set; a borrowing lane keeps to its
                    // idle threads, so that lenders see the rest (`borrow.rs`).
                    let max = if after > 0 && lane.borrow.is_none() {
                        MAX_BATCH
                    } else {
                        max
                    };
                    let (n, full) = match lane.handles.wait_many(&mut batch[..max]) {
                        Ok((0, _)) => continue, // EINTR, or only reports of owned handles
                        Ok(got) => got,
                        Err(e) => {
                            self.epoll_failed(&e);
                            lane.protocol.resign(self.idx);
                            continue;
                        }
                    };
                    let got = &batch[..n];
                    if got
                        .iter()
                        .any(|&r| matches!(Handles::decode(r), Wait::Shutdown))
                    {
                        // The lane stops: whatever else the wait reported is not dispatched.
                        lane.protocol.resign(self.idx);
                        continue;
                    }
                    let now = sys::now_ns();
                    // Deferred promotion (module docs): keep the role through these events,
                    // waking nobody, if the wait drained the set and all of them are quick
                    // (no link, handlers predicted to take less than `after` in all).
                    // Otherwise promote before processing, so that the handle set is never
                    // left without a leader while there is a follower: this thread keeps the
                    // quick prefix of the batch, which it processes in turn with no protocol
                    // step between them, and the rest goes with the role.
                    let quick = if after > 0 {
                        lane.handles.quick_prefix(got, after)
                    } else {
                        0
                    };
                    if quick == n && !full {
                        match lane.protocol.keep(self.idx, &got[1..], now) {
                            Kept::Keeping => (got[0], None, now),
                            Kept::Promoted(p) => (got[0], Some(p), now),
                        }
                    } else {
                        let mine = quick.max(1);
                        own = 1..mine;
                        let p = lane.protocol.promote_with(self.idx, &got[mine..]);
                        (got[0], Some(p), now)
                    }
                }
            };
            self.dispatch_ready(lane, ready, Some(promoted), woke_ns);
        }
    }

    /// Counts how the role went with `ready`, then dispatches it or lends for it. `role`:
    /// `Some(None)` kept, `Some(Some(p))` handed on (or vacant); `None` for an event this
    /// thread processes after it handed the role on with an earlier one (counted there).
    fn dispatch_ready(
        &mut self,
        lane: &LanePool,
        ready: (u32, u64),
        role: Option<Option<Promoted>>,
        woke_ns: u64,
    ) {
        let c = &lane.counters;
        let wait = Handles::decode(ready);
        // A kept batch never holds a link (`HandleSet::quick`): a lent thread never leads
        // its lane.
        debug_assert!(!matches!((role, &wait), (Some(None), Wait::Link { .. })));
        match role {
            None => {}
            Some(None) => Counters::add(&c.kept, 1),
            Some(Some(Promoted::Follower(_))) => Counters::add(&c.promotions, 1),
            Some(Some(Promoted::Vacant)) => {
                Counters::add(&c.vacant, 1);
                // Every thread of this lane is busy now: call the lenders (`borrow.rs`).
                if let Some(b) = &lane.borrow {
                    b.arm(lane.handles.epoll_fd().as_raw_fd(), lane.index);
                }
            }
        }
        match wait {
            Wait::Event { token, readiness } => {
                self.process(lane, token, readiness, woke_ns);
            }
            Wait::Link { borrower } => self.lend(lane, borrower, woke_ns),
            Wait::BoundConnection => unreachable!("only a bound pool's set"),
            Wait::Shutdown | Wait::Interrupted => unreachable!("filtered above"),
        }
    }

    /// The concurrent loop (module docs, *Concurrent mode*): wait, process, until shutdown.
    pub(super) fn run_concurrent(&mut self) {
        let lane = self.lane;
        loop {
            match lane.handles.wait() {
                Ok(Wait::Event { token, readiness }) => {
                    self.process(lane, token, readiness, sys::now_ns());
                }
                Ok(Wait::Link { borrower }) => self.lend(lane, borrower, sys::now_ns()),
                Ok(Wait::BoundConnection) => unreachable!("only a bound pool's set"),
                Ok(Wait::Shutdown) => {
                    // Wake one more sleeping waiter (epoll wakes its waiters one at a time).
                    lane.handles.wake_for_shutdown();
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
        tracing::error!(lane = %self.lane.spec.name, error = %e, "epoll_wait failed; stopping the lane");
        self.lane.stop();
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
        let c = &self.lane.counters;
        if restore {
            Counters::add(&c.restore_failures, 1);
        } else {
            Counters::add(&c.raise_failures, 1);
            if c.raise_failure_said.swap(true, Relaxed) {
                return;
            }
        }
        tracing::error!(
            lane = %self.lane.spec.name,
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

    /// Processing: dispatches one event of `lane` (its own lane, or the lane it is lent to),
    /// counts it in that lane and records its sample. If the handle was reported again while
    /// its handler ran, this thread, which still owns it, dispatches it once more as the next
    /// event (no system call; a report during that second run gets a re-check instead,
    /// `claim.rs`). Returns false for a stale event.
    pub(super) fn process(
        &mut self,
        lane: &LanePool,
        token: crate::engine::handle_set::Token,
        readiness: u32,
        woke_ns: u64,
    ) -> bool {
        match self.dispatch_once(lane, token, readiness, woke_ns, true) {
            None => false,
            Some(false) => true,
            Some(true) => self
                .dispatch_once(lane, token, readiness, sys::now_ns(), false)
                .is_some(),
        }
    }

    /// One dispatch of `process`: `None` for a stale event, else whether the caller still owns
    /// the handle and dispatches it again (only if `may_run_again`).
    fn dispatch_once(
        &mut self,
        lane: &LanePool,
        token: crate::engine::handle_set::Token,
        readiness: u32,
        woke_ns: u64,
        may_run_again: bool,
    ) -> Option<bool> {
        let (lane, slot, idx) = (lane, self.slot, self.idx);
        let c = &lane.counters;
        self.lane.counters.processing.fetch_add(1, Relaxed);
        self.ctx.origin_ns = 0;
        self.ctx.missed_periods = 0;
        let event = Event {
            token,
            readiness,
            woke_ns,
        };
        let start_ns = sys::now_ns();
        slot.begin_dispatch(token.raw(), start_ns);
        let outcome = handler::dispatch(&lane.handles, &event, self.ctx, may_run_again);
        let arrival_ns = self.ctx.datagrams().take_first_arrival();
        slot.end_dispatch(&self.lane.counters, &self.lane.spec.name);
        let end_ns = sys::now_ns();
        self.lane.counters.processing.fetch_sub(1, Relaxed);
        if outcome != Dispatched::Stale {
            // What the next wait's prediction reads (`quick`).
            lane.handles
                .note_cost(token, end_ns.saturating_sub(start_ns));
        }
        let mut again = false;
        match outcome {
            Dispatched::Stale => return None,
            Dispatched::Panicked => {
                Counters::add(&c.panics, 1);
                // Exceptional path only (the panic itself already allocated and wrote to
                // stderr); normal dispatches never log.
                tracing::error!(
                    lane = %lane.spec.name,
                    thread = idx,
                    handle = token.index(),
                    "event handler panicked; panic caught, thread rejoins the pool"
                );
            }
            Dispatched::Closed => Counters::add(&c.closed_by_handler, 1),
            Dispatched::Handled { again: a } => again = a,
        }
        Counters::add(&c.dispatched, 1);
        self.dispatches += 1;

        let sample = Sample {
            lane: lane.index,
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
        Some(again)
    }
}
