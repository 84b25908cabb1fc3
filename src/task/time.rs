//! Time for lane tasks: [`sleep_until`], [`sleep`] and [`interval`], backed by the lane's own
//! timerfd (no thread of their own).
//!
//! Each waiting future holds one entry of its lane's timer (`timers.rs`: an instant and the
//! waker to wake then, from a pool preallocated at `max_tasks × 4`); the lane's timerfd is armed
//! (`TFD_TIMER_ABSTIME`) for the earliest entry. When it fires, the lane's timer handler takes
//! the due entries off the heap (O(log n) each in the entries armed, whatever `max_tasks` is)
//! and wakes their wakers, then re-arms the timerfd for the next one.
//!
//! The lane is found from the task the thread is polling (`executor::current_task`), and the
//! entry wakes the waker the future was polled with. So a future under a combinator that wraps
//! the waker (`FuturesUnordered`, a `select` over a task set) is woken through the wrapper and
//! polled again by it, as tokio's timer does.
//!
//! Instants are `CLOCK_MONOTONIC` nanoseconds ([`now_ns`]), as for callback timers and
//! [`Timer`](crate::Timer).
//!
//! # Panics
//! These futures must be polled by a lane task (inside [`Lane::spawn`](crate::Lane::spawn)'s
//! future, however deep); polled anywhere else they panic with a message saying so.

use crate::sys;
use crate::task::executor::current_task;
use crate::task::executor::Shared;
use crate::task::timers::TimerId;
use std::sync::Arc;

/// Lane time's clock, which callback timers ([`Expiry::At`](crate::timer::Expiry::At)) and
/// [`Timer::arm`](crate::Timer::arm) read too.
pub use crate::sys::now_ns;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Completes at `deadline_ns` (`CLOCK_MONOTONIC` ns) or later.
///
/// # Examples
/// ```no_run
/// # async fn step() {
/// let next = lfrt::task::time::now_ns() + 1_000_000;
/// lfrt::task::time::sleep_until(next).await; // inside a lane task
/// # }
/// ```
pub fn sleep_until(deadline_ns: u64) -> Sleep {
    Sleep {
        deadline_ns,
        timer: LaneTimer::default(),
    }
}

/// Completes after `d` (from now). A delay of 2^64 ns or more (about 584 years) saturates: it
/// completes at the end of `CLOCK_MONOTONIC`'s range, that is never (it is not wrapped to a
/// short one).
pub fn sleep(d: Duration) -> Sleep {
    sleep_until(sys::now_ns().saturating_add(sys::duration_ns(d).unwrap_or(u64::MAX)))
}

/// The future of [`sleep_until`] and [`sleep`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Sleep {
    deadline_ns: u64,
    timer: LaneTimer,
}

impl Sleep {
    /// The instant it completes at.
    pub fn deadline_ns(&self) -> u64 {
        self.deadline_ns
    }
}

/// A future's entry on its lane's timer (module docs): armed by [`poll_until`], kept across
/// polls, cancelled when the future is dropped.
///
/// [`poll_until`]: LaneTimer::poll_until
#[derive(Default)]
pub(crate) struct LaneTimer(Option<(Arc<Shared>, Option<TimerId>)>);

impl LaneTimer {
    /// `Ready` once `at_ns` has passed; otherwise arms this future's entry on the lane of the
    /// task being polled, to wake `cx.waker()` at `at_ns`. `None` outside a lane task's poll.
    /// If every timer entry of the lane is armed (counted in `timers_full`), the future is
    /// woken at once and tries again at the lane's next turn.
    pub(crate) fn poll_until(&mut self, at_ns: u64, cx: &mut Context<'_>) -> Option<Poll<()>> {
        if sys::now_ns() >= at_ns {
            self.cancel();
            return Some(Poll::Ready(()));
        }
        let (shared, _, _) = current_task()?;
        let entry = match &mut self.0 {
            Some((lane, id)) if std::ptr::eq(Arc::as_ptr(lane), shared) => id,
            other => {
                // First wait (or a future moved to another lane's task): this lane's entry.
                if let Some((lane, Some(id))) = other.take() {
                    lane.cancel_timer(id);
                }
                &mut other.insert((shared.arc(), None)).1
            }
        };
        if !shared.arm_timer(entry, at_ns, cx.waker()) {
            cx.waker().wake_by_ref();
        }
        // An instant that passed meanwhile has armed the timerfd in the past: it fires at once.
        Some(Poll::Pending)
    }

    /// Frees the entry, if one is armed.
    pub(crate) fn cancel(&mut self) {
        if let Some((lane, Some(id))) = self.0.take() {
            lane.cancel_timer(id);
        }
    }
}

impl Drop for LaneTimer {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// A copy waits on an entry of its own.
impl Clone for LaneTimer {
    fn clone(&self) -> Self {
        LaneTimer::default()
    }
}

impl std::fmt::Debug for LaneTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneTimer")
            .field(
                "armed",
                &self.0.as_ref().is_some_and(|(_, id)| id.is_some()),
            )
            .finish()
    }
}

/// [`LaneTimer::poll_until`] for `lfrt::task::time`'s futures, which only lane tasks may poll.
fn poll_deadline(timer: &mut LaneTimer, deadline_ns: u64, cx: &mut Context<'_>) -> Poll<()> {
    timer.poll_until(deadline_ns, cx).unwrap_or_else(|| {
        panic!("lfrt::task::time futures must be polled by a task spawned on a lane (Lane::spawn)")
    })
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let me = &mut *self;
        poll_deadline(&mut me.timer, me.deadline_ns, cx)
    }
}

/// One tick of an [`Interval`], as a callback timer's
/// [`TimerEvent`](crate::timer::TimerEvent) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// When this tick was due (`CLOCK_MONOTONIC` ns).
    pub due_ns: u64,
    /// Whole periods that passed with no tick of their own: the task (or the lane) was busy
    /// for that long. The next tick is due at the next period boundary after now.
    pub missed: u64,
}

/// Periodic ticks at fixed period boundaries (no drift): tick `k` is due at
/// `first_ns + k × period`.
///
/// # Examples
/// ```no_run
/// # async fn control_loop() {
/// let mut every_ms = lfrt::task::time::interval(std::time::Duration::from_millis(1));
/// loop {
///     let tick = every_ms.tick().await;
///     let late_ns = lfrt::task::time::now_ns() - tick.due_ns;
///     if tick.missed > 0 { /* overran `missed` periods */ }
///     # let _ = late_ns; break;
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Interval {
    next_ns: u64,
    period_ns: u64,
    /// One entry for every tick, re-armed for the next.
    timer: LaneTimer,
}

/// Ticks every `period`, the first one `period` from now.
///
/// # Panics
/// If `period` is zero or 2^64 ns or more (about 584 years), as a callback timer's period is
/// refused ([`TimerControl::arm_periodic`](crate::timer::TimerControl::arm_periodic)); never
/// wrapped to a short one.
pub fn interval(period: Duration) -> Interval {
    let period_ns = period_ns(period);
    interval_at(sys::now_ns().saturating_add(period_ns), period)
}

/// Ticks every `period`, the first one at `first_ns`.
///
/// # Panics
/// As [`interval`]: if `period` is zero or 2^64 ns or more.
pub fn interval_at(first_ns: u64, period: Duration) -> Interval {
    Interval {
        next_ns: first_ns,
        period_ns: period_ns(period),
        timer: LaneTimer::default(),
    }
}

/// An interval's period in ns; panics (the documented refusal) outside 1 ns ..= 2^64 - 1 ns.
fn period_ns(period: Duration) -> u64 {
    match sys::duration_ns(period) {
        Some(ns) if ns > 0 => ns,
        _ => panic!("an interval needs a period of 1 ns to 2^64 - 1 ns, not {period:?}"),
    }
}

impl Interval {
    /// Waits for the next tick.
    pub fn tick(&mut self) -> TickFuture<'_> {
        TickFuture { interval: self }
    }

    /// When the next tick is due.
    pub fn next_ns(&self) -> u64 {
        self.next_ns
    }
}

/// The future of [`Interval::tick`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct TickFuture<'a> {
    interval: &'a mut Interval,
}

impl Future for TickFuture<'_> {
    type Output = Tick;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Tick> {
        let iv = &mut *self.interval;
        match poll_deadline(&mut iv.timer, iv.next_ns, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                let now = sys::now_ns();
                let due = iv.next_ns;
                let expired = 1 + now.saturating_sub(due) / iv.period_ns;
                iv.next_ns = due.saturating_add(expired * iv.period_ns);
                Poll::Ready(Tick {
                    due_ns: due,
                    missed: expired - 1,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delay of 2^64 ns or more saturates; `as u64` wrapped 2^64 ns to 0, a sleep that
    /// completed at once.
    #[test]
    fn a_delay_beyond_u64_ns_saturates() {
        assert_eq!(sleep(Duration::MAX).deadline_ns(), u64::MAX);
        let just_past = Duration::from_nanos(u64::MAX) + Duration::from_nanos(1);
        assert_eq!(sleep(just_past).deadline_ns(), u64::MAX);
        let now = sys::now_ns();
        let soon = sleep(Duration::from_millis(1)).deadline_ns();
        assert!(soon >= now + 1_000_000 && soon < u64::MAX);
    }

    /// The largest period that fits is taken as it is; one more nanosecond is refused naming
    /// the range, and `Duration::MAX` too (`as u64` took the low 64 bits of its nanoseconds).
    #[test]
    fn the_longest_interval_period_is_taken_and_one_more_ns_refused() {
        let longest = Duration::from_nanos(u64::MAX);
        let iv = interval_at(5, longest);
        assert_eq!((iv.next_ns(), iv.period_ns), (5, u64::MAX));
        assert_eq!(
            interval(longest).next_ns(),
            u64::MAX,
            "the first tick saturates"
        );
        let refused =
            std::panic::catch_unwind(|| interval_at(5, longest + Duration::from_nanos(1)));
        let message = *refused.expect_err("refused").downcast::<String>().unwrap();
        assert!(message.contains("1 ns to 2^64 - 1 ns"), "{message}");
        assert!(std::panic::catch_unwind(|| interval(Duration::MAX)).is_err());
        assert!(std::panic::catch_unwind(|| interval(Duration::ZERO)).is_err());
    }
}
