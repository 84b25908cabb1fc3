//! A thin owner of one epoll instance: add, modify (re-arm), delete, wait for one event.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Readable interest (`EPOLLIN`).
pub(crate) const IN: u32 = libc::EPOLLIN as u32;
/// Writable interest (`EPOLLOUT`).
pub(crate) const OUT: u32 = libc::EPOLLOUT as u32;
/// Peer closed its writing half (`EPOLLRDHUP`).
pub(crate) const RDHUP: u32 = libc::EPOLLRDHUP as u32;
/// Hang-up (`EPOLLHUP`).
pub(crate) const HUP: u32 = libc::EPOLLHUP as u32;
/// Error condition (`EPOLLERR`).
pub(crate) const ERR: u32 = libc::EPOLLERR as u32;
/// Edge-triggered: one event per change of readiness (`EPOLLET`).
pub(crate) const ET: u32 = libc::EPOLLET as u32;
/// Disarm after one event (`EPOLLONESHOT`).
pub(crate) const ONESHOT: u32 = libc::EPOLLONESHOT as u32;

/// The error of [`Epoll::modify`] or [`Epoll::delete`] on an fd that is not in the set
/// (`ENOENT`).
pub(crate) fn is_not_member(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOENT)
}

/// The error of [`Epoll::add`] that would nest epoll sets deeper than the kernel allows
/// (`ELOOP`).
#[cfg(test)]
pub(crate) fn is_too_deep(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP)
}

/// One epoll instance. `Sync`: epoll_ctl and epoll_wait may be called from any thread.
#[derive(Debug)]
pub(crate) struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        let fd = syscall!(epoll_create1(libc::EPOLL_CLOEXEC))?;
        // SAFETY: epoll_create1 returned a new, valid fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // epoll_create1 takes no O_NONBLOCK. Set it, so an epoll set nested in a lane's set
        // (a handler's private gate) passes the registry's nonblocking check like any source.
        let flags = syscall!(fcntl(fd.as_raw_fd(), libc::F_GETFL))?;
        syscall!(fcntl(
            fd.as_raw_fd(),
            libc::F_SETFL,
            flags | libc::O_NONBLOCK
        ))?;
        Ok(Epoll { fd })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: data };
        syscall!(epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev)).map(drop)
    }

    pub(crate) fn add(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, data)
    }

    /// `EPOLL_CTL_MOD`: with `ONESHOT` in `events` this re-arms a disarmed handle.
    pub(crate) fn modify(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, data)
    }

    pub(crate) fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Blocks until at least one handle is ready (or `timeout_ms` passed); fills `out` with
    /// up to `out.len()` `(events, data)` pairs and returns how many.
    ///
    /// `EINTR` is returned to the caller (as `ErrorKind::Interrupted`), never retried here.
    pub(crate) fn wait_many(&self, timeout_ms: i32, out: &mut [(u32, u64)]) -> io::Result<usize> {
        const MAX: usize = 16;
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; MAX];
        let max = out.len().min(MAX);
        if max == 0 {
            return Ok(0);
        }
        let n = syscall!(epoll_wait(
            self.fd.as_raw_fd(),
            evs.as_mut_ptr(),
            max as libc::c_int,
            timeout_ms
        ))? as usize;
        for (o, e) in out.iter_mut().zip(&evs[..n]) {
            *o = (e.events, e.u64);
        }
        Ok(n)
    }

    /// Blocks until one handle is ready; returns `(events, data)`.
    ///
    /// `EINTR` is returned to the caller (as `ErrorKind::Interrupted`), never retried here.
    pub(crate) fn wait_one(&self, timeout_ms: i32) -> io::Result<Option<(u32, u64)>> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        let n = syscall!(epoll_wait(self.fd.as_raw_fd(), &mut ev, 1, timeout_ms))?;
        Ok((n == 1).then_some((ev.events, ev.u64)))
    }
}

/// An epoll set is itself pollable (readable while one of its members is ready), so one set
/// can be a member of another.
impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
