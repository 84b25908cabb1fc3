//! Event sources beyond sockets: periodic timers (timerfd) and user notifications (eventfd).
//! Sockets are the standard library's (`std::net::UdpSocket`, `TcpListener`, `TcpStream`),
//! set nonblocking.

use crate::sys::fd::{EventFd, TimerFd};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

/// An absolute, periodic `CLOCK_MONOTONIC` timer (timerfd, `TFD_TIMER_ABSTIME`).
///
/// # Real-time safety
/// `read` is one nonblocking `read(2)` and never allocates.
///
/// # Examples
/// A 1 ms periodic timer as a handler (see also [`timer`](crate::sources::timer) for callbacks):
/// ```
/// use lfrt::{Context, Disposition, Event, EventHandler, Timer};
/// use std::os::fd::{AsFd, BorrowedFd};
/// struct Tick(Timer);
/// impl EventHandler for Tick {
///     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
///     fn handle(&mut self, _: &Event, ctx: &mut Context) -> Disposition {
///         if let Ok(Some((expirations, due_ns))) = self.0.read() {
///             ctx.set_origin_ns(due_ns); // latency from the due instant
///             ctx.add_missed_periods(expirations - 1);
///         }
///         Disposition::Rearm
///     }
/// }
/// let mut t = Timer::new()?;
/// t.arm(lfrt::task::time::now_ns() + 1_000_000, 1_000_000)?;
/// assert_eq!(t.interval_ns(), 1_000_000);
/// let handler = Tick(t); // register it with a lane's registry
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Timer {
    fd: TimerFd,
    interval_ns: u64,
    next_ns: u64,
}

impl Timer {
    /// A disarmed timer.
    pub fn new() -> io::Result<Timer> {
        Ok(Timer {
            fd: TimerFd::new()?,
            interval_ns: 0,
            next_ns: 0,
        })
    }

    /// Arms it: first expiry at `first_ns` (`CLOCK_MONOTONIC`), then every `interval_ns`.
    pub fn arm(&mut self, first_ns: u64, interval_ns: u64) -> io::Result<()> {
        self.fd.set_abs(first_ns, interval_ns)?;
        self.interval_ns = interval_ns;
        self.next_ns = first_ns;
        Ok(())
    }

    /// Consumes the expirations since the last read. Returns `(expirations, due_ns)` where
    /// `due_ns` is the expected time of the first of them (the latency reference), or `None`
    /// if the timer has not expired.
    pub fn read(&mut self) -> io::Result<Option<(u64, u64)>> {
        match self.fd.read()? {
            Some(n) => {
                let due = self.next_ns;
                self.next_ns += n * self.interval_ns;
                Ok(Some((n, due)))
            }
            None => Ok(None),
        }
    }

    /// The period in ns (0 if one-shot or disarmed).
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }
}

impl AsFd for Timer {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A user notification handle (eventfd): any thread can `notify`; a handler `take`s the sum.
///
/// # Examples
/// ```
/// use lfrt::Notifier;
/// use std::sync::Arc;
/// let bell = Arc::new(Notifier::new()?);
/// let b = bell.clone();
/// std::thread::spawn(move || b.notify(2)).join().unwrap()?;
/// bell.notify(1)?;
/// assert_eq!(bell.take()?, 3); // what a handler on `bell` reads, then resets
/// assert_eq!(bell.take()?, 0);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Notifier {
    fd: EventFd,
}

impl Notifier {
    /// A new notifier with a zero count.
    pub fn new() -> io::Result<Notifier> {
        Ok(Notifier {
            fd: EventFd::new()?,
        })
    }

    /// Adds `n` to the count and makes the handle readable.
    pub fn notify(&self, n: u64) -> io::Result<()> {
        self.fd.write(n)
    }

    /// Reads and resets the count (0 if nothing was notified).
    pub fn take(&self) -> io::Result<u64> {
        Ok(self.fd.read()?.unwrap_or(0))
    }
}

impl AsFd for Notifier {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
