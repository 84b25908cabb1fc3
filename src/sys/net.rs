//! Socket calls that std does not offer in the form the bound pool needs: a gathering send
//! that never raises `SIGPIPE` and never blocks, a nonblocking receive, and a one-fd `poll`.
//!
//! None of them allocates; errors come back as `io::Error::last_os_error()` (no allocation
//! either: an OS error code is stored inline).

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, BorrowedFd};

/// `sendmsg(fd, bufs, MSG_NOSIGNAL | MSG_DONTWAIT)`: writes what fits now, gathering `bufs`.
/// A closed peer gives `EPIPE` instead of killing the process with `SIGPIPE`.
pub(crate) fn send_vectored(fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: msghdr is plain data; all-zero is a valid value (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is guaranteed ABI-compatible with `struct iovec` on Unix; sendmsg only reads it.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len() as _;
    let n = syscall!(sendmsg(
        fd.as_raw_fd(),
        &msg,
        libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT
    ))?;
    Ok(n as usize)
}

/// `recv(fd, buf, MSG_DONTWAIT)`: `Ok(0)` means the peer closed its writing half.
pub(crate) fn recv_nonblocking(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    let n = syscall!(recv(
        fd.as_raw_fd(),
        buf.as_mut_ptr().cast(),
        buf.len(),
        libc::MSG_DONTWAIT
    ))?;
    Ok(n as usize)
}

/// Writable interest for [`poll_one`] (`POLLOUT`).
pub(crate) const POLL_OUT: i16 = libc::POLLOUT;

/// `poll` on one fd for `events`, at most `timeout_ms` (-1: no limit). Returns the reported
/// events (`POLLERR`/`POLLHUP` included), or 0 on timeout.
pub(crate) fn poll_one(fd: BorrowedFd<'_>, events: i16, timeout_ms: i32) -> io::Result<i16> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    let n = syscall!(poll(&mut p, 1, timeout_ms))?;
    Ok(if n == 0 { 0 } else { p.revents })
}
