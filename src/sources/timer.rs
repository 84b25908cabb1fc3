//! Callback timers: a closure run on a lane's pool thread at each expiry of a timerfd, periodic
//! or one-shot, armed, re-armed and cancelled from any thread.
//!
//! ```text
//!  any thread                     the lane's pool (ONESHOT: one run at a time)
//!  ──────────                     ─────────────────────────────────────────────
//!  TimerControl::arm/cancel ─┐    CallbackTimer::handle
//!        lock ───────────────┼──▶   lock ── read(timerfd) = n ── callback(event, ctx) ── unlock
//!        timerfd_settime ────┘      (n − 1 missed periods reported)
//! ```
//!
//! # The guarantee of `cancel`
//! The timerfd and its schedule change only under the timer's lock (a priority-inheriting
//! [`PiMutex`]), and the handler holds the same lock from reading the expiration count until
//! its callback returns. So when [`TimerControl::cancel`] returns, no callback of this timer is
//! running and none will run until it is armed again: a callback already running when `cancel`
//! was called finished first (`cancel` waited for it), and `timerfd_settime` reset the
//! expiration count, so an event already detected finds nothing to read. Called from the
//! timer's own callback, `cancel` (and `arm_*`) takes effect at once without waiting for itself.
//!
//! # Real-time contract
//! Everything is allocated by [`CallbackTimer::periodic`] / [`CallbackTimer::one_shot`]. A
//! dispatch is one PI lock, one nonblocking `read(2)` and the callback: no allocation. Control
//! calls are one PI lock and one `timerfd_settime(2)`.

use crate::engine::handler::{Context, Disposition, Event, EventHandler};
use crate::sync::pi_mutex::PiMutex;
use crate::sys::{self, fd::TimerFd};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// When a timer first expires.
///
/// # Examples
/// ```
/// use lfrt::timer::{CallbackTimer, Expiry};
/// use std::time::Duration;
/// let soon = Expiry::After(Duration::from_millis(5)); // relative to the arming call
/// // An absolute CLOCK_MONOTONIC instant:
/// let at = Expiry::At(lfrt::task::time::now_ns() + 5_000_000);
/// let (timer, control) = CallbackTimer::one_shot(soon, |_ev, _ctx| {})?;
/// control.arm_once(at)?;
/// # drop(timer);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// This long after the call that arms it.
    After(Duration),
    /// At this `CLOCK_MONOTONIC` instant, in ns (see
    /// [`task::time::now_ns`](crate::task::time::now_ns)).
    At(u64),
}

impl Expiry {
    fn absolute_ns(self) -> u64 {
        match self {
            // A delay beyond u64 ns saturates (`as u64` would wrap it to a short one).
            Expiry::After(d) => {
                sys::now_ns().saturating_add(sys::duration_ns(d).unwrap_or(u64::MAX))
            }
            // 0 would disarm the timerfd; the earliest instant is 1 ns.
            Expiry::At(ns) => ns.max(1),
        }
    }
}

/// One expiry as the callback sees it.
///
/// # Examples
/// ```
/// use lfrt::timer::{CallbackTimer, Expiry, TimerEvent};
/// use std::time::Duration;
/// let (timer, _control) = CallbackTimer::periodic(
///     Expiry::After(Duration::from_millis(1)),
///     Duration::from_millis(1),
///     |ev: &TimerEvent, _ctx| {
///         let late_ns = lfrt::task::time::now_ns().saturating_sub(ev.due_ns);
///         if ev.missed > 0 { /* the lane was busy for `missed` whole periods */ }
///         let _ = late_ns;
///     },
/// )?;
/// # drop(timer);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerEvent {
    /// When the first expiry reported by this event was due (`CLOCK_MONOTONIC` ns).
    pub due_ns: u64,
    /// Periods that expired with no callback of their own (timerfd expirations − 1): the lane
    /// was busy for that long. Also added to the event's [`Context::add_missed_periods`].
    pub missed: u64,
}

struct Shared {
    fd: TimerFd,
    /// Held while the schedule changes and while the handler reads and runs its callback.
    lock: PiMutex<()>,
    /// The next due instant and the period (0: one-shot); changed only by the lock's holder.
    next_ns: AtomicU64,
    interval_ns: AtomicU64,
}

impl Shared {
    /// Arms (or with `first_ns == 0`, disarms) the timer; the caller owns the lock.
    fn set(&self, first_ns: u64, interval_ns: u64) -> io::Result<()> {
        self.fd.set_abs(first_ns, interval_ns)?;
        self.next_ns.store(first_ns, Relaxed);
        self.interval_ns.store(interval_ns, Relaxed);
        Ok(())
    }

    /// Runs `f` owning the lock: takes it, or runs at once if this thread already holds it
    /// (it is the timer's own callback, the only code that runs under it).
    fn locked<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.lock.lock_unless_held();
        f()
    }
}

/// Arms, re-arms and cancels a [`CallbackTimer`] from any thread. Cheap to clone.
///
/// # Examples
/// ```
/// use lfrt::timer::{CallbackTimer, Expiry};
/// use std::time::Duration;
/// let (timer, control) = CallbackTimer::one_shot(Expiry::After(Duration::from_secs(60)), |_ev, _ctx| {})?;
/// control.cancel()?;                                          // from any thread
/// control.arm_periodic(Expiry::After(Duration::from_millis(1)), Duration::from_millis(1))?;
/// # drop(timer);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct TimerControl {
    shared: Arc<Shared>,
}

impl fmt::Debug for TimerControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("TimerControl { .. }")
    }
}

impl TimerControl {
    /// Re-arms the timer to expire at `first`, then every `period`. Expirations not yet
    /// delivered are forgotten.
    ///
    /// # Errors
    /// `InvalidInput` for a zero period or one of 2^64 ns or more; `timerfd_settime`'s error.
    pub fn arm_periodic(&self, first: Expiry, period: Duration) -> io::Result<()> {
        let Some(interval) = sys::duration_ns(period).filter(|&ns| ns > 0) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a periodic timer needs a period of 1 ns to 2^64 - 1 ns, not {period:?}"),
            ));
        };
        self.shared
            .locked(|| self.shared.set(first.absolute_ns(), interval))
    }

    /// Re-arms the timer to expire once, at `at`. Expirations not yet delivered are forgotten.
    ///
    /// # Errors
    /// `timerfd_settime`'s error.
    pub fn arm_once(&self, at: Expiry) -> io::Result<()> {
        self.shared.locked(|| self.shared.set(at.absolute_ns(), 0))
    }

    /// Disarms the timer. When this returns no callback of the timer is running (unless it is
    /// called from that callback) and none runs until it is armed again (module docs).
    ///
    /// # Errors
    /// `timerfd_settime`'s error.
    pub fn cancel(&self) -> io::Result<()> {
        self.shared.locked(|| self.shared.set(0, 0))
    }
}

/// An [`EventHandler`] running a closure at each expiry of a `CLOCK_MONOTONIC` timer. Register
/// it with a lane's [`Registry`](crate::Registry); control it with the [`TimerControl`]
/// returned beside it.
///
/// # Examples
/// ```
/// use lfrt::timer::{CallbackTimer, Expiry};
/// use std::time::Duration;
/// let (timer, control) = CallbackTimer::periodic(
///     Expiry::After(Duration::from_millis(1)),
///     Duration::from_millis(1),
///     |ev, _ctx| {
///         // a 1 kHz control step; ev.missed periods were skipped
///         let _ = ev.missed;
///     },
/// )?;
/// // lane.registry().register(Box::new(timer))?;
/// # drop((timer, control));
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct CallbackTimer<F> {
    shared: Arc<Shared>,
    callback: F,
}

impl<F> fmt::Debug for CallbackTimer<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("CallbackTimer { .. }")
    }
}

impl<F> CallbackTimer<F>
where
    F: FnMut(&TimerEvent, &mut Context) + Send + 'static,
{
    fn new(first_ns: u64, interval_ns: u64, callback: F) -> io::Result<(Self, TimerControl)> {
        let shared = Arc::new(Shared {
            fd: TimerFd::new()?,
            lock: PiMutex::new(()),
            next_ns: AtomicU64::new(0),
            interval_ns: AtomicU64::new(0),
        });
        shared.set(first_ns, interval_ns)?;
        let control = TimerControl {
            shared: shared.clone(),
        };
        Ok((CallbackTimer { shared, callback }, control))
    }

    /// A timer that first expires at `first`, then every `period`.
    ///
    /// # Errors
    /// `InvalidInput` for a zero period or one of 2^64 ns or more; the timerfd's errors.
    ///
    /// Example: [`CallbackTimer`].
    pub fn periodic(
        first: Expiry,
        period: Duration,
        callback: F,
    ) -> io::Result<(Self, TimerControl)> {
        let (timer, control) = Self::new(0, 0, callback)?;
        control.arm_periodic(first, period)?;
        Ok((timer, control))
    }

    /// A timer that expires once, at `at` (re-arm it with its [`TimerControl`]).
    ///
    /// # Errors
    /// The timerfd's errors.
    ///
    /// Example: [`TimerControl`].
    pub fn one_shot(at: Expiry, callback: F) -> io::Result<(Self, TimerControl)> {
        Self::new(at.absolute_ns(), 0, callback)
    }
}

impl<F> EventHandler for CallbackTimer<F>
where
    F: FnMut(&TimerEvent, &mut Context) + Send + 'static,
{
    fn source(&self) -> BorrowedFd<'_> {
        self.shared.fd.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        let s = &*self.shared;
        let _guard = s.lock.lock();
        // Nothing to read: cancelled or re-armed since the event was detected.
        if let Ok(Some(n)) = s.fd.read() {
            let interval = s.interval_ns.load(Relaxed);
            let due_ns = s.next_ns.load(Relaxed);
            s.next_ns
                .store(due_ns.saturating_add(n.saturating_mul(interval)), Relaxed);
            let ev = TimerEvent {
                due_ns,
                missed: n - 1,
            };
            ctx.set_origin_ns(due_ns);
            ctx.add_missed_periods(ev.missed);
            (self.callback)(&ev, ctx);
        }
        // One read empties a timerfd: the next expiry is reported by itself.
        ctx.set_drained();
        Disposition::Rearm
    }
}
