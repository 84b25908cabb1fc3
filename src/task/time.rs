//! Time for lane tasks: [`sleep_until`], [`sleep`] and [`interval`], backed by the lane's own
//! timerfd (no thread of their own).
//!
//! Each task keeps the earliest deadline it waits for in its lane's deadline heap (one entry
//! per task slot at most, preallocated); the lane's timerfd is armed (`TFD_TIMER_ABSTIME`)
//! for the heap's earliest. When it fires, the lane's timer handler takes the due deadlines
//! off the heap (O(log n) each in the deadlines armed, whatever `max_tasks` is), wakes their
//! tasks, and re-arms the timerfd for the next one. A task that waits for several deadlines
//! at once is woken at the earliest; the others register again when polled.
//!
//! Instants are `CLOCK_MONOTONIC` nanoseconds ([`now_ns`]), as for callback timers and
//! [`Timer`](crate::Timer).
//!
//! # Panics
//! These futures must be polled by a lane task (they find the lane through the task's
//! waker); polled anywhere else they panic with a message saying so.

use crate::sys;
use crate::task::executor::lane_task;

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
/// let next = lfrt::time::now_ns() + 1_000_000;
/// lfrt::time::sleep_until(next).await; // inside a lane task
/// # }
/// ```
pub fn sleep_until(deadline_ns: u64) -> Sleep {
    Sleep { deadline_ns }
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
}

impl Sleep {
    /// The instant it completes at.
    pub fn deadline_ns(&self) -> u64 {
        self.deadline_ns
    }
}

/// Registers `deadline_ns` with the lane of the task polling with `cx`; `Ready` if it passed.
fn poll_deadline(deadline_ns: u64, cx: &mut Context<'_>) -> Poll<()> {
    if sys::now_ns() >= deadline_ns {
        return Poll::Ready(());
    }
    let Some((shared, index, gen)) = lane_task(cx.waker()) else {
        panic!("lfrt::time futures must be polled by a task spawned on a lane (Lane::spawn)");
    };
    shared.add_deadline(index, gen, deadline_ns);
    // A deadline that passed meanwhile has armed the timerfd in the past: it fires at once.
    Poll::Pending
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        poll_deadline(self.deadline_ns, cx)
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
/// let mut every_ms = lfrt::time::interval(std::time::Duration::from_millis(1));
/// loop {
///     let tick = every_ms.tick().await;
///     let late_ns = lfrt::time::now_ns() - tick.due_ns;
///     if tick.missed > 0 { /* overran `missed` periods */ }
///     # let _ = late_ns; break;
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Interval {
    next_ns: u64,
    period_ns: u64,
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
        match poll_deadline(iv.next_ns, cx) {
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
