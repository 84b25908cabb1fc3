//! The generator's client sockets: one connected, nonblocking UDP socket per client and port,
//! the preallocated headers of its batched calls, and the two ways a datagram leaves: one
//! `send` per datagram, or an outbox emptied with `sendmmsg`. Errors carry the port they
//! happened on.

use nix::errno::Errno;
use nix::sys::socket::{sendmmsg, setsockopt, sockopt, MsgFlags, MultiHeaders, SockaddrStorage};
use std::io::{self, IoSlice};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

/// Datagrams per `recvmmsg` / `sendmmsg` call.
pub const IO_BATCH: usize = 32;
/// Requested socket receive buffer (best effort, capped by `rmem_max`).
pub(crate) const SOCKET_RCVBUF: usize = 4 << 20;

pub(crate) fn with_context(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

pub(crate) fn errno_context(e: Errno, what: &str) -> io::Error {
    with_context(io::Error::from(e), what)
}

/// One client socket: connected to its target port, nonblocking.
pub(crate) struct Target {
    pub(crate) sock: UdpSocket,
    pub(crate) port: u16,
    /// Index of the port in `LoadConfig::ports` (written into each datagram).
    pub(crate) index: u32,
    /// Which of the port's clients this socket is (0 when batched).
    pub(crate) client: u32,
    /// Batched: datagrams queued for the next `sendmmsg`, `IO_BATCH` slots of the datagram
    /// size (empty with unbatched clients, which send each datagram at once).
    pub(crate) outbox: Vec<u8>,
    /// Local sequence index of each queued datagram.
    pub(crate) queued: Vec<u64>,
    pub(crate) send_headers: Headers,
    /// Intact echoes received from this port (unique datagrams).
    pub(crate) received: u64,
}

/// Preallocated `mmsghdr`s for one `recvmmsg` / `sendmmsg` site.
pub(crate) struct Headers(pub(crate) MultiHeaders<SockaddrStorage>);

impl Headers {
    pub(crate) fn new() -> Headers {
        Headers(MultiHeaders::preallocate(IO_BATCH, None))
    }
}

// SAFETY: `MultiHeaders` is `!Send` only because `mmsghdr` holds raw pointers. Those point into
// its own heap buffers (the address slots, which move with it) or at the I/O slices of the call
// in progress (rewritten by every call), never at thread-local data; a worker's headers are
// used by one thread at a time, the one that owns the worker.
unsafe impl Send for Headers {}

pub(crate) fn open_target(ip: IpAddr, port: u16, index: u32, client: u32) -> io::Result<Target> {
    let local: SocketAddr = match ip {
        IpAddr::V4(_) => (Ipv4Addr::LOCALHOST, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::LOCALHOST, 0).into(),
    };
    let ctx = |what: &str| format!("port {port}: {what}");
    let sock = UdpSocket::bind(local).map_err(|e| with_context(e, ctx("bind client socket")))?;
    sock.connect((ip, port))
        .map_err(|e| with_context(e, ctx(&format!("connect to {ip}"))))?;
    sock.set_nonblocking(true)
        .map_err(|e| with_context(e, ctx("set nonblocking")))?;
    // Best effort: a larger receive buffer absorbs bursts of echoes.
    let _ = setsockopt(&sock, sockopt::RcvBuf, &SOCKET_RCVBUF);
    Ok(Target {
        sock,
        port,
        index,
        client,
        outbox: Vec::new(),
        queued: Vec::with_capacity(IO_BATCH),
        send_headers: Headers::new(),
        received: 0,
    })
}

/// Sends the datagrams of `target`'s outbox (each `size` bytes) with as few
/// `sendmmsg` calls as the kernel allows. Returns how many of them, from the
/// front, the kernel took; the rest were refused (a pending ICMP error
/// reported twice, a full buffer).
pub(crate) fn send_batch(target: &mut Target, size: usize, calls: &mut u64) -> io::Result<usize> {
    let n = target.queued.len();
    let fd = target.sock.as_raw_fd();
    let mut done = 0;
    let mut refused = false;
    while done < n {
        let slices: Vec<[IoSlice<'_>; 1]> = target.outbox[done * size..n * size]
            .chunks(size)
            .map(|d| [IoSlice::new(d)])
            .collect();
        // Connected sockets: no destination addresses.
        let addrs = vec![None::<SockaddrStorage>; slices.len()];
        let r = sendmmsg(
            fd,
            &mut target.send_headers.0,
            &slices,
            addrs,
            [],
            MsgFlags::MSG_DONTWAIT,
        );
        match r {
            Ok(res) => {
                let sent = res.count();
                if sent == 0 {
                    break;
                }
                *calls += 1;
                done += sent;
            }
            Err(Errno::EINTR) => {}
            // A connected UDP socket reports an earlier ICMP "port
            // unreachable" on the next send, which then is not transmitted;
            // retry once.
            Err(Errno::ECONNREFUSED) if !refused => refused = true,
            Err(Errno::ECONNREFUSED | Errno::EAGAIN | Errno::ENOBUFS) => break,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
    Ok(done)
}

/// Sends one datagram on a connected socket with one `send`. Returns whether the kernel
/// took it (refused: a pending ICMP error reported twice, a full buffer).
pub(crate) fn send_single(sock: &UdpSocket, datagram: &[u8]) -> io::Result<bool> {
    let mut refused = false;
    loop {
        match sock.send(datagram) {
            Ok(_) => return Ok(true),
            Err(e) => match Errno::from_raw(e.raw_os_error().unwrap_or(0)) {
                Errno::EINTR => {}
                // As in send_batch: an earlier ICMP "port unreachable" is reported on this
                // send, which then is not transmitted; retry once.
                Errno::ECONNREFUSED if !refused => refused = true,
                Errno::ECONNREFUSED | Errno::EAGAIN | Errno::ENOBUFS => return Ok(false),
                _ => return Err(e),
            },
        }
    }
}
