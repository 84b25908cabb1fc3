//! Per-group counters (updated on the dispatch path with relaxed atomics) and their snapshot.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) dispatched: AtomicU64,
    pub(crate) promotions: AtomicU64,
    pub(crate) vacant: AtomicU64,
    pub(crate) processing: AtomicU64,
    pub(crate) panics: AtomicU64,
    pub(crate) closed_by_handler: AtomicU64,
    pub(crate) budget_overruns: AtomicU64,
    pub(crate) demotions: AtomicU64,
    pub(crate) restore_failures: AtomicU64,
}

impl Counters {
    #[inline]
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
}

/// A snapshot of one group's activity.
///
/// Counters only grow; gauges (`leader_present`, `followers`, `processing`) are a racy
/// instant and may have changed by the time they are read.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GroupMetrics {
    /// Group name.
    pub name: String,
    /// Group priority.
    pub priority: u8,
    /// Threads in the pool.
    pub threads: usize,
    /// Events dispatched to handlers (stale events not included).
    pub dispatched: u64,
    /// Times a leader handed leadership to a waiting follower.
    pub promotions: u64,
    /// Times a leader found no follower to promote (the slot stayed vacant).
    pub promotions_no_follower: u64,
    /// A leader is waiting on the handle set right now.
    pub leader_present: bool,
    /// Followers parked right now.
    pub followers: usize,
    /// Threads running a handler right now.
    pub processing: u64,
    /// Handler panics caught.
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
    /// Threads demoted to SCHED_OTHER by the watchdog.
    pub demotions: u64,
    /// Times a demoted thread could not restore its own policy after its handler returned (it
    /// then stays time-shared; each failure is also logged).
    pub restore_failures: u64,
    /// Allocations on this group's pool threads after warm-up: the sum, over the threads that
    /// have made [`WARMUP_DISPATCHES`](crate::WARMUP_DISPATCHES) dispatches, of their
    /// allocations since that dispatch. `None` (JSON `null`) means *not measured*: no thread
    /// of the group has reached warm-up yet, or [`crate::CountingAlloc`] is not the global
    /// allocator. So `Some(0)` is always a measured zero.
    pub pool_allocations: Option<u64>,
    /// Minor page faults on this group's pool threads after warm-up: the sum over the threads
    /// that have reached warm-up, as for `pool_allocations`. `None` (JSON `null`) when no
    /// thread of the group has reached warm-up yet. A thread that died without recording its
    /// final count is left out.
    pub pool_minor_faults: Option<u64>,
    /// Telemetry samples pushed by the pool threads.
    pub samples: u64,
    /// Telemetry samples dropped because a ring was full.
    pub samples_dropped: u64,
}
