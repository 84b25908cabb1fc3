//! One Leader/Followers group: its shared state and the pool thread's life.
//!
//! A pool thread: (1) takes its scheduling policy and priority, *then* its CPU affinity (a
//! SCHED_OTHER thread pinned to a CPU that a FIFO thread keeps busy would starve before it could
//! raise itself); (2) pre-faults its stack and creates its [`Context`] (buffers written, so
//! resident); (3) reports ready; (4) loops: join → lead (wait for one event) → promote →
//! process → rejoin, until shutdown. A time-shared (SCHED_OTHER) thread yields before it
//! rejoins while a sibling is mid-handler, so a sibling preempted while holding its disarmed
//! handle finishes first.
//!
//! A thread of a **bound** group ([`GroupConfig::bound`]) makes the same set-up, (1) and (2),
//! then takes the waiter leased for it when the group was built and serves the group's
//! [`BoundPool`] (`crate::bound`: the same [`Protocol`], over the pool's slots) until the group
//! stops; `Group::stop` shuts the pool down too.
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
//! What it gives up: the [`Protocol`] is not used (no leader, no follower queue, no promotion
//! counters): "at most one leader" becomes "up to `threads` waiters", and the follower queue's
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
//! group's, and a borrower's while lent); it blocks only in `epoll_wait` (as leader), `futex`
//! (as follower) or the handler. Lane borrowing adds the kernel's epoll locks of the lanes it
//! links, which are not priority-inheriting (`borrow.rs`). A test counts the
//! allocations of 100,000 dispatches for every event source and promotion order.

use crate::bound::{BoundPool, Waiter};
use crate::config::{BoundGroup, GroupConfig, RtMode};
use crate::engine::borrow::Borrow;
use crate::engine::follower_queue::{Promotion, MAX_GROUP_THREADS};
use crate::engine::handle_set::Wait;
use crate::engine::handler::{self, Context, Dispatched, Event, Handles, Registry};
use crate::engine::leader::{Joined, Promoted, Protocol};
use crate::error::Error;
use crate::observe::alloc_count;
use crate::observe::metrics::Counters;
use crate::observe::telemetry::Sample;
use crate::sync::pi_mutex::PiMutex;
use crate::sys::{self, mem, sched, sched::Sched};
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::*};
use std::sync::{Arc, OnceLock};

/// Dispatches a thread makes before its allocation and page-fault baselines are taken.
/// Covers one-time lazy initialisation (first use of a handler, thread-locals).
pub const WARMUP_DISPATCHES: u64 = 64;

/// Stack kept free of pre-faulting for the guard area and the thread's own start-up frames.
const STACK_MARGIN: usize = 32 * 1024;

/// What other threads (runtime, watchdog, reporters) see of one pool thread.
#[derive(Debug)]
pub(crate) struct ThreadSlot {
    pub(crate) sched: Sched,
    pub(crate) priority: u8,
    pub(crate) tid: AtomicI32,
    /// The policy and level the kernel reported after set-up ([`Applied`]), so a snapshot
    /// shows what runs, not what was asked for (a best-effort lane may run time-shared).
    pub(crate) applied: AtomicU64,
    /// Handler start time (ns) while a handler runs, 0 otherwise.
    pub(crate) busy_since: AtomicU64,
    /// Token of the event being processed.
    pub(crate) busy_token: AtomicU64,
    pub(crate) allocs_now: AtomicU64,
    /// Allocation count at warm-up; `u64::MAX` before.
    pub(crate) allocs_base: AtomicU64,
    pub(crate) faults_base: AtomicU64,
    /// Minor faults at exit (the /proc entry is gone afterwards); `u64::MAX` while running.
    pub(crate) faults_final: AtomicU64,
    pub(crate) samples: AtomicU64,
    pub(crate) samples_dropped: AtomicU64,
    /// Set by the watchdog (under `sched_lock`) when it demoted this thread.
    pub(crate) demoted: AtomicBool,
    pub(crate) sched_lock: PiMutex<()>,
}

impl ThreadSlot {
    fn new(sched: Sched, priority: u8) -> ThreadSlot {
        ThreadSlot {
            sched,
            priority,
            tid: AtomicI32::new(0),
            applied: AtomicU64::new(Applied::NOT_STARTED),
            busy_since: AtomicU64::new(0),
            busy_token: AtomicU64::new(0),
            allocs_now: AtomicU64::new(0),
            allocs_base: AtomicU64::new(u64::MAX),
            faults_base: AtomicU64::new(u64::MAX),
            faults_final: AtomicU64::new(u64::MAX),
            samples: AtomicU64::new(0),
            samples_dropped: AtomicU64::new(0),
            demoted: AtomicBool::new(false),
            sched_lock: PiMutex::new(()),
        }
    }

    /// Allocations since warm-up; `None` before this thread's warm-up (not measured yet).
    /// Meaningful only with the counting allocator installed (the caller checks).
    pub(crate) fn allocations(&self) -> Option<u64> {
        let base = self.allocs_base.load(Acquire);
        (base != u64::MAX).then(|| self.allocs_now.load(Relaxed).saturating_sub(base))
    }

    /// Minor page faults since warm-up; `None` before this thread's warm-up, or if its count
    /// can no longer be read (a thread that died without recording its final count).
    pub(crate) fn minor_faults(&self) -> Option<u64> {
        let base = self.faults_base.load(Acquire);
        if base == u64::MAX {
            return None;
        }
        let now = match self.faults_final.load(Acquire) {
            u64::MAX => sched::minor_faults(self.tid.load(Relaxed)).ok()?,
            f => f,
        };
        Some(now.saturating_sub(base))
    }

    // Demotion and restore have one owner, these three methods: the watchdog calls
    // [`demote`](Self::demote), the thread itself [`take_sched`](Self::take_sched) (a lent
    // thread's raise and return) and [`restore_if_demoted`](Self::restore_if_demoted) (after
    // each handler). Protocol (no lost restore): the watchdog, under `sched_lock`, sets
    // `demoted` and *then* re-reads `busy_since`; it demotes only if the same handler still
    // runs. The thread clears `busy_since` and *then* reads `demoted`; if set, it takes
    // `sched_lock` and restores. Both pairs are SeqCst, so at least one side sees the other's
    // write: either the watchdog sees the handler ended (and does not demote), or the thread
    // sees `demoted` (and restores after the demotion finished).

    /// Watchdog side: moves this thread to SCHED_OTHER if the handler that started at `start`
    /// still runs. Only the target's policy changes (`sched::set_thread` on its tid leaves
    /// every nice value alone, the caller's included). Returns whether it demoted.
    pub(crate) fn demote(&self, start: u64) -> bool {
        let _l = self.sched_lock.lock();
        self.demoted.store(true, SeqCst);
        if self.busy_since.load(SeqCst) == start
            && sched::set_thread(self.tid.load(Relaxed), Sched::Other).is_ok()
        {
            return true;
        }
        self.demoted.store(false, SeqCst);
        false
    }

    /// Thread side: the calling thread (this slot's) takes policy `s`, its own or a lane's it
    /// is lent to. Under `sched_lock`, so it does not interleave with a demotion; a demotion in
    /// force is over with it.
    fn take_sched(&self, s: Sched) -> io::Result<()> {
        let _g = self.sched_lock.lock();
        self.demoted.store(false, SeqCst);
        sched::set_current(s)
    }

    /// Puts the thread back to its configured policy if the watchdog demoted it. Called by the
    /// thread itself after clearing `busy_since`. A failed restore (the privilege was taken away
    /// while running) is counted and logged: the thread then stays time-shared.
    #[cold]
    fn restore_if_demoted(&self, group: &Group) {
        if !self.demoted.load(SeqCst) {
            return;
        }
        if let Err(e) = self.take_sched(self.sched) {
            Counters::add(&group.counters.restore_failures, 1);
            tracing::error!(
                group = %group.cfg.name,
                policy = ?self.sched,
                error = %e,
                "could not restore a pool thread's policy after a watchdog demotion; \
                 it stays SCHED_OTHER"
            );
        }
    }
}

/// A pool thread's scheduling as read back from the kernel after set-up, packed in one word:
/// the policy and its level (the RT priority, or the nice value for `SCHED_OTHER`).
pub(crate) struct Applied;

impl Applied {
    pub(crate) const NOT_STARTED: u64 = u64::MAX;

    fn pack(sched: io::Result<Sched>, nice: io::Result<i32>) -> u64 {
        match sched {
            Ok(Sched::Fifo(p)) => 1 << 32 | u64::from(p),
            Ok(Sched::Rr(p)) => 2 << 32 | u64::from(p),
            Ok(Sched::Other) => 3 << 32 | u64::from(nice.unwrap_or(0) as u32),
            // Runtime in µs (the period and deadline are the configuration's).
            Ok(Sched::Deadline { runtime_ns, .. }) => {
                4 << 32 | (runtime_ns / 1000).min(u64::from(u32::MAX))
            }
            Err(_) => Self::NOT_STARTED - 1,
        }
    }

    /// `fifo 80`, `rr 10`, `other nice 5`, or why there is nothing to show.
    pub(crate) fn describe(word: u64) -> String {
        let level = word as u32;
        match word >> 32 {
            1 => format!("fifo {level}"),
            2 => format!("rr {level}"),
            3 => format!("other nice {}", level as i32),
            4 => format!("deadline runtime {level} us"),
            _ if word == Self::NOT_STARTED => "not started".to_owned(),
            _ => "unreadable".to_owned(),
        }
    }
}

/// The nice value a best-effort lane runs at when the kernel refuses its RT priority, so the
/// lanes keep their order under time-sharing: priority 99 → nice 0 … priority 1 → nice 19.
/// (Without CAP_SYS_NICE a thread may raise its nice value but not lower it below 0.)
pub(crate) fn best_effort_nice(priority: u8) -> i32 {
    (i32::from(99u8.saturating_sub(priority.min(99))) * 19 + 49) / 99
}

/// A group's shared state.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) index: u16,
    pub(crate) cfg: GroupConfig,
    pub(crate) protocol: Protocol,
    pub(crate) handles: Arc<Handles>,
    pub(crate) counters: Counters,
    pub(crate) threads: Box<[ThreadSlot]>,
    /// This lane borrows (`borrow_from`): its links and count (`borrow.rs`).
    pub(crate) borrow: Option<Borrow>,
    /// The higher lanes this lane lends to (set once by `borrow::wire`).
    pub(crate) lends: OnceLock<Box<[Arc<Group>]>>,
    /// A bound group's pool (its `handles` are the pool's); `None` for a Leader/Followers group.
    pub(crate) bound: Option<Bound>,
}

/// How long [`Group::new`] waits for a bound group's connection to its back-end.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The runtime's side of a bound group: the pool, and the waiter slot of each of its threads,
/// leased when the group is built so that callers leasing slots before `start` cannot take
/// them. Each thread takes its own at set-up.
#[derive(Debug)]
pub(crate) struct Bound {
    pub(crate) pool: BoundPool,
    waiters: Box<[std::sync::Mutex<Option<Waiter>>]>,
}

impl Bound {
    /// Connects to the back-end and builds the pool of bound group `cfg`.
    fn new(cfg: &GroupConfig, b: &BoundGroup) -> Result<Bound, Error> {
        let conn =
            std::net::TcpStream::connect_timeout(&b.connect, CONNECT_TIMEOUT).map_err(|e| {
                Error::Connect {
                    group: cfg.name.clone(),
                    addr: b.connect,
                    source: e,
                }
            })?;
        let pool = BoundPool::new(conn, b.pool_config(cfg))?;
        let waiters = (0..cfg.threads)
            .map(|_| {
                pool.waiter()
                    .map(|w| std::sync::Mutex::new(Some(w)))
                    .map_err(|e| {
                        Error::config(
                            format!("group `{}`.bound.max_waiters", cfg.name),
                            e.to_string(),
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Bound { pool, waiters })
    }

    /// Thread `idx`'s waiter, at the thread's priority (once).
    fn waiter(&self, idx: u16, priority: u8) -> Waiter {
        let mut w = self.waiters[idx as usize]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .expect("each bound thread takes its waiter once");
        w.set_priority(priority);
        w
    }
}

impl Group {
    pub(crate) fn new(index: u16, cfg: GroupConfig) -> Result<Group, Error> {
        let bound = cfg
            .bound
            .as_ref()
            .map(|b| Bound::new(&cfg, b))
            .transpose()?;
        let handles = match &bound {
            Some(b) => b.pool.handles().clone(),
            None => Arc::new(Handles::new(cfg.max_handles).map_err(|e| Error::Io {
                context: "creating the group's epoll instance",
                source: e,
            })?),
        };
        let threads = (0..cfg.threads)
            .map(|i| {
                let p = cfg.thread_priority(i);
                let s = match cfg.policy {
                    crate::config::Policy::Fifo => Sched::Fifo(p),
                    crate::config::Policy::Rr => Sched::Rr(p),
                    crate::config::Policy::Other => Sched::Other,
                    crate::config::Policy::Deadline => {
                        let d = cfg.deadline.unwrap_or_default();
                        Sched::Deadline {
                            runtime_ns: d.runtime_us * 1000,
                            deadline_ns: d.deadline_us * 1000,
                            period_ns: d.period_us * 1000,
                        }
                    }
                };
                ThreadSlot::new(s, p)
            })
            .collect();
        Ok(Group {
            index,
            protocol: Protocol::new(cfg.threads, cfg.promotion),
            handles,
            bound,
            counters: Counters::default(),
            threads,
            borrow: Borrow::new(&cfg),
            lends: OnceLock::new(),
            cfg,
        })
    }

    pub(crate) fn registry(&self) -> Registry {
        Registry {
            set: self.handles.clone(),
        }
    }

    /// Asks every thread of the group to return (non-blocking).
    pub(crate) fn stop(&self) {
        if let Some(b) = &self.borrow {
            b.stopped.store(true, SeqCst);
        }
        self.protocol.shutdown();
        self.handles.wake_for_shutdown();
        if let Some(b) = &self.bound {
            b.pool.shutdown();
        }
    }
}

/// How a pool thread's set-up went.
#[derive(Debug)]
pub(crate) enum Setup {
    /// Running with the configured policy (`true`) or at normal priority (`false`, best-effort).
    Ready {
        rt_applied: bool,
        /// The kernel's refusal, and why if no privilege would fix it
        /// ([`sched::refusal_cause`]).
        error: Option<(std::io::Error, Option<String>)>,
    },
    Failed(Error),
}

/// Body of pool thread `idx` of `group`.
pub(crate) fn pool_thread(
    group: Arc<Group>,
    idx: u16,
    mut ring: rtrb::Producer<Sample>,
    rt: RtMode,
    ready: std::sync::mpsc::Sender<Setup>,
) {
    let slot = &group.threads[idx as usize];
    let tid = sys::gettid();
    slot.tid.store(tid, Release);

    // 1. Priority first, then affinity.
    let mut rt_applied = true;
    let mut rt_error = None;
    if slot.sched != Sched::Other {
        if let Err(e) = sched::set_current(slot.sched) {
            let cause = sched::refusal_cause(slot.sched, &e);
            if rt == RtMode::Required {
                let p = sched::RtPrivilege::probe();
                let have = format!(
                    "CAP_SYS_NICE {}, RLIMIT_RTPRIO {}",
                    if p.cap_sys_nice { "yes" } else { "no" },
                    p.rlimit_rtprio
                );
                let err = if let Some(cause) = cause {
                    Error::Sched {
                        group: group.cfg.name.clone(),
                        what: format!("setting {:?}: {cause}", slot.sched),
                        source: e,
                    }
                } else if sched::is_permission_denied(&e) {
                    Error::RtPermission {
                        group: group.cfg.name.clone(),
                        priority: slot.priority,
                        source: e,
                        have,
                        deadline: matches!(slot.sched, Sched::Deadline { .. }),
                    }
                } else {
                    Error::Sched {
                        group: group.cfg.name.clone(),
                        what: format!("setting {:?}", slot.sched),
                        source: e,
                    }
                };
                let _ = ready.send(Setup::Failed(err));
                return;
            }
            rt_applied = false;
            rt_error = Some((e, cause));
            let _ = sched::set_current_nice(best_effort_nice(slot.priority));
        }
    }
    slot.applied
        .store(Applied::pack(sched::read_back(0), sched::nice(0)), Release);
    if let Some(cpus) = &group.cfg.cpus {
        if let Err(e) = sched::set_current_affinity(cpus) {
            let _ = ready.send(Setup::Failed(Error::Sched {
                group: group.cfg.name.clone(),
                what: format!("pinning to CPUs {cpus:?}"),
                source: e,
            }));
            return;
        }
    }

    // 2. Thread-specific storage, resident before the first event.
    mem::prefault_stack(group.cfg.stack_bytes.saturating_sub(STACK_MARGIN));
    if let Some(b) = &group.bound {
        // A bound group's thread: its waiter (leased and pre-faulted with the group) holds its
        // handler buffers; it serves the pool until the group stops.
        let mut w = b.waiter(idx, slot.priority);
        crate::bound::set_runtime_thread(&group, idx, slot.priority);
        let _ = ready.send(Setup::Ready {
            rt_applied,
            error: rt_error,
        });
        drop(ready);
        let served = b.pool.serve(&mut w, None);
        debug_assert_eq!(
            served,
            Ok(()),
            "serve without a deadline ends only at shutdown"
        );
        record_exit(slot);
        return;
    }
    prefault_ring(&mut ring);
    let mut ctx = Context::new(
        group.cfg.buffer_bytes,
        group.index,
        idx,
        slot.priority,
        tid,
        group.registry(),
    );
    let _ = ready.send(Setup::Ready {
        rt_applied,
        error: rt_error,
    });
    drop(ready);

    // Time-shared: SCHED_OTHER by configuration, or RT refused in best-effort mode.
    let time_shared = slot.sched == Sched::Other || !rt_applied;
    let mut t = PoolThread {
        group: &group,
        idx,
        slot,
        ctx: &mut ctx,
        ring: &mut ring,
        dispatches: 0,
        time_shared,
    };
    if group.cfg.promotion == Promotion::Concurrent {
        t.run_concurrent();
    } else {
        t.run(time_shared);
    }
    record_exit(slot);
}

/// A pool thread's last counts, read by metrics after it is gone.
fn record_exit(slot: &ThreadSlot) {
    slot.faults_final.store(mem::thread_minor_faults(), Release);
    slot.allocs_now
        .store(alloc_count::thread_allocations(), Release);
}

/// One pool thread's loop state.
struct PoolThread<'a> {
    group: &'a Group,
    idx: u16,
    slot: &'a ThreadSlot,
    ctx: &'a mut Context,
    ring: &'a mut rtrb::Producer<Sample>,
    dispatches: u64,
    /// Runs time-shared (no RT priority to raise when lent, `borrow.rs`).
    time_shared: bool,
}

impl PoolThread<'_> {
    /// The Leader/Followers loop (activities 3–5). See the module docs for its real-time
    /// contract.
    fn run(&mut self, time_shared: bool) {
        let group = self.group;
        let c = &group.counters;
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
            // Leader: wait for one event on the handle set. ONESHOT disarms its handle.
            let (word, readiness) = match group.handles.wait() {
                Ok(Wait::Event { token, readiness }) => (Ok(token), readiness),
                Ok(Wait::Link { borrower }) => (Err(borrower), 0),
                Ok(Wait::BoundConnection) => unreachable!("only a bound pool's set"),
                Ok(Wait::Shutdown) => {
                    group.protocol.resign(self.idx);
                    continue;
                }
                Ok(Wait::Interrupted) => continue, // still the leader: join() returns Leader again
                Err(e) => {
                    self.epoll_failed(&e);
                    group.protocol.resign(self.idx);
                    continue;
                }
            };
            let woke_ns = sys::now_ns();
            // Promote before processing, so the handle set is never left without a leader
            // while there is a follower.
            match group.protocol.promote(self.idx) {
                Promoted::Follower(_) => Counters::add(&c.promotions, 1),
                Promoted::Vacant => {
                    Counters::add(&c.vacant, 1);
                    // Every thread of this lane is busy now: call the lenders (`borrow.rs`).
                    if let Some(b) = &group.borrow {
                        b.arm(group.handles.epoll_fd().as_raw_fd(), group.index);
                    }
                }
            }
            match word {
                Ok(token) => {
                    self.process(group, token, readiness, woke_ns);
                }
                Err(to) => self.lend(group, to, woke_ns),
            }
        }
    }

    /// The concurrent loop (module docs, *Concurrent mode*): wait, process, until shutdown.
    fn run_concurrent(&mut self) {
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
        tracing::error!(group = %self.group.cfg.name, error = %e, "epoll_wait failed; stopping the group");
        self.group.stop();
    }

    /// A lender's turn (module docs of `borrow.rs`): this thread (its own lane's promotion
    /// done) was woken by the link of lane `to`, which may have no idle thread. If so, and
    /// `max_borrowed` allows, it raises itself to that lane's priority, dispatches one of its
    /// events with that lane's handle set and its own [`Context`] (naming that lane while the
    /// handler runs), and restores itself. No allocation; in user space no lock but PI locks.
    ///
    /// `lender` is the lane whose epoll set reported the link: its own, or, when the event it
    /// took from a borrower's set is that borrower's own link to a lane higher still, the
    /// borrower it stands in for (it then lends on, as that lane's leader would).
    fn lend(&mut self, lender: &Group, to: u16, woke_ns: u64) {
        let Some(b) = lender
            .lends
            .get()
            .and_then(|l| l.iter().find(|g| g.index == to))
        else {
            return;
        };
        let (Some(borrow), Some(link)) = (
            &b.borrow,
            b.borrow.as_ref().and_then(|x| x.link_of(lender.index)),
        ) else {
            return;
        };
        // Before the look at its leader: a vacancy after that look arms the link again.
        borrow.gate.fired(link);
        if borrow.stopped.load(SeqCst) || b.protocol.snapshot().0 {
            return; // its own leader takes the event (or it is stopping)
        }
        if !borrow.gate.try_take() {
            // A borrowed thread is still to give back, and re-arms the link then.
            Counters::add(&b.counters.borrow_refused, 1);
            return;
        }
        if !self.time_shared {
            self.set_sched(borrow.sched, false);
        }
        match b.handles.wait_timeout(0) {
            Ok(Wait::Link { borrower }) => self.lend(b, borrower, woke_ns),
            Ok(Wait::Event { token, readiness }) => {
                let own = (self.ctx.group, self.ctx.thread, self.ctx.priority);
                let registry = std::mem::replace(&mut self.ctx.registry, b.registry());
                // An index no thread of `b` (nor any other lent thread) has: Context docs.
                let lent_index = (1 + u32::from(self.group.index)) * MAX_GROUP_THREADS as u32
                    + u32::from(self.idx);
                (self.ctx.group, self.ctx.thread, self.ctx.priority) =
                    (b.index, lent_index, b.cfg.priority);
                if self.process(b, token, readiness, woke_ns) {
                    Counters::add(&b.counters.borrowed, 1);
                    Counters::add(&self.group.counters.lent, 1);
                }
                self.ctx.registry = registry;
                (self.ctx.group, self.ctx.thread, self.ctx.priority) = own;
            }
            _ => {} // nothing ready any more, or the set is shutting down
        }
        if !self.time_shared {
            self.set_sched(self.slot.sched, true);
        }
        borrow.gate.give_back();
        if !borrow.stopped.load(SeqCst) && !b.protocol.snapshot().0 {
            borrow.arm(b.handles.epoll_fd().as_raw_fd(), b.index);
        }
    }

    /// Sets this thread's policy under its watchdog lock (a lent thread's raise, `restore`:
    /// its return to its own). A failure is exceptional (the privilege was taken away while
    /// running): logged, and counted if it was the return.
    fn set_sched(&self, s: Sched, restore: bool) {
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
            group = %self.group.cfg.name,
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
    fn process(
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
        slot.busy_since.store(0, SeqCst);
        slot.restore_if_demoted(self.group);
        let end_ns = sys::now_ns();
        self.group.counters.processing.fetch_sub(1, Relaxed);
        match outcome {
            Dispatched::Stale => return false,
            Dispatched::Panicked => {
                Counters::add(&c.panics, 1);
                // Exceptional path only (the panic itself already allocated and wrote to
                // stderr); normal dispatches never log.
                tracing::error!(
                    group = %group.cfg.name,
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

/// Writes every slot of the (empty) telemetry ring without committing them, so its pages are
/// resident before the first sample; the collector sees nothing of it.
fn prefault_ring(ring: &mut rtrb::Producer<Sample>) {
    let n = ring.slots();
    if let Ok(mut chunk) = ring.write_chunk_uninit(n) {
        let (a, b) = chunk.as_mut_slices();
        for slot in a.iter_mut().chain(b.iter_mut()) {
            slot.write(Sample::default());
        }
        // Dropping an uncommitted chunk publishes nothing.
    }
}
