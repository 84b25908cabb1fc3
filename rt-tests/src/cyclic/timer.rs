//! The measured timer: a periodic timerfd handler that measures its own latency and records
//! it, on the thread that handles the expiry, into histograms allocated before the run; it
//! counts its own cycles and closes its handle after the last one, so `-l N` yields exactly N
//! samples per timer.
//!
//! No sample goes through the runtime's telemetry ring, which drops samples when its
//! collector falls behind (at 256 k events/s it kept 15 %). Every cycle is recorded.

use super::hist::{self, AtomicHistogram};
use lfrt::Timer;
use lfrt::{Context, Disposition, Event, EventHandler};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::*};
use std::sync::Arc;

/// The three latency components of [`TimerStats`], as histograms.
#[derive(Debug)]
pub(crate) struct Histograms {
    /// Expected expiry → handler entry.
    pub(crate) latency: AtomicHistogram,
    /// Expected expiry → leader awake.
    pub(crate) wake: AtomicHistogram,
    /// Leader awake → handler entry.
    pub(crate) dispatch: AtomicHistogram,
}

impl Histograms {
    /// Allocated and touched now (about 600 KiB).
    pub(crate) fn new() -> Histograms {
        Histograms {
            latency: AtomicHistogram::new(),
            wake: AtomicHistogram::new(),
            dispatch: AtomicHistogram::new(),
        }
    }
}

/// What one timer has measured. Its handler is the only writer (whichever pool thread runs
/// it: the runtime runs one handle on one thread at a time and orders successive runs);
/// the harness reads it live for the status lines and finally after the runtime's shutdown,
/// when every pool thread has been joined and the values are exact.
#[derive(Debug)]
pub(crate) struct TimerStats {
    /// Cycles run: handler runs that consumed an expiry (cyclictest's `cycles`: loops run).
    pub(crate) cycles: AtomicU64,
    /// The loop limit was reached and the handle closed.
    pub(crate) done: AtomicBool,
    /// Smallest, largest and summed latency (ns), and that of the latest cycle.
    pub(crate) min_ns: AtomicU64,
    pub(crate) max_ns: AtomicU64,
    pub(crate) sum_ns: AtomicU64,
    pub(crate) last_ns: AtomicU64,
    /// Expirations beyond the first per cycle.
    pub(crate) missed_periods: AtomicU64,
    /// Kernel tid of the pool thread that ran the latest cycle (0 before the first).
    pub(crate) last_tid: AtomicI32,
    /// Where the latency, wake and dispatch values go: the timer's own histograms, or, for
    /// timers beyond [`super::MAX_TIMER_HISTOGRAMS`], its lane's shared ones.
    pub(crate) histograms: Arc<Histograms>,
    /// Whether `histograms` are this timer's own.
    pub(crate) own_histograms: bool,
}

impl TimerStats {
    pub(crate) fn new(histograms: Arc<Histograms>, own_histograms: bool) -> TimerStats {
        TimerStats {
            cycles: AtomicU64::new(0),
            done: AtomicBool::new(false),
            min_ns: AtomicU64::new(u64::MAX),
            max_ns: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
            missed_periods: AtomicU64::new(0),
            last_tid: AtomicI32::new(0),
            histograms,
            own_histograms,
        }
    }

    /// The status-line figures so far (ns; min and max as the histograms report them).
    pub(crate) fn snapshot(&self) -> Snapshot {
        let cycles = self.cycles.load(Relaxed);
        if cycles == 0 {
            return Snapshot::default();
        }
        Snapshot {
            cycles,
            tid: self.last_tid.load(Relaxed),
            min_ns: hist::median_equivalent(self.min_ns.load(Relaxed)),
            act_ns: self.last_ns.load(Relaxed),
            avg_ns: self.sum_ns.load(Relaxed) as f64 / cycles as f64,
            max_ns: hist::median_equivalent(self.max_ns.load(Relaxed)),
        }
    }
}

/// A consistent-enough view of [`TimerStats`] for one status line.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Snapshot {
    pub(crate) cycles: u64,
    pub(crate) tid: i32,
    pub(crate) min_ns: u64,
    pub(crate) act_ns: u64,
    pub(crate) avg_ns: f64,
    pub(crate) max_ns: u64,
}

/// A periodic timer like [`lfrt::handlers::PeriodicTimer`] (missed_periods = expirations − 1),
/// with a cycle limit, that records its own latency.
///
/// # Real-time safety
/// `handle` is two clock reads (vDSO), one nonblocking `read(2)`, three relaxed `fetch_add`s
/// on preallocated, resident counters and a few relaxed stores: no allocation, no lock. The
/// last cycle returns [`Disposition::Close`], so no event of this timer is dispatched after
/// the limit.
#[derive(Debug)]
pub(crate) struct CyclicTimer {
    timer: Timer,
    /// Cycles to run; 0 = endless.
    limit: u64,
    /// Private copies of the published figures (this handler is their only writer).
    cycles: u64,
    min_ns: u64,
    max_ns: u64,
    sum_ns: u64,
    missed_periods: u64,
    stats: Arc<TimerStats>,
}

impl CyclicTimer {
    pub(crate) fn new(timer: Timer, limit: u64, stats: Arc<TimerStats>) -> CyclicTimer {
        CyclicTimer {
            timer,
            limit,
            cycles: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            sum_ns: 0,
            missed_periods: 0,
            stats,
        }
    }
}

impl EventHandler for CyclicTimer {
    fn source(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.timer.as_fd()
    }

    fn handle(&mut self, event: &Event, ctx: &mut Context) -> Disposition {
        // Handler entry, before the read: the analogue of cyclictest's `now`.
        let entry_ns = lfrt::os::now_ns();
        // Not expired (a spurious wake-up) or a read error: no cycle.
        let read = self.timer.read();
        // One read empties a timerfd: the handle needs no re-check (no epoll_ctl per cycle).
        ctx.set_drained();
        let Ok(Some((expirations, due_ns))) = read else {
            return Disposition::Rearm;
        };
        let woke_ns = event.woke_ns();
        // The runtime's sample measures from the due time too (the flight recorder's -b
        // trigger and `lfrt explain` read it).
        ctx.set_origin_ns(due_ns);
        let latency = entry_ns.saturating_sub(due_ns);
        let h = &self.stats.histograms;
        h.latency.record(latency);
        h.wake.record(woke_ns.saturating_sub(due_ns));
        h.dispatch.record(entry_ns.saturating_sub(woke_ns));
        // The runtime's own telemetry keeps its overrun count; lfrt cyclic reads its own.
        ctx.add_missed_periods(expirations - 1);

        self.cycles += 1;
        self.min_ns = self.min_ns.min(latency.max(1));
        self.max_ns = self.max_ns.max(latency.max(1));
        self.sum_ns = self.sum_ns.saturating_add(latency);
        self.missed_periods += expirations - 1;
        let s = &self.stats;
        s.min_ns.store(self.min_ns, Relaxed);
        s.max_ns.store(self.max_ns, Relaxed);
        s.sum_ns.store(self.sum_ns, Relaxed);
        s.last_ns.store(latency, Relaxed);
        s.missed_periods.store(self.missed_periods, Relaxed);
        s.last_tid.store(ctx.tid(), Relaxed);
        s.cycles.store(self.cycles, Relaxed);
        if self.limit != 0 && self.cycles >= self.limit {
            s.done.store(true, Release);
            return Disposition::Close;
        }
        Disposition::Rearm
    }
}
