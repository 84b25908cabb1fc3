//! A flight-recorder window: what a trigger froze, as the trace writer and `lfrt explain`
//! read it.
//!
//! The recorder (`recorder.rs`, on the collector thread) builds a [`Window`] when a trigger
//! fires; the trace writer (`chrome.rs`) writes it as a Chrome trace with the window itself
//! under one key, which `read_window` reads back for `lfrt explain` and `lfrt plot`. Times are
//! `CLOCK_MONOTONIC` ns throughout, the clock of every [`Sample`] and, through the ftrace
//! instance's `mono` clock, of every [`KernelEvent`].

use super::sample::Sample;
pub use crate::sys::tracefs::{KernelEvent, KernelEventKind};

/// The frozen window around one trigger.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Window {
    /// What fired.
    pub trigger: Trigger,
    /// Start of the window, `CLOCK_MONOTONIC` ns.
    pub from_ns: u64,
    /// End of the window, `CLOCK_MONOTONIC` ns.
    pub to_ns: u64,
    /// The lanes and their threads, by lane index (a [`Sample`]'s lane).
    pub lanes: Vec<LaneInfo>,
    /// The dispatches of every lane that ended in the window, oldest first.
    pub samples: Vec<Sample>,
    /// Samples the recorder overwrote before they left the window (its ring was too small for
    /// the rate), per lane.
    pub overwritten: Vec<u64>,
    /// The kernel's events for the lanes' CPUs in the window, oldest first; empty unless the
    /// kernel recorder is on (`[trace] kernel = true`).
    pub kernel: Vec<KernelEvent>,
    /// Steal time the hypervisor took, summed over CPUs, in ns, if known (`/proc/stat`, in
    /// 10 ms ticks, over a span of up to 25 ms more than the window that covers it).
    pub steal_ns: Option<u64>,
}

/// What made the recorder write a window.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Trigger {
    /// The kind of trigger.
    pub kind: TriggerKind,
    /// When it fired, `CLOCK_MONOTONIC` ns (the sample's handler start for a latency or
    /// overrun trigger).
    pub at_ns: u64,
    /// The sample that fired it, for a latency or overrun trigger.
    pub sample: Option<Sample>,
}

/// The kinds of trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TriggerKind {
    /// A dispatch's latency exceeded the lane's `trace_over_us` (`lfrt cyclic -b`).
    Latency {
        /// The threshold, ns.
        threshold_ns: u64,
    },
    /// A handler ran past the lane's `budget_us`.
    Overrun {
        /// The budget, ns.
        budget_ns: u64,
    },
    /// Asked for: a signal or a request to the metrics endpoint.
    Demand,
}

/// A lane as the window names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LaneInfo {
    /// The lane's name.
    pub name: String,
    /// Its scheduling policy (`fifo`, `rr`, `other`).
    pub policy: String,
    /// Its priority (SCHED_FIFO/RR 1–99; the nice value for `other`).
    pub priority: i32,
    /// Its threads, by thread index (a [`Sample`]'s thread).
    pub threads: Vec<ThreadInfo>,
}

/// One lane thread.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ThreadInfo {
    /// Kernel thread id.
    pub tid: i32,
    /// The CPUs it may run on.
    pub cpus: Vec<u16>,
}
