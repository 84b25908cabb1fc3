//! Per-lane counters (updated on the dispatch path with relaxed atomics) and their snapshot.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) dispatched: AtomicU64,
    pub(crate) promotions: AtomicU64,
    pub(crate) vacant: AtomicU64,
    /// Events a leader processed keeping its role (deferred promotion).
    pub(crate) kept: AtomicU64,
    pub(crate) processing: AtomicU64,
    pub(crate) panics: AtomicU64,
    pub(crate) closed_by_handler: AtomicU64,
    pub(crate) budget_overruns: AtomicU64,
    /// Overruns by the cause the watchdog measured, in the order of its causes
    /// (`engine::overrun::Cause::ALL`: handler, preempted, hypervisor, blocked, unknown).
    pub(crate) overrun_causes: [AtomicU64; 5],
    pub(crate) demotions: AtomicU64,
    pub(crate) restore_failures: AtomicU64,
    /// A lent thread's raise to a borrower's priority refused by the kernel, and whether that
    /// was said once (logged) already.
    pub(crate) raise_failures: AtomicU64,
    pub(crate) raise_failure_said: std::sync::atomic::AtomicBool,
    /// Lane borrowing (`borrow.rs`): events of this lane dispatched by lent threads, events of
    /// other lanes this lane's threads dispatched, lenders turned away by `max_borrowed`.
    pub(crate) borrowed: AtomicU64,
    pub(crate) lent: AtomicU64,
    pub(crate) borrow_refused: AtomicU64,
    /// Foreign wakes (a tokio task's, a thread's) this lane's threads handed to the runtime's
    /// relay, and those they woke themselves because its queue was full (`task/relay.rs`).
    pub(crate) relayed: AtomicU64,
    pub(crate) relay_full: AtomicU64,
}

impl Counters {
    #[inline]
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
}

/// A snapshot of one lane's activity.
///
/// Counters only grow; gauges (`leader_present`, `followers`, `processing`) are a racy
/// instant and may have changed by the time they are read.
///
/// # Examples
/// ```
/// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
/// let mut rt = Runtime::new(RuntimeConfig::default())?;
/// rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
/// for m in rt.metrics() {
///     println!(
///         "{} prio {}: {} dispatched, {} panics, allocations after warm-up: {:?}",
///         m.name, m.priority, m.dispatched, m.handler_panics, m.pool_allocations
///     );
/// }
/// # Ok::<(), lfrt::Error>(())
/// ```
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LaneMetrics {
    /// Lane name.
    pub name: String,
    /// Lane priority (as configured).
    pub priority: u8,
    /// Each pool thread's policy as the kernel reported it after set-up: `fifo 80`, `rr 10`,
    /// or `other nice 5` (a best-effort lane refused its RT priority runs time-shared, ordered
    /// against the other lanes only by its nice value), `not started` before `start`.
    pub kernel_sched: Vec<String>,
    /// Threads in the pool.
    pub threads: usize,
    /// Events dispatched to handlers (stale events not included).
    pub dispatched: u64,
    /// Times a leader handed leadership to a waiting follower.
    pub promotions: u64,
    /// Times a leader found no follower to promote (the slot stayed vacant).
    pub promotions_no_follower: u64,
    /// Events a leader processed keeping its role (deferred promotion: its wait drained the
    /// handle set and the handlers' recent runs took less than `promote_after_us` in all), so
    /// that no follower was woken (`promotion = "priority"`, `"lifo"`, `"fifo"`).
    pub promotions_deferred: u64,
    /// Times the watchdog handed a kept role to a follower because the leader had kept it
    /// for `promote_after_us` or longer (its handler ran far longer than it had before).
    pub deferred_takeovers: u64,
    /// Events a leader could not leave in its batch. Always 0: a leader waits only with an
    /// empty batch, for at most as many events as it holds; counted so that a broken
    /// invariant is seen, never silent.
    pub batch_overflow: u64,
    /// Readiness reports of a handle while another thread held its dispatch: folded into one
    /// more run of its handler (handles are edge-triggered; each report leads to a run that
    /// starts after it).
    pub coalesced_reports: u64,
    /// Handles kept after their handler with a readiness re-check (`epoll_ctl`): the handler
    /// did not say it drained its source ([`Context::set_drained`](crate::Context::set_drained)),
    /// changed its interest, or was reported again after its last run. 0 per event is what a
    /// handler that drains costs.
    pub rearm_checks: u64,
    /// A leader is waiting on the handle set right now.
    pub leader_present: bool,
    /// Followers parked right now.
    pub followers: usize,
    /// Threads running a handler right now.
    pub processing: u64,
    /// Panics caught in handlers (`handle`, `after_panic`, `interest`, or a handler's `Drop`);
    /// the pool thread survives each.
    pub handler_panics: u64,
    /// Handles removed for any reason: their handler returned `Close`, re-arming failed, or
    /// they were deregistered.
    pub handles_closed: u64,
    /// Of those, handles whose handler returned [`Disposition::Close`](crate::Disposition).
    pub handles_closed_by_handler: u64,
    /// Events whose handle had been removed before dispatch (dropped, by design).
    pub stale_events: u64,
    /// Handles registered now.
    pub handles: usize,
    /// Handler runs that exceeded `budget_us` (overrun watchdog). Not to be confused with a
    /// timer's missed periods, which the harnesses report as `missed_periods`.
    pub budget_overruns: u64,
    /// The same overruns by their cause: whether the handler ran, or waited, and for what.
    /// Each is counted when it is reported (when its dispatch ends, or 10 ms after it overran;
    /// at the latest at shutdown), so for a moment the causes may add up to fewer.
    pub overrun_causes: OverrunCauses,
    /// Threads demoted to SCHED_OTHER by the watchdog.
    pub demotions: u64,
    /// Times a demoted thread could not restore its own policy after its handler returned (it
    /// then stays time-shared), or a thread lent to a higher lane could not take back its own
    /// priority (it then keeps the higher one); each failure is also logged.
    pub restore_failures: u64,
    /// Lent dispatches of this lane's threads whose raise to the borrower's priority the kernel
    /// refused (`EPERM`: the privilege was taken away after validation); the handler then ran
    /// at this lane's priority. The first is logged, the rest only counted.
    pub raise_failures: u64,
    /// Events of this lane dispatched by a thread lent from a lower lane (`borrow_from`); also
    /// counted in `dispatched`.
    pub borrowed_dispatches: u64,
    /// Events of higher lanes that this lane's threads dispatched while lent to them (not
    /// counted in this lane's `dispatched`).
    pub lent_dispatches: u64,
    /// Times a lender found this lane busy but `max_borrowed` threads already lent to it.
    pub borrow_refused: u64,
    /// Wakes of another runtime's wakers (a tokio task awaiting a reply, a `JoinHandle` or a
    /// place in a channel) that this lane's threads handed to the runtime's relay thread, so
    /// that no lane thread takes another runtime's lock.
    pub relayed_wakes: u64,
    /// Of those, wakes the lane's thread made itself because the relay's queue was full (it
    /// then took the foreign runtime's lock: the one exception, counted).
    pub relay_full: u64,
    /// Allocations on this lane's pool threads after warm-up: the sum, over the threads that
    /// have made [`WARMUP_DISPATCHES`](crate::WARMUP_DISPATCHES) dispatches, of their
    /// allocations since that dispatch. `None` (JSON `null`) means *not measured*: no thread
    /// of the lane has reached warm-up yet, or [`crate::CountingAlloc`] is not the global
    /// allocator. So `Some(0)` is always a measured zero.
    pub pool_allocations: Option<u64>,
    /// Minor page faults on this lane's pool threads after warm-up: the sum over the threads
    /// that have reached warm-up, as for `pool_allocations`. `None` (JSON `null`) when no
    /// thread of the lane has reached warm-up yet. A thread that died without recording its
    /// final count is left out.
    pub pool_minor_faults: Option<u64>,
    /// Telemetry samples pushed by the pool threads.
    pub samples: u64,
    /// Telemetry samples dropped because a ring was full.
    pub samples_dropped: u64,

    // Failure paths that handlers report through [`Context::count`](crate::Context::count).
    /// Episodes in which a TCP listener could not accept because the process or the system ran
    /// out of file descriptors or memory (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`). The built-in
    /// listener then pauses and retries every 10 ms; connections wait in the kernel's backlog.
    /// An episode lasts from the first failed `accept` until the listener has drained its
    /// backlog.
    pub accept_exhausted: u64,
    /// Accepted connections closed at once, unserved: the lane's handle table was full (raise
    /// `max_handles`), a [`stream::Framed`](crate::sources::stream::Framed) connection table was full
    /// (raise `Limits::max_connections`), the socket could not be set up, or epoll refused the
    /// fd. The log line names which.
    pub connections_refused: u64,
    /// Datagrams dropped because they were longer than a slot (`buffer_bytes`).
    pub datagrams_truncated: u64,
    /// Values a full lane inbox of this lane handed back to their senders
    /// ([`Inbox`](crate::sources::inbox::Inbox)), counted when the inbox next drains.
    pub inbox_refused: u64,
    /// Stream connections ([`stream::Framed`](crate::sources::stream::Framed)) closed because the peer
    /// sent a frame longer than `max_frame`.
    pub frames_oversize: u64,
    /// Stream connections closed abnormally: reset by the peer (`ECONNRESET`, `EPIPE`), another
    /// socket error, or the peer's end of stream in the middle of a frame.
    pub connections_reset: u64,
    /// Back-pressure episodes: times a stream connection stopped reading because the socket
    /// would not take its pending replies; it reads again once they drained.
    pub stream_backpressure: u64,
    /// Stream connections closed because the peer sent nothing for `Limits::idle_timeout`
    /// while no reply was pending.
    pub stream_idle_timeouts: u64,
    /// Stream connections closed because their pending replies made no progress for
    /// `Limits::write_timeout` (the peer stopped reading).
    pub stream_write_timeouts: u64,
    /// A bound lane's pool counters (replies, hand-offs, late and unknown frames, …); `None`
    /// for a Leader/Followers lane. For a bound lane `dispatched`, `promotions`,
    /// `promotions_no_follower`, `leader_present`, `followers` and `handler_panics` are the
    /// pool's; `processing`, the watchdog's counters, telemetry samples and the post-warm-up
    /// allocation and fault counts are not measured on its threads (0 / `None`).
    pub bound: Option<BoundStats>,
    /// The lane's async task counters (`lfrt::task`: spawns, completions, panics,
    /// cancellations, refusals); `None` for a lane without a task table (`max_tasks = 0`).
    pub tasks: Option<TaskStats>,
}

/// A lane's overruns by the cause the watchdog measured ([`LaneMetrics::overrun_causes`]):
/// over the part of each overrunning dispatch it watched, where most of the time went
/// (docs/operations.md, "Reading an overrun report").
///
/// # Examples
/// ```
/// # use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
/// let mut rt = Runtime::new(RuntimeConfig::default())?;
/// rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
/// let c = rt.metrics()[0].overrun_causes;
/// println!("{} overruns were the handler's own, {} the VM's", c.handler, c.hypervisor);
/// # Ok::<(), lfrt::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct OverrunCauses {
    /// The handler ran: its thread was on a CPU for most of the span.
    pub handler: u64,
    /// It waited on a runqueue for a CPU another thread held (a higher lane's, another
    /// process's).
    pub preempted: u64,
    /// The hypervisor took the CPU (steal time): the VM's doing, not the handler's.
    pub hypervisor: u64,
    /// It slept, off the CPU: a blocking call in the handler.
    pub blocked: u64,
    /// Nothing could be measured: the watchdog saw the dispatch running at one look only
    /// before it ended, or the thread's `/proc` files could not be read.
    pub unknown: u64,
}

impl OverrunCauses {
    /// From the counters, in the order of `engine::overrun::Cause::ALL`.
    pub(crate) fn of(c: &[AtomicU64; 5]) -> OverrunCauses {
        let [handler, preempted, hypervisor, blocked, unknown] =
            c.each_ref().map(|a| a.load(Relaxed));
        OverrunCauses {
            handler,
            preempted,
            hypervisor,
            blocked,
            unknown,
        }
    }
}

impl LaneMetrics {
    /// The sum of measured pool hygiene counters ([`pool_allocations`](Self::pool_allocations),
    /// [`pool_minor_faults`](Self::pool_minor_faults)) over threads or lanes, saturating;
    /// `None` if none was measured, so that a sum of `Some(0)` is, like each of them, a
    /// measured zero. The runtime sums its threads with it, and the tools sum lanes and runs.
    ///
    /// # Examples
    /// ```
    /// use lfrt::LaneMetrics;
    /// assert_eq!(LaneMetrics::sum_measured([Some(2), None, Some(3)]), Some(5));
    /// assert_eq!(LaneMetrics::sum_measured([None, None]), None);
    /// ```
    pub fn sum_measured(values: impl IntoIterator<Item = Option<u64>>) -> Option<u64> {
        values.into_iter().flatten().reduce(u64::saturating_add)
    }
}

/// Counters of a lane's task table (`lfrt::task`); they only grow. In
/// [`LaneMetrics::tasks`], and from the lane's spawner (`Spawner::stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TaskStats {
    /// Tasks accepted by `spawn`.
    pub spawned: u64,
    /// Tasks whose future returned `Ready`.
    pub completed: u64,
    /// Tasks whose future panicked (each slot was freed, other tasks ran on).
    pub panicked: u64,
    /// Tasks dropped unfinished: cancelled through their handle, or at shutdown.
    pub cancelled: u64,
    /// `spawn` calls refused because every slot was taken.
    pub refused_full: u64,
    /// `spawn` calls refused because the future did not fit a slot.
    pub refused_too_large: u64,
    /// Polls made.
    pub polls: u64,
    /// Executor turns run (events of the lane's task doorbell).
    pub turns: u64,
    /// Waits on the lane's timer refused because every timer entry of the lane was armed
    /// (`max_tasks × TIMERS_PER_TASK`); the future tried again at the lane's next turn.
    pub timers_full: u64,
}

/// A failure that a handler counts in its lane's metrics with [`Context::count`](crate::Context::count): work
/// dropped or deferred that would otherwise go unseen. Each variant names the
/// [`LaneMetrics`] field that counts it.
///
/// [`LaneMetrics`]: crate::LaneMetrics
///
/// Example: [`Context`](crate::Context) counts one from a handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Incident {
    /// A listener could not accept for lack of file descriptors or memory and paused: count
    /// one per episode (`accept_exhausted`).
    AcceptExhausted,
    /// An accepted connection was closed unserved, e.g. because the handle table was full
    /// (`connections_refused`).
    ConnectionRefused,
    /// A datagram longer than its slot was dropped (`datagrams_truncated`).
    DatagramTruncated,
    /// A lane inbox was full and handed a value back to its sender (`inbox_refused`).
    InboxRefused,
    /// A stream connection was closed because its peer sent a frame above the bound
    /// (`frames_oversize`).
    FrameOversize,
    /// A stream connection was closed abnormally: reset, socket error, or end of stream inside
    /// a frame (`connections_reset`).
    ConnectionReset,
    /// A stream connection stopped reading until its pending output drained
    /// (`stream_backpressure`).
    StreamBackpressure,
    /// A stream connection was idle for its idle timeout and was closed
    /// (`stream_idle_timeouts`).
    StreamIdleTimeout,
    /// A stream connection's pending output made no progress for its write timeout and it was
    /// closed (`stream_write_timeouts`).
    StreamWriteTimeout,
}

/// The counters behind [`Incident`]: kept in each handle set (a lane's, or a bound pool's),
/// where every handler's [`Context`](crate::Context) reaches them through its registry.
#[derive(Debug, Default)]
pub(crate) struct IncidentCounters {
    pub(crate) accept_exhausted: AtomicU64,
    pub(crate) connections_refused: AtomicU64,
    pub(crate) datagrams_truncated: AtomicU64,
    pub(crate) inbox_refused: AtomicU64,
    pub(crate) frames_oversize: AtomicU64,
    pub(crate) connections_reset: AtomicU64,
    pub(crate) stream_backpressure: AtomicU64,
    pub(crate) stream_idle_timeouts: AtomicU64,
    pub(crate) stream_write_timeouts: AtomicU64,
}

impl IncidentCounters {
    /// Adds `n` to the counter of `what`; returns the new total.
    #[inline]
    pub(crate) fn add(&self, what: Incident, n: u64) -> u64 {
        let c = match what {
            Incident::AcceptExhausted => &self.accept_exhausted,
            Incident::ConnectionRefused => &self.connections_refused,
            Incident::DatagramTruncated => &self.datagrams_truncated,
            Incident::InboxRefused => &self.inbox_refused,
            Incident::FrameOversize => &self.frames_oversize,
            Incident::ConnectionReset => &self.connections_reset,
            Incident::StreamBackpressure => &self.stream_backpressure,
            Incident::StreamIdleTimeout => &self.stream_idle_timeouts,
            Incident::StreamWriteTimeout => &self.stream_write_timeouts,
        };
        c.fetch_add(n, Relaxed).wrapping_add(n)
    }
}

/// Counters of a bound pool ([`bound::BoundPool`](crate::bound::BoundPool); they only grow).
/// Defined here, beside the other counters, so that observation depends on no pool type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BoundStats {
    /// Replies delivered to their waiters.
    pub replies: u64,
    /// Of those, replies the leader read for another thread (hand-offs).
    pub handoffs: u64,
    /// Of those, replies the leader read for itself.
    pub own: u64,
    /// Reply frames with an id the pool never issued (dropped).
    pub unknown: u64,
    /// Reply frames for requests no longer expected: timed out, cancelled, or duplicates
    /// (dropped).
    pub late: u64,
    /// Times a leader handed the role to a follower.
    pub promotions: u64,
    /// Times a leader left with no follower to promote.
    pub vacant: u64,
    /// `join`/`serve` calls that returned because their deadline passed.
    pub timeouts: u64,
    /// Unbound events processed by threads inside `join` (hybrid).
    pub inline: u64,
    /// Unbound events a leader deferred because its thread was nested too deeply.
    pub deferred: u64,
    /// Unbound events dispatched to their handlers (by threads in `serve` or inline in
    /// `join`; stale events not included).
    pub dispatched: u64,
    /// Of those, dispatches whose handler panicked (caught; the thread goes on).
    pub panics: u64,
}
