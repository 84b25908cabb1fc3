//! Socket calls that std does not offer: batched datagram receive and send (`recvmmsg`,
//! `sendmmsg`: the kernel's side of a handler's `DatagramBatch`, [`MsgBatch`]), and for the
//! bound pool a gathering send that never raises `SIGPIPE` and never blocks, a nonblocking
//! receive, and a one-fd `poll`.
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

/// The error means the process or the system is out of file descriptors or memory
/// (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`): retrying at once fails the same way.
pub(crate) fn is_out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// The process is out of file descriptors (`EMFILE`): one of the errors
/// [`is_out_of_resources`] names, for the tests of the paths that handle them.
#[cfg(test)]
pub(crate) const EMFILE: i32 = libc::EMFILE;

/// Writable interest for [`poll_one`] (`POLLOUT`).
/// `poll` readable interest.
pub(crate) const POLL_IN: i16 = libc::POLLIN;
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

/// The kernel's side of a handler's datagram batch (`crate::DatagramBatch`, which holds one):
/// the `recvmmsg`/`sendmmsg` message headers, iovecs and source addresses, and one slot of
/// `slot_bytes` per datagram, allocated once by [`new`](Self::new). Nothing here allocates
/// after that.
pub(crate) struct MsgBatch {
    hdrs: Box<[libc::mmsghdr]>,
    iovs: Box<[libc::iovec]>,
    addrs: Box<[SourceAddr]>,
    /// Per datagram, room for its ancillary data: the kernel's receive timestamp
    /// (`SCM_TIMESTAMPNS`) when the socket asked for it ([`stamp_arrivals`]).
    ctrl: Box<[Ancillary]>,
    data: Box<[u8]>,
    slot_bytes: usize,
}

/// Room for one `SCM_TIMESTAMPNS` control message (`CMSG_SPACE(sizeof(struct timespec))` is
/// 32 bytes on 64-bit Linux), aligned as `struct cmsghdr` needs.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct Ancillary([u8; 64]);

/// Asks the kernel to stamp each datagram `fd` receives with the time it was received
/// (`SO_TIMESTAMPNS`: `CLOCK_REALTIME`, taken when the packet reaches the socket layer), which
/// [`MsgBatch::received_at`] then reads with the datagram.
pub(crate) fn stamp_arrivals(fd: BorrowedFd<'_>) -> io::Result<()> {
    let on: libc::c_int = 1;
    syscall!(setsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPNS,
        (&on as *const libc::c_int).cast(),
        std::mem::size_of::<libc::c_int>() as libc::socklen_t
    ))
    .map(drop)
}

/// `CLOCK_REALTIME` minus `CLOCK_MONOTONIC` now, in ns: what turns a receive timestamp into
/// the monotonic clock every other lfrt time is on.
pub(crate) fn realtime_offset_ns() -> i128 {
    let read = |clock| {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid, writable timespec; both clocks always exist on Linux.
        unsafe { libc::clock_gettime(clock, &mut t) };
        i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
    };
    read(libc::CLOCK_REALTIME) - read(libc::CLOCK_MONOTONIC)
}

// SAFETY: the raw pointers inside `hdrs` and `iovs` only ever point into this value's own boxed
// arrays (rebuilt before every system call), never into another thread's memory; moving the
// value moves ownership of everything they point to.
unsafe impl Send for MsgBatch {}

/// A datagram's source address as `recvmmsg` wrote it.
#[repr(transparent)]
pub(crate) struct SourceAddr(libc::sockaddr_storage);

impl SourceAddr {
    /// The address, if it is IPv4 or IPv6.
    pub(crate) fn get(&self) -> Option<std::net::SocketAddr> {
        use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
        let ss: *const libc::sockaddr_storage = &self.0;
        match i32::from(self.0.ss_family) {
            libc::AF_INET => {
                // SAFETY: the kernel wrote a sockaddr_in (family AF_INET) into this
                // sockaddr_storage, which is large and aligned enough for it.
                let a = unsafe { &*ss.cast::<libc::sockaddr_in>() };
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                )))
            }
            libc::AF_INET6 => {
                // SAFETY: as above, for sockaddr_in6 (family AF_INET6).
                let a = unsafe { &*ss.cast::<libc::sockaddr_in6>() };
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                    u32::from_be(a.sin6_flowinfo),
                    a.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

impl std::fmt::Debug for SourceAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

impl MsgBatch {
    /// Room for `capacity` datagrams of at most `slot_bytes` each (both at least 1).
    ///
    /// # Panics
    /// If `slot_bytes` exceeds `u32::MAX` (a datagram length is a `c_uint`) or the slots
    /// together exceed the address space.
    pub(crate) fn new(capacity: usize, slot_bytes: usize) -> MsgBatch {
        let capacity = capacity.max(1);
        let slot_bytes = slot_bytes.max(1);
        assert!(
            u32::try_from(slot_bytes).is_ok(),
            "datagram slot of {slot_bytes} bytes"
        );
        let total = capacity
            .checked_mul(slot_bytes)
            .expect("datagram batch larger than the address space");
        // SAFETY: mmsghdr, iovec and sockaddr_storage are plain C data for which all-zero
        // bytes are a valid (empty) value.
        let zero_hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let zero_addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let zero_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        MsgBatch {
            hdrs: vec![zero_hdr; capacity].into_boxed_slice(),
            iovs: vec![zero_iov; capacity].into_boxed_slice(),
            addrs: (0..capacity).map(|_| SourceAddr(zero_addr)).collect(),
            ctrl: vec![Ancillary([0; 64]); capacity].into_boxed_slice(),
            data: vec![0u8; total].into_boxed_slice(),
            slot_bytes,
        }
    }

    /// Bytes [`new`](Self::new)`(capacity, slot_bytes)` allocates: the slots and, per slot, its
    /// message header, iovec and source address. Kept next to `new` so the two stay in step (a
    /// test compares them).
    pub(crate) fn allocated_bytes(capacity: usize, slot_bytes: usize) -> u64 {
        let capacity = capacity.max(1) as u64;
        let per_slot = std::mem::size_of::<libc::mmsghdr>()
            + std::mem::size_of::<libc::iovec>()
            + std::mem::size_of::<SourceAddr>()
            + std::mem::size_of::<Ancillary>();
        capacity.saturating_mul((slot_bytes.max(1) as u64).saturating_add(per_slot as u64))
    }

    pub(crate) fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    pub(crate) fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// The bytes of every slot, for pre-faulting them before the first event.
    pub(crate) fn storage_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// Points header `i` at the whole of slot `i` and at address buffer `i`.
    ///
    /// The iovec covers exactly the slot's bounds-checked subslice, so the kernel can never
    /// write past it; [`send`](Self::send) only ever shortens `iov_len`.
    fn aim(&mut self, i: usize) {
        let slot = &mut self.data[i * self.slot_bytes..(i + 1) * self.slot_bytes];
        self.iovs[i] = libc::iovec {
            iov_base: slot.as_mut_ptr().cast(),
            iov_len: slot.len(),
        };
        let h = &mut self.hdrs[i].msg_hdr;
        h.msg_iov = &mut self.iovs[i];
        h.msg_iovlen = 1;
        h.msg_name = (&mut self.addrs[i] as *mut SourceAddr).cast();
        h.msg_namelen = std::mem::size_of::<SourceAddr>() as libc::socklen_t;
        h.msg_control = (&mut self.ctrl[i] as *mut Ancillary).cast();
        h.msg_controllen = std::mem::size_of::<Ancillary>() as _;
        h.msg_flags = 0;
    }

    /// `recvmmsg(fd, …, MSG_DONTWAIT)` into every slot: how many datagrams it took.
    pub(crate) fn recv(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        for i in 0..self.capacity() {
            self.aim(i);
        }
        let n = syscall!(recvmmsg(
            fd.as_raw_fd(),
            self.hdrs.as_mut_ptr(),
            self.hdrs.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut()
        ))?;
        Ok(n as usize)
    }

    /// What the last [`recv`](Self::recv) wrote for datagram `i`: its length and whether it
    /// was longer than its slot.
    pub(crate) fn received(&self, i: usize) -> (usize, bool) {
        let h = &self.hdrs[i];
        (
            h.msg_len as usize,
            h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        )
    }

    /// When the kernel received datagram `i` of the last [`recv`](Self::recv)
    /// (`CLOCK_REALTIME` ns), if its socket stamps arrivals ([`stamp_arrivals`]).
    // `msg_controllen` is `size_t` with glibc and `socklen_t` with musl: the cast is portable.
    #[allow(clippy::unnecessary_cast)]
    pub(crate) fn received_at(&self, i: usize) -> Option<i128> {
        let h = &self.hdrs[i].msg_hdr;
        if h.msg_control.is_null()
            || (h.msg_controllen as usize) < std::mem::size_of::<libc::cmsghdr>()
        {
            return None;
        }
        // SAFETY: `h` is the header `recv` aimed at `self.ctrl[i]` and the kernel filled; the
        // CMSG macros walk only within `msg_control[..msg_controllen]`, which the kernel set to
        // at most the buffer's size, and each message they yield lies inside it.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                    let t = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                    return Some(i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec));
                }
                c = libc::CMSG_NXTHDR(h, c);
            }
        }
        None
    }

    /// Slot `i` and the source of the datagram in it.
    pub(crate) fn message(&mut self, i: usize) -> (&mut [u8], &SourceAddr) {
        let slot = &mut self.data[i * self.slot_bytes..(i + 1) * self.slot_bytes];
        (slot, &self.addrs[i])
    }

    /// `sendmmsg(fd, …, MSG_DONTWAIT)`: for each `i` with `replies[i] = Some(n)`, the first `n`
    /// bytes of slot `i` back to datagram `i`'s source (`n` at most the slot), of the
    /// datagrams the last [`recv`](Self::recv) took. Returns how many were sent; with nothing
    /// to send it makes no system call. A datagram the kernel refuses (full send buffer, an
    /// ICMP error surfaced on the socket) is dropped; the rest are still sent.
    pub(crate) fn send(&mut self, fd: BorrowedFd<'_>, replies: &[Option<u32>]) -> usize {
        // Compact the replies to the front. Headers still point at their own slot, iovec and
        // source address (set by `recv`; boxed arrays do not move), and keep the address length
        // the kernel wrote. Invariant: [0, k) holds marked headers, [k, i) unmarked ones, and
        // header i is still the one `recv` filled (swaps only touch positions <= i).
        let mut k = 0;
        for (i, reply) in replies.iter().enumerate() {
            if let Some(n) = *reply {
                self.iovs[i].iov_len = (n as usize).min(self.slot_bytes);
                // A reply carries no ancillary data (the receive timestamp is not for sending).
                self.hdrs[i].msg_hdr.msg_control = std::ptr::null_mut();
                self.hdrs[i].msg_hdr.msg_controllen = 0;
                if k != i {
                    self.hdrs.swap(k, i);
                }
                k += 1;
            }
        }
        let mut sent = 0;
        let mut off = 0;
        while off < k {
            match syscall!(sendmmsg(
                fd.as_raw_fd(),
                self.hdrs[off..].as_mut_ptr(),
                (k - off) as libc::c_uint,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL
            )) {
                Ok(m) if m > 0 => {
                    sent += m as usize;
                    off += m as usize;
                }
                // The datagram at `off` was refused: drop it and go on with the next.
                _ => off += 1,
            }
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocated_bytes_counts_every_array_of_a_batch() {
        for (capacity, slot) in [(16, 4096), (1, 1), (3, 65536), (0, 0)] {
            let b = MsgBatch::new(capacity, slot);
            let real = std::mem::size_of_val(&*b.hdrs)
                + std::mem::size_of_val(&*b.iovs)
                + std::mem::size_of_val(&*b.addrs)
                + std::mem::size_of_val(&*b.ctrl)
                + std::mem::size_of_val(&*b.data);
            assert_eq!(
                MsgBatch::allocated_bytes(capacity, slot),
                real as u64,
                "{capacity} x {slot}"
            );
        }
    }

    #[test]
    #[should_panic(expected = "address space")]
    fn a_batch_larger_than_memory_is_refused() {
        let _ = MsgBatch::new(usize::MAX / 2, 4);
    }
}
