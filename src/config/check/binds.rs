//! Addresses: collisions between a document's own sockets (the kernel's rule), and every
//! address bound once now.

use super::super::*;
use super::*;
use std::net::{IpAddr, SocketAddr};

/// Whether two sockets of one protocol, bound to `a` and `b` without `SO_REUSEPORT`, would
/// collide (`EADDRINUSE`), whichever is bound first.
///
/// The rule, as Linux applies it: port 0 asks for an ephemeral port and never collides; on one
/// port, equal addresses collide, and a wildcard (`0.0.0.0`, `[::]`) takes the port on every
/// address of its family. `[::]` also takes it on every IPv4 address: std does not set
/// `IPV6_V6ONLY`, so the socket is dual-stack under Linux's default `net.ipv6.bindv6only = 0`
/// (lfrt assumes that default; with `bindv6only = 1` this refuses a pair the kernel would
/// accept). An IPv4-mapped IPv6 address (`[::ffff:127.0.0.1]`) is its IPv4 address.
pub(crate) fn addresses_collide(a: SocketAddr, b: SocketAddr) -> bool {
    if a.port() == 0 || a.port() != b.port() {
        return false;
    }
    let ip = |a: SocketAddr| a.ip().to_canonical();
    match (ip(a), ip(b)) {
        (x, y) if x == y => true,
        (IpAddr::V4(x), IpAddr::V4(y)) => x.is_unspecified() || y.is_unspecified(),
        (IpAddr::V6(x), IpAddr::V6(y)) => x.is_unspecified() || y.is_unspecified(),
        (IpAddr::V6(v6), IpAddr::V4(_)) | (IpAddr::V4(_), IpAddr::V6(v6)) => v6.is_unspecified(),
    }
}

impl RuntimeConfig {
    /// Binds every handler's address and drops the socket at once: the port is free *now*.
    pub(crate) fn check_binds(&self) -> Result<(), Invalid> {
        for (gi, g) in self.lanes.iter().enumerate() {
            for (hi, h) in g.handlers.iter().enumerate() {
                let probe = match *h {
                    HandlerConfig::UdpEcho { bind, .. } => std::net::UdpSocket::bind(bind)
                        .map(drop)
                        .map_err(|e| (bind, e)),
                    HandlerConfig::TcpEcho { bind, .. } => std::net::TcpListener::bind(bind)
                        .map(drop)
                        .map_err(|e| (bind, e)),
                    HandlerConfig::Timer { .. } => Ok(()),
                };
                if let Err((bind, e)) = probe {
                    return Err(Invalid {
                        section: Section::Handler {
                            lane: gi,
                            handler: hi,
                        },
                        field: "bind",
                        message: format!("cannot bind {bind}: {e}"),
                    });
                }
            }
        }
        self.check_band_binds()
    }
}
