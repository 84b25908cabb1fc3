//! The measured timer: a periodic timerfd handler that counts its own cycles and closes its
//! handle after the last one, so `-l N` yields exactly N samples per timer.

use lfrt::Timer;
use lfrt::{Context, Disposition, Event, EventHandler};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

/// What the harness sees of one timer while it runs.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Cycles handled so far (one per handler run that consumed an expiry).
    pub(crate) cycles: AtomicU64,
    /// The loop limit was reached and the handle closed.
    pub(crate) done: AtomicBool,
}

/// A periodic timer like [`lfrt::handlers::PeriodicTimer`] (origin = expected expiry,
/// missed_periods = expirations − 1), with a cycle limit.
///
/// # Real-time safety
/// `handle` is one nonblocking `read(2)`, two relaxed/release atomic stores, no allocation.
/// The last cycle returns [`Disposition::Close`], so the runtime records its sample and then
/// removes the handle: no event of this timer is dispatched after the limit.
#[derive(Debug)]
pub(crate) struct CyclicTimer {
    timer: Timer,
    /// Cycles to run; 0 = endless.
    limit: u64,
    cycles: u64,
    progress: Arc<Progress>,
}

impl CyclicTimer {
    pub(crate) fn new(timer: Timer, limit: u64, progress: Arc<Progress>) -> CyclicTimer {
        CyclicTimer {
            timer,
            limit,
            cycles: 0,
            progress,
        }
    }
}

impl EventHandler for CyclicTimer {
    fn source(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.timer.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        // Not expired (a spurious wake-up) or a read error: no cycle, and no origin, so the
        // runtime's sample does not count for this timer.
        let Ok(Some((expirations, due_ns))) = self.timer.read() else {
            return Disposition::Rearm;
        };
        ctx.set_origin_ns(due_ns);
        ctx.add_missed_periods(expirations - 1);
        self.cycles += 1;
        self.progress.cycles.store(self.cycles, Relaxed);
        if self.limit != 0 && self.cycles >= self.limit {
            self.progress.done.store(true, Release);
            return Disposition::Close;
        }
        Disposition::Rearm
    }
}
