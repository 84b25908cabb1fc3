//! What a run is: the traffic model ([`Mode`]: closed-loop window or open-loop rate), the shape
//! of the client sockets ([`Clients`]), the whole [`LoadConfig`] with its defaults and limits
//! and its validation, and the port lists of the command line ([`parse_ports`]).

use super::wire::HEADER_LEN;
use serde::Serialize;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

/// Smallest allowed datagram size in bytes (the header alone).
pub const MIN_SIZE: usize = HEADER_LEN;
/// Largest allowed datagram size in bytes.
pub const MAX_SIZE: usize = 65_000;
/// Default datagram size in bytes.
pub const DEFAULT_SIZE: usize = 64;
/// Default run duration.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(5);
/// Default time to wait for outstanding replies after sending stops.
pub const DEFAULT_DRAIN: Duration = Duration::from_millis(200);
/// Default closed-loop reply timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(200);
/// Default closed-loop window per port (used by the CLI).
pub const DEFAULT_WINDOW: usize = 8;
/// Upper bound on the client sockets of one run (ports × clients per port).
const MAX_SOCKETS: usize = 16_384;

/// Upper bound on the closed-loop window per port.
const MAX_WINDOW: usize = 1 << 20;
/// Upper bound on the open-loop rate (datagrams per second).
const MAX_RATE: u64 = 100_000_000;

/// How datagrams are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Mode {
    /// Closed loop: keep `window` datagrams outstanding per port.
    Closed {
        /// Outstanding datagrams per port (>= 1).
        window: usize,
    },
    /// Open loop: send `rate_per_s` datagrams per second in total, spread
    /// round-robin across the ports.
    Open {
        /// Total send rate in datagrams per second (>= 1).
        rate_per_s: u64,
    },
}

/// The shape of the generator's client sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "clients", rename_all = "lowercase")]
pub enum Clients {
    /// Many independent clients: `per_port` sockets per target port, one datagram per
    /// `send`, one reply per `recv`. In closed loop the port's window is split evenly over
    /// its clients, so `per_port` may not exceed it.
    Unbatched {
        /// Client sockets per target port (>= 1).
        per_port: usize,
    },
    /// One socket per target port, up to [`IO_BATCH`](super::IO_BATCH) datagrams per `sendmmsg`/`recvmmsg`.
    Batched,
}

impl Clients {
    /// The default shape for `mode`: independent clients with one outstanding datagram
    /// each in closed loop (`per_port` = the window), one client per port in open loop.
    pub fn default_for(mode: Mode) -> Clients {
        match mode {
            Mode::Closed { window } => Clients::Unbatched {
                per_port: window.max(1),
            },
            Mode::Open { .. } => Clients::Unbatched { per_port: 1 },
        }
    }

    /// Sockets per target port.
    pub fn per_port(self) -> usize {
        match self {
            Clients::Unbatched { per_port } => per_port,
            Clients::Batched => 1,
        }
    }

    /// `"unbatched"` or `"batched"`.
    pub fn name(self) -> &'static str {
        match self {
            Clients::Unbatched { .. } => "unbatched",
            Clients::Batched => "batched",
        }
    }
}

/// Configuration of one load-generation run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Target host; must be a loopback address (127.0.0.0/8 or ::1).
    pub target: IpAddr,
    /// Target UDP ports.
    pub ports: Vec<u16>,
    /// Scheduling mode.
    pub mode: Mode,
    /// Client sockets per port and how they send and receive.
    pub clients: Clients,
    /// Datagram size in bytes (`MIN_SIZE..=MAX_SIZE`).
    pub size: usize,
    /// How long to send for.
    pub duration: Duration,
    /// How long to wait for outstanding replies after sending stops (the
    /// drain ends early once every sent datagram has been answered).
    pub drain: Duration,
    /// Closed loop: an outstanding datagram frees its window slot after this
    /// long. Ignored in open loop.
    pub timeout: Duration,
    /// Stop sending after this many send attempts in total (all ports).
    pub max_messages: Option<u64>,
}

impl LoadConfig {
    /// A configuration with default size, duration, drain and timeout, and the default
    /// client shape for `mode` ([`Clients::default_for`]).
    pub fn new(target: IpAddr, ports: Vec<u16>, mode: Mode) -> Self {
        LoadConfig {
            target,
            ports,
            mode,
            clients: Clients::default_for(mode),
            size: DEFAULT_SIZE,
            duration: DEFAULT_DURATION,
            drain: DEFAULT_DRAIN,
            timeout: DEFAULT_TIMEOUT,
            max_messages: None,
        }
    }

    /// Checks the configuration; errors are `InvalidInput` with a message
    /// naming the offending setting.
    pub fn validate(&self) -> io::Result<()> {
        check_loopback(self.target)?;
        if self.ports.is_empty() {
            return Err(invalid("no target ports given"));
        }
        if self.ports.contains(&0) {
            return Err(invalid("target port 0 is not a valid destination"));
        }
        if self.ports.len() > u32::MAX as usize {
            return Err(invalid("too many target ports"));
        }
        if !(MIN_SIZE..=MAX_SIZE).contains(&self.size) {
            return Err(invalid(format!(
                "datagram size {} out of range {MIN_SIZE}..={MAX_SIZE}",
                self.size
            )));
        }
        if let Clients::Unbatched { per_port } = self.clients {
            if per_port == 0 {
                return Err(invalid("clients per port must be at least 1"));
            }
            if let Mode::Closed { window } = self.mode {
                if per_port > window {
                    return Err(invalid(format!(
                        "{per_port} clients per port exceed the window of {window}: \
                         every client needs at least one outstanding datagram"
                    )));
                }
            }
        }
        if self.ports.len().saturating_mul(self.clients.per_port()) > MAX_SOCKETS {
            return Err(invalid(format!(
                "{} ports x {} clients per port exceed {MAX_SOCKETS} sockets",
                self.ports.len(),
                self.clients.per_port()
            )));
        }
        match self.mode {
            Mode::Closed { window } => {
                if window == 0 || window > MAX_WINDOW {
                    return Err(invalid(format!(
                        "window {window} out of range 1..={MAX_WINDOW}"
                    )));
                }
                if self.timeout < Duration::from_millis(1) {
                    return Err(invalid("closed-loop timeout must be at least 1 ms"));
                }
            }
            Mode::Open { rate_per_s } => {
                if rate_per_s == 0 || rate_per_s > MAX_RATE {
                    return Err(invalid(format!(
                        "rate {rate_per_s}/s out of range 1..={MAX_RATE}"
                    )));
                }
            }
        }
        // Keep all deadline arithmetic comfortably inside u64 nanoseconds.
        let year = Duration::from_secs(365 * 24 * 3600);
        if self.duration > year || self.drain > year || self.timeout > year {
            return Err(invalid(
                "duration, drain and timeout must each be below one year",
            ));
        }
        Ok(())
    }
}

/// Parses a port list: a range `"7000-7003"`, a comma list `"7000,7002"`, or
/// a comma list of ranges and single ports. Port 0, reversed ranges and
/// repeated ports are rejected.
pub fn parse_ports(spec: &str) -> Result<Vec<u16>, String> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err("empty port list".to_string());
    }
    let mut ports: Vec<u16> = Vec::new();
    for item in spec.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("empty entry in port list {spec:?}"));
        }
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (parse_port(a)?, parse_port(b)?),
            None => {
                let p = parse_port(item)?;
                (p, p)
            }
        };
        if lo > hi {
            return Err(format!("reversed port range {item:?}"));
        }
        for p in lo..=hi {
            if ports.contains(&p) {
                return Err(format!("port {p} listed more than once"));
            }
            ports.push(p);
        }
    }
    Ok(ports)
}

fn parse_port(s: &str) -> Result<u16, String> {
    let s = s.trim();
    let p: u16 = s
        .parse()
        .map_err(|_| format!("invalid port {s:?} (expected 1..=65535)"))?;
    if p == 0 {
        return Err("port 0 is not a valid target port".to_string());
    }
    Ok(p)
}

pub(crate) fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

fn check_loopback(ip: IpAddr) -> io::Result<()> {
    let ok = match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6 == Ipv6Addr::LOCALHOST,
    };
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "target {ip} is not a loopback address; only 127.0.0.0/8 and ::1 may be targeted"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::threads::{run, run_threaded};
    use std::net::Ipv4Addr;

    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn parse_ports_accepts_ranges_and_lists() {
        assert_eq!(
            parse_ports("7000-7003").unwrap(),
            vec![7000, 7001, 7002, 7003]
        );
        assert_eq!(parse_ports("7000,7002").unwrap(), vec![7000, 7002]);
        assert_eq!(parse_ports("7000").unwrap(), vec![7000]);
        assert_eq!(parse_ports(" 7000 , 7002 ").unwrap(), vec![7000, 7002]);
        assert_eq!(parse_ports("7000-7000").unwrap(), vec![7000]);
        assert_eq!(
            parse_ports("1,7000-7001,65535").unwrap(),
            vec![1, 7000, 7001, 65535]
        );
    }

    #[test]
    fn parse_ports_rejects_bad_specs() {
        for bad in [
            "",
            " ",
            "abc",
            "7000,",
            ",7000",
            "7000,,7001",
            "7003-7000",
            "0",
            "0-3",
            "65536",
            "-7000",
            "7000-",
            "7000-7001-7002",
            "7000,7000",
            "7000-7002,7001",
            "70 00",
        ] {
            assert!(parse_ports(bad).is_err(), "{bad:?} should be rejected");
        }
        let e = parse_ports("7003-7000").unwrap_err();
        assert!(e.contains("reversed"), "{e}");
        let e = parse_ports("7000,7000").unwrap_err();
        assert!(e.contains("7000"), "{e}");
    }

    #[test]
    fn non_loopback_targets_are_rejected() {
        for ip in [
            "10.0.0.1",
            "192.168.1.1",
            "8.8.8.8",
            "0.0.0.0",
            "::",
            "::2",
            "::ffff:127.0.0.1",
        ] {
            let cfg = LoadConfig::new(ip.parse().unwrap(), vec![7000], Mode::Closed { window: 1 });
            let e = run(&cfg).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{ip}");
            assert!(e.to_string().contains("loopback"), "{ip}: {e}");
        }
        for ip in ["127.0.0.1", "127.255.255.254", "::1"] {
            let cfg = LoadConfig::new(ip.parse().unwrap(), vec![7000], Mode::Closed { window: 1 });
            cfg.validate().unwrap();
        }
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let base = LoadConfig::new(LOCAL, vec![7000], Mode::Closed { window: 1 });
        let mut bad = Vec::new();
        let mut c = base.clone();
        c.size = 19;
        bad.push(c);
        let mut c = base.clone();
        c.size = 65_001;
        bad.push(c);
        let mut c = base.clone();
        c.ports.clear();
        bad.push(c);
        let mut c = base.clone();
        c.ports = vec![0];
        bad.push(c);
        let mut c = base.clone();
        c.mode = Mode::Closed { window: 0 };
        bad.push(c);
        let mut c = base.clone();
        c.mode = Mode::Open { rate_per_s: 0 };
        bad.push(c);
        let mut c = base.clone();
        c.timeout = Duration::ZERO;
        bad.push(c);
        for c in bad {
            let e = run(&c).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{c:?}");
        }
        assert_eq!(
            run_threaded(&base, 0).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
