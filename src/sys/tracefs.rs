//! The kernel's view of lfrt's threads: a private ftrace instance
//! (`/sys/kernel/tracing/instances/lfrt-PID`) recording scheduling, IRQ and timer events, read
//! back when a flight-recorder trigger fires.
//!
//! SKELETON: the types below are the contract the flight recorder and the trace writer use;
//! the instance itself is still to be written.

/// One event the kernel recorded in lfrt's ftrace instance. Times are `CLOCK_MONOTONIC`
/// nanoseconds (the instance's `trace_clock` is `mono`), the clock of every lfrt
/// timestamp, so they line up with a dispatch [`Sample`](crate::telemetry::Sample).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KernelEvent {
    /// When, in `CLOCK_MONOTONIC` ns.
    pub ts_ns: u64,
    /// The CPU the event happened on.
    pub cpu: u16,
    /// What happened.
    pub kind: KernelEventKind,
}

/// What a [`KernelEvent`] records (the fields the trace events carry that lfrt uses).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum KernelEventKind {
    /// `sched_switch`: `prev` stopped running on this CPU and `next` started.
    Switch {
        /// Thread id of the task that stopped.
        prev_tid: i32,
        /// Its command name.
        prev_comm: String,
        /// Its kernel priority (`prio`; SCHED_FIFO N shows as 99 - N).
        prev_prio: i32,
        /// Its state as ftrace prints it (`R`, `R+`, `S`, `D`, …): `R` means preempted.
        prev_state: String,
        /// Thread id of the task that started.
        next_tid: i32,
        /// Its command name.
        next_comm: String,
        /// Its kernel priority.
        next_prio: i32,
    },
    /// `sched_waking` (`woken = false`: the wake-up was asked for) or `sched_wakeup`
    /// (`woken = true`: the task is runnable on `target_cpu`).
    Wake {
        /// Thread id of the task woken.
        tid: i32,
        /// Its command name.
        comm: String,
        /// Its kernel priority.
        prio: i32,
        /// The CPU it will run on.
        target_cpu: u16,
        /// `sched_wakeup` rather than `sched_waking`.
        woken: bool,
    },
    /// `irq_handler_entry`.
    IrqEntry {
        /// IRQ number.
        irq: u32,
        /// Handler name.
        name: String,
    },
    /// `irq_handler_exit`.
    IrqExit {
        /// IRQ number.
        irq: u32,
    },
    /// `hrtimer_expire_entry`: an hrtimer's callback ran.
    HrtimerExpire {
        /// The callback's symbol.
        function: String,
    },
    /// `local_timer_entry`: the local APIC timer interrupt.
    LocalTimer,
}
