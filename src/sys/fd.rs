//! eventfd and timerfd: the wake-up and timer handles.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Reads one 8-byte counter from an eventfd or timerfd. `Ok(None)` when it would block.
fn read_u64(fd: BorrowedFd<'_>) -> io::Result<Option<u64>> {
    let mut v = 0u64;
    match syscall!(read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8)) {
        Ok(_) => Ok(Some(v)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// True if `fd` has `O_NONBLOCK` set (`fcntl(F_GETFL)`).
pub(crate) fn is_nonblocking(fd: std::os::fd::RawFd) -> io::Result<bool> {
    let flags = syscall!(fcntl(fd, libc::F_GETFL))?;
    Ok(flags & libc::O_NONBLOCK != 0)
}

/// A nonblocking eventfd.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    pub(crate) fn new() -> io::Result<EventFd> {
        let fd = syscall!(eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC))?;
        // SAFETY: eventfd returned a new fd owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds `n` to the counter (wakes every epoll waiting on it).
    pub(crate) fn write(&self, n: u64) -> io::Result<()> {
        syscall!(write(self.0.as_raw_fd(), (&n as *const u64).cast(), 8)).map(drop)
    }

    /// Reads and resets the counter; `Ok(None)` if it was zero.
    pub(crate) fn read(&self) -> io::Result<Option<u64>> {
        read_u64(self.0.as_fd())
    }

    /// An eventfd from a duplicate of one (tests reach a source's eventfd this way).
    #[cfg(test)]
    pub(crate) fn from_owned(fd: OwnedFd) -> EventFd {
        EventFd(fd)
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// A nonblocking `CLOCK_MONOTONIC` timerfd.
#[derive(Debug)]
pub(crate) struct TimerFd(OwnedFd);

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

impl TimerFd {
    pub(crate) fn new() -> io::Result<TimerFd> {
        let fd = syscall!(timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC
        ))?;
        // SAFETY: timerfd_create returned a new fd owned by nobody else.
        Ok(TimerFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Arms the timer: first expiry at absolute `first_ns`, then every `interval_ns`
    /// (0 = one-shot).
    pub(crate) fn set_abs(&self, first_ns: u64, interval_ns: u64) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: timespec(interval_ns),
            it_value: timespec(first_ns),
        };
        syscall!(timerfd_settime(
            self.0.as_raw_fd(),
            libc::TFD_TIMER_ABSTIME,
            &spec,
            std::ptr::null_mut()
        ))
        .map(drop)
    }

    /// Reads the expiration count since the last read; `Ok(None)` if none.
    pub(crate) fn read(&self) -> io::Result<Option<u64>> {
        read_u64(self.0.as_fd())
    }
}

impl AsFd for TimerFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Takes an exclusive `flock` on `file`, blocking until it is free (the unit tests' RT lock).
#[cfg(all(test, not(loom)))]
pub(crate) fn lock_exclusive(file: &std::fs::File) -> io::Result<()> {
    syscall!(flock(file.as_raw_fd(), libc::LOCK_EX)).map(drop)
}
