//! Links per priority range: which TCP connection each Zenoh priority travels on, and how many
//! of those connections exist, counted from the kernel's socket table.
//!
//! ```text
//!  session A (connect)                                    session B (listen)
//!  ───────────────────                                    ──────────────────
//!  tcp/B:7447?prio=1-3 ── TCP connection 1 (real-time … interactive-low) ──▶ :7447?prio=1-3
//!  tcp/B:7448?prio=4-7 ── TCP connection 2 (data-high … background) ───────▶ :7448?prio=4-7
//!                          SO_SNDBUF/SO_RCVBUF bounded (`bulk_socket_buffer`)
//! ```
//!
//! Zenoh sends each message on the link whose `prio=` range holds its priority (the smallest
//! such range if several do), else on a link without a range, else on any link
//! ([`Link::carries`] follows the same rule). Several links per peer need Zenoh's
//! `transport_multilink` feature and `transport/unicast/max_links` ≥ the links on **both**
//! sides: without them the second link is refused and every priority shares one connection, so
//! `real-time` frames queue behind a flood's bytes in the socket buffers.
//!
//! A listen endpoint counts the established connections accepted on its port, a connect endpoint
//! those whose remote port is its port. For this process the sockets are asked directly
//! (`/proc/self/fd`, then `getsockname`, `getpeername` and `TCP_INFO` on each socket: system
//! calls on its own descriptors, cheap enough for the watcher's 100 ms). For another process
//! (`lfrt-zenoh doctor --pid`) they come from `/proc/PID/net/tcp{,6}`, read once: reading that
//! table walks the kernel's whole TCP hash, bucket by bucket with bottom halves disabled, which
//! delays the network's receive processing. Polled every 100 ms it raised Zenoh's put → callback
//! p99 on loopback from about 0.16 ms to 3 ms (measured in issue #29), so it is never polled.

use crate::config::Config;
use crate::PRIORITIES;
use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use zenoh::config::EndPoint;
use zenoh::qos::Priority;

/// One configured endpoint, and the TCP connections on it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The endpoint as written in `[session]`.
    pub endpoint: String,
    /// Listened on (`true`) or connected to.
    pub listen: bool,
    /// Its `prio=` range (highest priority first), or `None`: it carries any priority that no
    /// ranged link carries.
    pub priorities: Option<(Priority, Priority)>,
    /// Established TCP connections on it owned by the process.
    pub established: usize,
}

impl Link {
    /// Whether Zenoh sends priority `p` on this link, given all the links of the session
    /// (`links`, which holds `self`) that are established.
    pub fn carries(&self, p: Priority, links: &[Link]) -> bool {
        carrier(p, links).is_some_and(|c| std::ptr::eq(c, self))
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let range = match self.priorities {
            Some((a, b)) => format!("{}…{}", crate::priority_name(a), crate::priority_name(b)),
            None => "any priority".into(),
        };
        write!(
            f,
            "{} {} ({range}): {} connection(s)",
            if self.listen { "listen" } else { "connect" },
            self.endpoint,
            self.established
        )
    }
}

/// The established link that carries `p`, as Zenoh picks it: the smallest `prio=` range that
/// holds `p`, else the first link without a range, else the first link.
pub(crate) fn carrier(p: Priority, links: &[Link]) -> Option<&Link> {
    let up: Vec<&Link> = links.iter().filter(|l| l.established > 0).collect();
    let n = p as u8;
    up.iter()
        .filter(|l| {
            l.priorities
                .is_some_and(|(a, b)| (a as u8..=b as u8).contains(&n))
        })
        .min_by_key(|l| l.priorities.map_or(u8::MAX, |(a, b)| b as u8 - a as u8))
        .or_else(|| up.iter().find(|l| l.priorities.is_none()))
        .or_else(|| up.first())
        .copied()
}

/// Checks one `[session]` endpoint: a Zenoh endpoint on `tcp/`, with an optional `prio=A-B`
/// (or `prio=A`) range of priorities 1 to 7. Returns the range.
pub(crate) fn endpoint_priorities(endpoint: &str) -> Result<Option<(Priority, Priority)>, String> {
    let e = EndPoint::from_str(endpoint)
        .map_err(|e| format!("`{endpoint}` is not a Zenoh endpoint ({e})"))?;
    if e.protocol().as_str() != "tcp" {
        return Err(format!(
            "`{endpoint}`: only `tcp/` endpoints (this build of lfrt-zenoh has Zenoh's TCP transport only)"
        ));
    }
    let metadata = e.metadata();
    let Some(range) = metadata.get("prio") else {
        return Ok(None);
    };
    let bad = || {
        format!("`{endpoint}`: prio={range} is not a range of Zenoh priorities (`prio=1-3`: 1 is real-time, 7 background)")
    };
    let bound = |s: &str| {
        s.parse::<usize>()
            .ok()
            .filter(|n| (1..=7).contains(n))
            .map(|n| PRIORITIES[n - 1])
    };
    let (a, b) = match range.split_once('-') {
        Some((a, b)) => (bound(a).ok_or_else(bad)?, bound(b).ok_or_else(bad)?),
        None => {
            let p = bound(range).ok_or_else(bad)?;
            (p, p)
        }
    };
    if (a as u8) > (b as u8) {
        return Err(bad());
    }
    Ok(Some((a, b)))
}

/// The endpoint as handed to Zenoh: a link that does not carry `real-time` gets `bytes` of
/// socket buffer each way, unless it sets its own or `bytes` is 0.
pub(crate) fn zenoh_endpoint(endpoint: &str, bytes: usize) -> String {
    let bulk = matches!(endpoint_priorities(endpoint), Ok(Some((a, _))) if a != Priority::RealTime);
    if !bulk || bytes == 0 || endpoint.contains("so_sndbuf") || endpoint.contains("so_rcvbuf") {
        return endpoint.to_owned();
    }
    let sep = if endpoint.contains('#') { ';' } else { '#' };
    format!("{endpoint}{sep}so_sndbuf={bytes};so_rcvbuf={bytes}")
}

/// The links `cfg` configures, with the established TCP connections process `pid` has on each.
///
/// # Examples
/// ```
/// let cfg = lfrt_zenoh::Config::parse(
///     "[session]\nlisten = [\"tcp/127.0.0.1:7447?prio=1-3\", \"tcp/127.0.0.1:7448?prio=4-7\"]\n",
/// )?;
/// let links = lfrt_zenoh::links(&cfg, std::process::id());
/// assert_eq!(links.len(), 2);
/// assert_eq!(links[0].established, 0, "nobody connected");
/// # Ok::<(), lfrt_zenoh::Error>(())
/// ```
pub fn links(cfg: &Config, pid: u32) -> Vec<Link> {
    let sockets = if pid == std::process::id() {
        established_here()
    } else {
        established(pid)
    };
    let side = |listen: bool, list: &[String]| -> Vec<Link> {
        list.iter()
            .map(|e| {
                let port = EndPoint::from_str(e)
                    .ok()
                    .and_then(|e| e.address().as_str().rsplit(':').next()?.parse::<u16>().ok());
                Link {
                    endpoint: e.clone(),
                    listen,
                    priorities: endpoint_priorities(e).ok().flatten(),
                    established: port.map_or(0, |port| {
                        sockets
                            .iter()
                            .filter(|s| if listen { s.0 == port } else { s.1 == port })
                            .count()
                    }),
                }
            })
            .collect()
    };
    let mut out = side(true, &cfg.session.listen);
    out.extend(side(false, &cfg.session.connect));
    out
}

/// The port in a socket address the kernel filled in (IPv4 or IPv6).
fn port_of(addr: &libc::sockaddr_storage) -> Option<u16> {
    match i32::from(addr.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a `sockaddr_in`, which it is large and
            // aligned enough for.
            let a =
                unsafe { &*(addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(u16::from_be(a.sin_port))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for `sockaddr_in6`.
            let a =
                unsafe { &*(addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(u16::from_be(a.sin6_port))
        }
        _ => None,
    }
}

/// `(local port, remote port)` of one descriptor of this process, if it is an established TCP
/// socket.
fn established_fd(fd: i32) -> Option<(u16, u16)> {
    let mut protocol: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: reads an int option into a valid out-pointer of the given length; a descriptor
    // closed (or reused) meanwhile only makes the call fail or describe another socket.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PROTOCOL,
            (&mut protocol as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 || protocol != libc::IPPROTO_TCP {
        return None;
    }
    // SAFETY: `tcp_info` is plain old data; all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: as above, into a `tcp_info` of the given length (the kernel fills at most that).
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    const TCP_ESTABLISHED: u8 = 1;
    if rc != 0 || info.tcpi_state != TCP_ESTABLISHED {
        return None;
    }
    let ends = |peer: bool| {
        // SAFETY: as for `tcp_info`.
        let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let p = (&mut addr as *mut libc::sockaddr_storage).cast();
        // SAFETY: a valid out-pointer and its length, on a descriptor of this process.
        let rc = unsafe {
            if peer {
                libc::getpeername(fd, p, &mut len)
            } else {
                libc::getsockname(fd, p, &mut len)
            }
        };
        (rc == 0).then(|| port_of(&addr)).flatten()
    };
    Some((ends(false)?, ends(true)?))
}

/// `(local port, remote port)` of every established TCP socket of this process, asked of the
/// sockets themselves.
fn established_here() -> Vec<(u16, u16)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:["))
        })
        .filter_map(|fd| fd.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(established_fd)
        .collect()
}

/// `(local port, remote port)` of every established TCP socket process `pid` owns, from its
/// `/proc` tables (read once: see the module docs).
fn established(pid: u32) -> Vec<(u16, u16)> {
    let mut inodes = HashSet::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in dir.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                let t = target.to_string_lossy();
                if let Some(inode) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                    inodes.insert(inode.to_owned());
                }
            }
        }
    }
    let mut out = Vec::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        out.extend(parse_tcp_table(&text, |inode| inodes.contains(inode)));
    }
    out
}

/// The established rows of a `/proc/net/tcp` table whose inode `owned` accepts.
fn parse_tcp_table(text: &str, owned: impl Fn(&str) -> bool) -> Vec<(u16, u16)> {
    const ESTABLISHED: &str = "01";
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != ESTABLISHED || !owned(f[9]) {
                return None;
            }
            Some((port(f[1])?, port(f[2])?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tcp_table_row_gives_its_ports_when_established_and_owned() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1D27 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 111 1 0 20 4 30 10 -1\n\
   1: 0100007F:1D27 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 112 1 0 100 0 0 10 0\n\
   2: 0100007F:1D28 0100007F:C351 01 00000000:00000000 00:00000000 00000000     0        0 113 1 0 20 4 30 10 -1\n";
        let rows = parse_tcp_table(table, |i| i == "111" || i == "112");
        assert_eq!(
            rows,
            vec![(0x1D27, 0xC350)],
            "the listener (0A) and the unowned row are out"
        );
    }

    #[test]
    fn priority_ranges_are_parsed_and_checked() {
        let p = |e: &str| endpoint_priorities(e);
        assert_eq!(p("tcp/127.0.0.1:7447"), Ok(None));
        assert_eq!(
            p("tcp/127.0.0.1:7447?prio=1-3"),
            Ok(Some((Priority::RealTime, Priority::InteractiveLow)))
        );
        assert_eq!(
            p("tcp/127.0.0.1:7447?prio=7"),
            Ok(Some((Priority::Background, Priority::Background)))
        );
        for bad in [
            "tcp/127.0.0.1:1?prio=0-3",
            "tcp/127.0.0.1:1?prio=3-1",
            "tcp/127.0.0.1:1?prio=x",
        ] {
            assert!(p(bad).unwrap_err().contains("is not a range"), "{bad}");
        }
        assert!(p("udp/127.0.0.1:1").unwrap_err().contains("only `tcp/`"));
        assert!(p("127.0.0.1").is_err());
    }

    #[test]
    fn bulk_links_get_bounded_buffers_and_the_real_time_link_keeps_the_kernels() {
        assert_eq!(
            zenoh_endpoint("tcp/127.0.0.1:1?prio=4-7", 65536),
            "tcp/127.0.0.1:1?prio=4-7#so_sndbuf=65536;so_rcvbuf=65536"
        );
        assert_eq!(
            zenoh_endpoint("tcp/127.0.0.1:1?prio=1-3", 65536),
            "tcp/127.0.0.1:1?prio=1-3"
        );
        assert_eq!(zenoh_endpoint("tcp/127.0.0.1:1", 65536), "tcp/127.0.0.1:1");
        assert_eq!(
            zenoh_endpoint("tcp/127.0.0.1:1?prio=4-7", 0),
            "tcp/127.0.0.1:1?prio=4-7"
        );
        assert_eq!(
            zenoh_endpoint("tcp/127.0.0.1:1?prio=4-7#so_sndbuf=8192", 65536),
            "tcp/127.0.0.1:1?prio=4-7#so_sndbuf=8192"
        );
    }

    #[test]
    fn each_priority_goes_on_the_smallest_established_range_that_holds_it() {
        let link = |prio: Option<(u8, u8)>, established| Link {
            endpoint: String::new(),
            listen: true,
            priorities: prio.map(|(a, b)| (PRIORITIES[a as usize - 1], PRIORITIES[b as usize - 1])),
            established,
        };
        let links = [
            link(Some((1, 7)), 1),
            link(Some((1, 3)), 1),
            link(Some((4, 7)), 0),
        ];
        assert!(links[1].carries(Priority::RealTime, &links));
        assert!(!links[0].carries(Priority::RealTime, &links));
        assert!(
            links[0].carries(Priority::Background, &links),
            "4-7 is not established: the wider range carries it"
        );
        let plain = [link(None, 1), link(Some((1, 1)), 1)];
        assert!(plain[0].carries(Priority::Data, &plain));
        assert!(plain[1].carries(Priority::RealTime, &plain));
    }
}
