//! The bound pool's hand-off state machine: whose reply has arrived, and what each waiting
//! thread does next.
//!
//! Who leads, who follows, promotion and parking are **the** Leader/Followers protocol of
//! `leader.rs` ([`Protocol`], shared with the unbound lanes): a [`Table`] is a
//! `Protocol<Bound>`, whose variant state ([`Bound`]) holds the slots, the deferred unbound
//! events, the connection's failure and the counters, under the protocol's one
//! priority-inheritance lock. A thread waits with `join_with` and a check of its slot
//! ([`Table::next_step`]); the leader hands a reply to its waiter by writing it into the slot and
//! waking exactly that follower (`State::dequeue`), and wakes an eligible follower for a
//! deferred event (`State::pop_where`). The invariants of the leader role, the follower queue
//! and wake-ups are stated (and model-checked) in `leader.rs`; the ones of replies are below.
//!
//! Nothing here makes a system call besides those of the lock and the parkers, so the loom
//! models at the bottom check it exactly as it runs (`--cfg loom`). The I/O around it (epoll,
//! reading frames, copying bodies) lives in `bound/mod.rs` and drives it through the methods
//! below.
//!
//! A **slot** is one waiter's entry: a request sequence number, a [`Phase`], a parker (the
//! protocol's, indexed by slot) and (in `mod.rs`) a reply buffer. A thread waits *on a slot*:
//! the slot of the [`Waiter`] it passed to `join`/`serve`. Slot phases:
//!
//! ```text
//!            expect()            leader: deliver_begin()        deliver_end()
//!   Idle ───────────────► Expecting ───────────────────► Filling ─────────────► Replied(len)
//!    ▲  ▲                   │   │                                                   │
//!    │  └──── timeout ──────┘   └── fail()/shutdown() ──► Failed                    │
//!    └──────────── join/serve returned the outcome (settle) ◄──────────────────────┘
//! ```
//!
//! Invariants of replies (the loom models in `table/loom_tests.rs` check them):
//! * a reply is delivered only to a slot that expects exactly its sequence
//!   (`Expecting → Filling → Replied`), so at most once, and to its own waiter;
//! * a waiter's outcome (`Replied`, `Failed`) is written under the lock *before* the waiter is
//!   taken out of the follower queue and woken: it finds it when it re-checks;
//! * `Filling` lasts only while the leader copies a body into the slot's buffer; a waiter whose
//!   deadline passes during it still gets the reply (the copy is bounded by `max_body`), so it
//!   parks without a deadline meanwhile;
//! * a connection failure or shutdown turns every `Expecting` slot `Failed` and wakes its
//!   queued waiter; shutdown also wakes every other follower (`serve` returns).
//!
//! [`Waiter`]: super::Waiter

use super::{BoundError, BoundStats};
use crate::engine::follower_queue::Promotion;
use crate::engine::leader::{Check, Outcome, Promoted, Protocol, State, Variant};
use std::collections::VecDeque;

/// Low bits of a request id that name the slot; the high bits are the slot's sequence number.
pub(crate) const SLOT_BITS: u32 = 16;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;

/// Where a slot's request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No request registered.
    Idle,
    /// `expect` registered request `seq`; the reply has not been seen.
    Expecting,
    /// The leader is copying the reply body into the slot's buffer.
    Filling,
    /// The reply (of this many body bytes) is in the slot's buffer.
    Replied(usize),
    /// The connection failed (or the pool shut down) before the reply came.
    Failed,
}

#[derive(Debug)]
struct Slot {
    /// Sequence number of the last request registered on this slot (0: none yet).
    seq: u64,
    phase: Phase,
    /// Held by a `Waiter`.
    leased: bool,
    /// Its thread may process unbound events (set each time it waits).
    eligible: bool,
}

/// An unbound event the leader detected but could not process (see `defer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ready {
    /// The handle's token, raw.
    pub(crate) token: u64,
    /// The epoll readiness bits.
    pub(crate) readiness: u32,
    /// When the leader's wait returned with it (`CLOCK_MONOTONIC` ns).
    pub(crate) woke_ns: u64,
}

/// One thread's turn in `next_step`: who it is and what it waits for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Turn {
    /// The slot the thread waits on.
    pub(crate) slot: u16,
    /// Its priority in the follower queue.
    pub(crate) priority: u8,
    /// `join` (waits for this slot's reply) rather than `serve` (no reply expected).
    pub(crate) bound: bool,
    /// May run unbound handlers (nesting below `max_nesting`).
    pub(crate) eligible: bool,
    /// Absolute `CLOCK_MONOTONIC` ns, if any.
    pub(crate) deadline: Option<u64>,
}

/// What a thread does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Step {
    /// Its reply (this many body bytes) is in its slot's buffer.
    Replied(usize),
    /// The connection failed before its reply came.
    Failed(BoundError),
    /// Its deadline passed.
    TimedOut,
    /// The pool shut down (only `serve` returns this).
    Shutdown,
    /// Process this unbound event, then come back. The thread is not the leader.
    Process(Ready),
    /// The thread is the leader: read the connection and wait on the handle set.
    Lead,
}

/// Whom a reply frame is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// This slot, now `Filling`: copy the body into its buffer, then call `deliver_end`.
    Slot(u16),
    /// An id that was never issued (or names no slot).
    Unknown,
    /// An id issued before but no longer expected: its waiter timed out or cancelled, or the
    /// back-end replied twice.
    Late,
}

/// The bound variant's state, under the protocol's lock.
#[derive(Debug)]
struct Bound {
    slots: Vec<Slot>,
    /// Unbound events detected by a leader that could not process them.
    ready: VecDeque<Ready>,
    free: Vec<u16>,
    failure: Option<BoundError>,
    stats: BoundStats,
}

impl Variant for Bound {
    fn promoted(&mut self, to: Promoted) {
        match to {
            Promoted::Follower(_) => self.stats.promotions += 1,
            Promoted::Vacant => self.stats.vacant += 1,
        }
    }
}

/// The synchronizer of one bound pool: the Leader/Followers protocol over its slots (one
/// thread index per slot).
#[derive(Debug)]
pub(crate) struct Table {
    lf: Protocol<Bound>,
}

impl Table {
    /// A table of `slots` slots; `ready_capacity` unbound events can be deferred without
    /// allocating (one per handle suffices: handles are one-shot).
    pub(crate) fn new(slots: usize, ready_capacity: usize, promotion: Promotion) -> Table {
        assert!(slots >= 1 && slots as u64 <= SLOT_MASK + 1);
        let bound = Bound {
            slots: (0..slots)
                .map(|_| Slot {
                    seq: 0,
                    phase: Phase::Idle,
                    leased: false,
                    eligible: false,
                })
                .collect(),
            ready: VecDeque::with_capacity(ready_capacity),
            free: (0..slots as u16).rev().collect(),
            failure: None,
            stats: BoundStats::default(),
        };
        Table {
            lf: Protocol::with(slots, promotion, bound),
        }
    }

    // ----- slots ---------------------------------------------------------------------------

    /// Leases a free slot (to a new `Waiter`).
    pub(crate) fn acquire(&self) -> Option<u16> {
        let mut st = self.lf.lock();
        let b = &mut st.ext;
        let s = b.free.pop()?;
        let slot = &mut b.slots[s as usize];
        slot.leased = true;
        slot.phase = Phase::Idle;
        Some(s)
    }

    /// Returns a slot (its `Waiter` was dropped). A reply still on its way is dropped as late.
    pub(crate) fn release(&self, s: u16) {
        let mut st = self.lf.lock();
        debug_assert!(
            st.ext.slots[s as usize].leased && !st.is_queued(s),
            "released slot {s} is queued or not leased"
        );
        let b = &mut st.ext;
        let slot = &mut b.slots[s as usize];
        slot.leased = false;
        slot.phase = Phase::Idle;
        b.free.push(s);
    }

    /// Registers a new request on slot `s` and returns its id. Must precede sending it.
    pub(crate) fn expect(&self, s: u16) -> Result<u64, BoundError> {
        let mut st = self.lf.lock();
        let b = &mut st.ext;
        if let Some(f) = b.failure {
            return Err(f);
        }
        let slot = &mut b.slots[s as usize];
        if slot.phase != Phase::Idle {
            return Err(BoundError::Busy);
        }
        slot.seq += 1;
        slot.phase = Phase::Expecting;
        Ok(slot.seq << SLOT_BITS | u64::from(s))
    }

    /// Abandons slot `s`'s registered request (if any); a reply that still comes is late.
    pub(crate) fn cancel(&self, s: u16) {
        self.lf.lock().ext.slots[s as usize].phase = Phase::Idle;
    }

    /// Whether slot `s` has no request registered.
    pub(crate) fn is_idle(&self, s: u16) -> bool {
        self.lf.lock().ext.slots[s as usize].phase == Phase::Idle
    }

    // ----- turns -------------------------------------------------------------------------------

    /// Whether the thread of `t` is done waiting, and with what. Under the lock.
    fn settle(st: &mut State<Bound>, t: &Turn) -> Option<Step> {
        let shutdown = st.is_shutdown();
        let b = &mut st.ext;
        let me = t.slot as usize;
        if t.bound {
            match b.slots[me].phase {
                Phase::Replied(n) => {
                    b.slots[me].phase = Phase::Idle;
                    return Some(Step::Replied(n));
                }
                Phase::Failed => {
                    b.slots[me].phase = Phase::Idle;
                    return Some(Step::Failed(b.failure.unwrap_or(BoundError::Shutdown)));
                }
                Phase::Idle => return Some(Step::Failed(BoundError::NotExpecting)),
                Phase::Expecting | Phase::Filling => {}
            }
        } else if shutdown {
            return Some(Step::Shutdown);
        }
        let filling = t.bound && b.slots[me].phase == Phase::Filling;
        if let Some(d) = t.deadline {
            if !filling && crate::sys::now_ns() >= d {
                if t.bound {
                    b.slots[me].phase = Phase::Idle;
                }
                b.stats.timeouts += 1;
                return Some(Step::TimedOut);
            }
        }
        if t.eligible {
            if let Some(ev) = b.ready.pop_front() {
                if t.bound {
                    b.stats.inline += 1;
                }
                return Some(Step::Process(ev));
            }
        }
        None
    }

    /// Step (a) of the pattern's `join`: returns when the thread of `t` is done, must process a
    /// deferred unbound event, or is the leader. Otherwise it waits as a follower, parked on its
    /// slot's parker until promoted, handed its reply, woken for a deferred event, or failed.
    pub(crate) fn next_step(&self, t: &Turn) -> Step {
        let check = |st: &mut State<Bound>| match Self::settle(st, t) {
            Some(step) => Check::Done(step),
            None => {
                let slot = &mut st.ext.slots[t.slot as usize];
                slot.eligible = t.eligible;
                // While the leader copies our reply, wait for it even past the deadline
                // (bounded).
                Check::Wait {
                    until: if slot.phase == Phase::Filling {
                        None
                    } else {
                        t.deadline
                    },
                }
            }
        };
        match self.lf.join_with(t.slot, t.priority, check) {
            Outcome::Lead => Step::Lead,
            Outcome::Done(step) => step,
        }
    }

    /// Called by the leader between reads: if it is done (its reply came, the connection failed,
    /// its deadline passed, the pool shut down, or it should process a deferred event) it gives
    /// up the role to the best follower and returns its step. `reader` (the receive buffer's
    /// guard) is released *before* the new leader is named, so the new leader finds it free.
    ///
    /// Otherwise returns `reader` back, with whether the connection has failed.
    pub(crate) fn lead_settle<G>(&self, t: &Turn, reader: G) -> Result<Step, (G, bool)> {
        let mut st = self.lf.lock();
        debug_assert_eq!(
            st.leader(),
            Some(t.slot),
            "lead_settle by a thread that does not lead"
        );
        match Self::settle(&mut st, t) {
            Some(step) => {
                drop(reader);
                let next = st.leave(t.slot);
                drop(st);
                self.lf.wake(next);
                Ok(step)
            }
            None => {
                let failed = st.ext.failure.is_some();
                drop(st);
                Err((reader, failed))
            }
        }
    }

    /// The leader detected unbound event `ev` and may process it: it promotes a follower (the
    /// pattern's "promote, then process") and returns `Step::Process(ev)`.
    pub(crate) fn lead_process<G>(&self, t: &Turn, ev: Ready, reader: G) -> Step {
        let mut st = self.lf.lock();
        debug_assert_eq!(
            st.leader(),
            Some(t.slot),
            "lead_process by a thread that does not lead"
        );
        drop(reader);
        if t.bound {
            st.ext.stats.inline += 1;
        }
        let next = st.promote().follower();
        drop(st);
        self.lf.wake(next);
        Step::Process(ev)
    }

    /// The leader detected unbound event `ev` but may not process it (its thread is nested too
    /// deeply): queue it and wake one eligible follower, if any, to process it. Eligible threads
    /// check this queue before they lead or park, so the event is not stranded.
    pub(crate) fn defer(&self, ev: Ready) {
        let mut st = self.lf.lock();
        // Beyond the reserved capacity (only with stale events of removed handles) this
        // allocates rather than lose an event whose handle would stay disarmed.
        st.ext.ready.push_back(ev);
        st.ext.stats.deferred += 1;
        let helper = st.pop_where(|b, s| b.slots[s as usize].eligible);
        drop(st);
        self.lf.wake(helper);
    }

    // ----- replies ------------------------------------------------------------------------------

    /// Step (b): the leader read a reply frame for request `id`. If its waiter still expects it,
    /// the slot becomes `Filling`; the leader copies the body into the slot's buffer and then
    /// calls [`deliver_end`](Self::deliver_end). Unknown and late ids are counted and dropped.
    pub(crate) fn deliver_begin(&self, id: u64) -> Target {
        let mut st = self.lf.lock();
        let b = &mut st.ext;
        let s = (id & SLOT_MASK) as usize;
        let seq = id >> SLOT_BITS;
        if s >= b.slots.len() || seq == 0 {
            b.stats.unknown += 1;
            return Target::Unknown;
        }
        let slot = &mut b.slots[s];
        if slot.phase == Phase::Expecting && slot.seq == seq {
            slot.phase = Phase::Filling;
            Target::Slot(s as u16)
        } else if seq <= slot.seq {
            b.stats.late += 1;
            Target::Late
        } else {
            b.stats.unknown += 1;
            Target::Unknown
        }
    }

    /// The body of slot `s`'s reply (`len` bytes) is in its buffer: publish it and wake the
    /// waiting thread (the hand-off: specific notification). `me` is the leader's own slot.
    pub(crate) fn deliver_end(&self, s: u16, len: usize, me: u16) {
        let mut st = self.lf.lock();
        let b = &mut st.ext;
        if b.slots[s as usize].phase != Phase::Filling {
            // The waiter was dropped or cancelled while the body was being copied.
            b.stats.late += 1;
            return;
        }
        b.slots[s as usize].phase = Phase::Replied(len);
        b.stats.replies += 1;
        if s == me {
            b.stats.own += 1;
        } else {
            b.stats.handoffs += 1;
        }
        // Wake only a parked (queued) owner; a running one sees `Replied` at its next check.
        let parked = st.dequeue(s);
        drop(st);
        if parked {
            self.lf.wake(Some(s));
        }
    }

    // ----- failure and shutdown -------------------------------------------------------------

    /// The connection failed: every request still expected fails with `reason` (the first
    /// reason sticks), their parked threads are woken, and later `expect`s fail. A body being
    /// copied (`Filling`) is still delivered. Returns true for the first failure.
    pub(crate) fn fail(&self, reason: BoundError) -> bool {
        let mut st = self.lf.lock();
        let first = st.ext.failure.is_none();
        if first {
            st.ext.failure = Some(reason);
        }
        for s in 0..st.ext.slots.len() as u16 {
            if Self::fail_slot(&mut st, s) && st.dequeue(s) {
                // Under the lock: failure is rare, and the woken thread just re-locks.
                self.lf.wake(Some(s));
            }
        }
        first
    }

    /// `Expecting → Failed`; true if slot `s` was expecting.
    fn fail_slot(st: &mut State<Bound>, s: u16) -> bool {
        let slot = &mut st.ext.slots[s as usize];
        let expecting = slot.phase == Phase::Expecting;
        if expecting {
            slot.phase = Phase::Failed;
        }
        expecting
    }

    /// Shuts the pool down: pending requests fail with `Shutdown`, every parked thread wakes,
    /// `serve` returns. Idempotent.
    pub(crate) fn shutdown(&self) {
        self.lf.shutdown_with(|st| {
            st.ext.failure.get_or_insert(BoundError::Shutdown);
            for s in 0..st.ext.slots.len() as u16 {
                Self::fail_slot(st, s);
            }
        });
    }

    /// The failure, if the connection failed or the pool shut down.
    pub(crate) fn failure(&self) -> Option<BoundError> {
        self.lf.lock().ext.failure
    }

    /// Counters so far.
    pub(crate) fn stats(&self) -> BoundStats {
        self.lf.lock().ext.stats
    }

    /// `(leader present, threads queued, deferred events)`: a racy snapshot.
    pub(crate) fn snapshot(&self) -> (bool, usize, usize) {
        let st = self.lf.lock();
        (st.leader().is_some(), st.followers(), st.ext.ready.len())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn turn(slot: u16, bound: bool) -> Turn {
        Turn {
            slot,
            priority: 0,
            bound,
            eligible: true,
            deadline: None,
        }
    }

    #[test]
    fn ids_name_slot_and_sequence() {
        let t = Table::new(4, 4, Promotion::Fifo);
        let a = t.acquire().unwrap();
        let b = t.acquire().unwrap();
        assert_ne!(a, b);
        let ia = t.expect(a).unwrap();
        assert_eq!(t.expect(a), Err(BoundError::Busy));
        let ib = t.expect(b).unwrap();
        assert_eq!(ia & SLOT_MASK, u64::from(a));
        assert_eq!(ib >> SLOT_BITS, 1);
        // Unknown: slot out of range, sequence 0, or a sequence not yet issued.
        assert_eq!(t.deliver_begin(99), Target::Unknown);
        assert_eq!(t.deliver_begin(u64::from(a)), Target::Unknown);
        assert_eq!(t.deliver_begin(ia + (5 << SLOT_BITS)), Target::Unknown);
        // Delivered once; the second copy is late.
        assert_eq!(t.deliver_begin(ia), Target::Slot(a));
        t.deliver_end(a, 3, b);
        assert_eq!(t.deliver_begin(ia), Target::Late);
        assert_eq!(t.next_step(&turn(a, true)), Step::Replied(3));
        let s = t.stats();
        assert_eq!(
            (s.replies, s.handoffs, s.own, s.unknown, s.late),
            (1, 1, 0, 3, 1)
        );
    }

    #[test]
    fn first_joiner_leads_and_own_reply_vacates() {
        let t = Table::new(2, 2, Promotion::Fifo);
        let a = t.acquire().unwrap();
        let id = t.expect(a).unwrap();
        assert_eq!(t.next_step(&turn(a, true)), Step::Lead);
        assert_eq!(t.deliver_begin(id), Target::Slot(a));
        t.deliver_end(a, 0, a);
        assert_eq!(t.lead_settle(&turn(a, true), ()).unwrap(), Step::Replied(0));
        assert_eq!(t.snapshot(), (false, 0, 0));
        let s = t.stats();
        assert_eq!((s.own, s.vacant), (1, 1));
    }

    #[test]
    fn expired_deadline_times_out_and_reply_is_late() {
        let t = Table::new(1, 1, Promotion::Fifo);
        let a = t.acquire().unwrap();
        let id = t.expect(a).unwrap();
        let tt = Turn {
            deadline: Some(0),
            ..turn(a, true)
        };
        assert_eq!(t.next_step(&tt), Step::TimedOut);
        assert_eq!(t.deliver_begin(id), Target::Late);
        // the slot is reusable at once
        let id2 = t.expect(a).unwrap();
        assert_ne!(id, id2);
    }

    #[test]
    fn join_without_expect_and_failure() {
        let t = Table::new(2, 1, Promotion::Priority);
        let a = t.acquire().unwrap();
        assert_eq!(
            t.next_step(&turn(a, true)),
            Step::Failed(BoundError::NotExpecting)
        );
        t.expect(a).unwrap();
        assert!(t.fail(BoundError::Closed));
        assert!(!t.fail(BoundError::Shutdown), "the first reason sticks");
        assert_eq!(
            t.next_step(&turn(a, true)),
            Step::Failed(BoundError::Closed)
        );
        assert_eq!(t.expect(a), Err(BoundError::Closed));
    }

    #[test]
    fn deferred_event_goes_to_an_eligible_thread_only() {
        let t = Table::new(2, 2, Promotion::Fifo);
        let a = t.acquire().unwrap();
        let ev = Ready {
            token: 3,
            readiness: 1,
            woke_ns: 0,
        };
        t.defer(ev);
        let ineligible = Turn {
            eligible: false,
            ..turn(a, false)
        };
        assert_eq!(t.next_step(&ineligible), Step::Lead);
        assert_eq!(t.lead_settle(&ineligible, ()).map_err(|e| e.1), Err(false));
        // An eligible serve thread takes the event, and hands the leader role on first.
        assert_eq!(
            t.lead_settle(&turn(a, false), ()).unwrap(),
            Step::Process(ev)
        );
        assert_eq!(t.snapshot(), (false, 0, 0));
    }

    /// Followers of priorities 10, 30, 20 (arriving in that order) are promoted in the order of
    /// each protocol, through the shared follower queue (real threads and parkers). Each
    /// promoted thread hands the role on at once, as a leader that detected an event does.
    #[test]
    fn promotion_orders() {
        use std::sync::{Arc, Mutex as StdMutex};
        for (promotion, expect) in [
            (Promotion::Priority, [2u16, 3, 1]),
            (Promotion::Fifo, [1, 2, 3]),
            (Promotion::Lifo, [3, 2, 1]),
        ] {
            let t = Arc::new(Table::new(4, 1, promotion));
            let ev = Ready {
                token: 1,
                readiness: 1,
                woke_ns: 0,
            };
            let leader = turn(0, false);
            assert_eq!(t.next_step(&leader), Step::Lead);
            let order = Arc::new(StdMutex::new(Vec::new()));
            let hs: Vec<_> = [(1u16, 10u8), (2, 30), (3, 20)]
                .into_iter()
                .map(|(slot, priority)| {
                    let (t2, order) = (t.clone(), order.clone());
                    let h = std::thread::spawn(move || {
                        let me = Turn {
                            priority,
                            ..turn(slot, false)
                        };
                        assert_eq!(t2.next_step(&me), Step::Lead);
                        order.lock().unwrap().push(slot);
                        assert_eq!(t2.lead_process(&me, ev, ()), Step::Process(ev));
                    });
                    while t.snapshot().1 < slot as usize {
                        std::thread::yield_now();
                    }
                    h
                })
                .collect();
            assert_eq!(t.lead_process(&leader, ev, ()), Step::Process(ev));
            for h in hs {
                h.join().unwrap();
            }
            assert_eq!(*order.lock().unwrap(), expect.to_vec(), "{promotion:?}");
            assert_eq!(t.snapshot(), (false, 0, 0));
            let s = t.stats();
            assert_eq!((s.promotions, s.vacant), (3, 1));
        }
    }

    #[test]
    fn slots_run_out_and_come_back() {
        let t = Table::new(2, 1, Promotion::Fifo);
        let a = t.acquire().unwrap();
        let b = t.acquire().unwrap();
        assert_eq!(t.acquire(), None);
        t.release(a);
        assert_eq!(t.acquire(), Some(a));
        let _ = b;
    }

    /// Real threads and parkers: 4 threads, each with its own slot, 2,000 requests each. The
    /// "back-end" answers everything in flight at once, in reverse order. Every thread gets
    /// exactly its own replies (the body length carries the request's sequence number), and at
    /// most one thread leads at any time.
    #[test]
    fn stress_reverse_order_handoff() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        use std::sync::{Arc, Condvar, Mutex as StdMutex};
        const THREADS: u16 = 4;
        const REQUESTS: usize = 2000;
        let table = Arc::new(Table::new(THREADS as usize, 1, Promotion::Fifo));
        // (requests in flight, replies on the wire)
        let wire = Arc::new((
            StdMutex::new((Vec::<u64>::new(), Vec::<u64>::new())),
            Condvar::new(),
        ));
        let leaders = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..THREADS)
            .map(|_| {
                let (table, wire, leaders) = (table.clone(), wire.clone(), leaders.clone());
                std::thread::spawn(move || {
                    let me = table.acquire().unwrap();
                    let t = turn(me, true);
                    let (m, cv) = &*wire;
                    for _ in 0..REQUESTS {
                        let id = table.expect(me).unwrap();
                        let want = (id >> SLOT_BITS) as usize;
                        m.lock().unwrap().0.push(id);
                        cv.notify_all();
                        let got = match table.next_step(&t) {
                            Step::Replied(n) => n,
                            Step::Lead => loop {
                                assert_eq!(leaders.fetch_add(1, SeqCst), 0, "two leaders");
                                let batch = {
                                    let mut g = m.lock().unwrap();
                                    if g.1.is_empty() {
                                        let mut b = std::mem::take(&mut g.0);
                                        b.reverse();
                                        g.1 = b;
                                    }
                                    std::mem::take(&mut g.1)
                                };
                                for rid in batch {
                                    if let Target::Slot(s) = table.deliver_begin(rid) {
                                        table.deliver_end(s, (rid >> SLOT_BITS) as usize, me);
                                    }
                                }
                                leaders.fetch_sub(1, SeqCst);
                                match table.lead_settle(&t, ()) {
                                    Ok(Step::Replied(n)) => break n,
                                    Ok(s) => panic!("unexpected {s:?}"),
                                    Err(_) => {}
                                }
                                let g = m.lock().unwrap();
                                if g.0.is_empty() && g.1.is_empty() {
                                    let _ = cv
                                        .wait_timeout(g, std::time::Duration::from_millis(1))
                                        .unwrap();
                                }
                            },
                            s => panic!("unexpected {s:?}"),
                        };
                        assert_eq!(got, want, "thread got another request's reply");
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let s = table.stats();
        assert_eq!(s.replies, THREADS as u64 * REQUESTS as u64);
        assert_eq!(s.unknown + s.late, 0);
        assert_eq!(s.own + s.handoffs, s.replies);
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
