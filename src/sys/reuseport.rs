//! `SO_REUSEPORT` socket lanes steered by a classic BPF program (`SO_ATTACH_REUSEPORT_CBPF`).
//!
//! The kernel runs the program for each datagram that reaches the lane and delivers it to the
//! socket whose index (its position in bind order) the program returns. For UDP the program
//! sees the datagram's payload at offset 0 (the kernel pulls the UDP header before running it)
//! and the IP header through the `SKF_NET_OFF` negative offset. A return value that is not a
//! socket index falls back to the kernel's hash, so every program here ends in an explicit
//! index; a load past the end of the packet aborts the program with 0, so index 0 must be the
//! default socket.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};

/// `SO_ATTACH_REUSEPORT_CBPF` (asm-generic/socket.h; the libc crate defines it for Android
/// only).
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// One classic BPF instruction.
pub(crate) type Insn = libc::sock_filter;

fn stmt(code: u32, k: u32) -> Insn {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump_eq(k: u32, jt: u8) -> Insn {
    libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf: 0,
        k,
    }
}

/// Where the classifying byte is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    /// The DSCP of the IPv4 header (the upper six bits of the TOS byte).
    Dscp,
    /// The payload byte at this offset.
    PayloadByte(u32),
}

/// A program that reads `field` and returns the index of the first `(value, index)` that
/// matches, else `default`. At most 255 cases (one-byte jump offsets).
pub(crate) fn classifier(field: Field, cases: &[(u8, u32)], default: u32) -> Vec<Insn> {
    assert!(cases.len() < 256, "at most 255 cases");
    let mut p = Vec::with_capacity(2 * cases.len() + 4);
    match field {
        Field::Dscp => {
            // TOS is byte 1 of the IPv4 header.
            let tos = (libc::SKF_NET_OFF + 1) as u32;
            p.push(stmt(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, tos));
            p.push(stmt(libc::BPF_ALU | libc::BPF_RSH | libc::BPF_K, 2));
        }
        Field::PayloadByte(offset) => {
            p.push(stmt(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, offset));
        }
    }
    // Jumps first, then the default return, then one return per case:
    //   jeq v0 -> ret i0; jeq v1 -> ret i1; ...; ret default; ret i0; ret i1; ...
    let n = cases.len();
    for (j, &(value, _)) in cases.iter().enumerate() {
        // From jump j, skip the remaining jumps (n - j - 1) and the default return (1), then
        // j returns.
        let to = (n - j - 1) + 1 + j;
        p.push(jump_eq(u32::from(value), to as u8));
    }
    p.push(stmt(libc::BPF_RET | libc::BPF_K, default));
    for &(_, index) in cases {
        p.push(stmt(libc::BPF_RET | libc::BPF_K, index));
    }
    p
}

/// Binds `count` nonblocking UDP sockets to `addr` with `SO_REUSEPORT`, in index order, and
/// attaches `program` to the lane. Port 0 picks one port for all of them.
pub(crate) fn bind_lane(
    addr: SocketAddr,
    count: usize,
    program: &[Insn],
) -> io::Result<Vec<UdpSocket>> {
    use nix::sys::socket::{
        bind, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn,
        SockaddrIn6,
    };
    let mut socks: Vec<UdpSocket> = Vec::with_capacity(count);
    let mut at = addr;
    for i in 0..count {
        let family = match at {
            SocketAddr::V4(_) => AddressFamily::Inet,
            SocketAddr::V6(_) => AddressFamily::Inet6,
        };
        let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
        let fd: OwnedFd = socket(family, SockType::Datagram, flags, None)?;
        setsockopt(&fd, sockopt::ReusePort, &true)?;
        match at {
            SocketAddr::V4(a) => bind(fd.as_raw_fd(), &SockaddrIn::from(a))?,
            SocketAddr::V6(a) => bind(fd.as_raw_fd(), &SockaddrIn6::from(a))?,
        }
        let sock = UdpSocket::from(fd);
        if i == 0 {
            at = sock.local_addr()?;
            attach(&sock, program)?;
        }
        socks.push(sock);
    }
    Ok(socks)
}

fn attach(sock: &UdpSocket, program: &[Insn]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // Pointer contract (syscall!): `prog` and the instructions it points at outlive the call,
    // and the kernel copies the program before it returns.
    syscall!(setsockopt(
        sock.as_raw_fd(),
        libc::SOL_SOCKET,
        SO_ATTACH_REUSEPORT_CBPF,
        (&prog as *const libc::sock_fprog).cast(),
        std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t
    ))
    .map(drop)
}

/// Sets the IPv4 TOS byte of a sending socket (`IP_TOS`), so tests and clients can mark their
/// traffic.
///
/// # Examples
#[doc = os_example!()]
/// let sock = std::net::UdpSocket::bind("127.0.0.1:0")?;
/// lfrt::os::set_tos(&sock, 46 << 2)?; // DSCP EF
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn set_tos(sock: &UdpSocket, tos: u8) -> io::Result<()> {
    let v = libc::c_int::from(tos);
    // Pointer contract (syscall!): `v` is a live c_int of the size passed.
    syscall!(setsockopt(
        sock.as_raw_fd(),
        libc::IPPROTO_IP,
        libc::IP_TOS,
        (&v as *const libc::c_int).cast(),
        std::mem::size_of::<libc::c_int>() as libc::socklen_t
    ))
    .map(drop)
}
