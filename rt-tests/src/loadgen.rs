//! UDP load generator for benchmarking echo servers on loopback.
//!
//! The generator drives connected, nonblocking UDP client sockets from one
//! epoll loop per thread (a `timerfd` provides sub-millisecond wake-ups for
//! pacing and timeouts). Its sockets take one of two shapes ([`Clients`]):
//!
//! * **Independent clients** (the default): `clients_per_port` sockets per
//!   target port, each with its own source port, sending one datagram per
//!   `send` and reading one reply per `recv`. This is what many real clients
//!   look like to the kernel and to a server: separate sockets, separate
//!   system calls, so a server finds few datagrams per wake-up (issue 22).
//! * **Batched**: one socket per port; one `recvmmsg` takes up to
//!   [`IO_BATCH`] echoes, the sends they trigger are queued in that port's
//!   outbox and leave in one `sendmmsg` just before the thread waits again
//!   (or when the outbox is full). It costs the generator far less per
//!   datagram (issue 13), and hands a server about 16 datagrams per wake-up.
//!
//! Either way the generator's own CPU share is measured (each thread's
//! `CLOCK_THREAD_CPUTIME_ID` over its send phase) and reported: above
//! [`GEN_SATURATED_PCT`] a figure measures the generator, not the server.
//!
//! # Wire format
//!
//! Every datagram is `size` bytes (20..=65000) laid out as:
//!
//! | bytes   | content                                              |
//! |---------|------------------------------------------------------|
//! | 0..8    | sequence number, `u64` LE, unique within one run     |
//! | 8..16   | send timestamp, `CLOCK_MONOTONIC` ns, `u64` LE       |
//! | 16..20  | index of the target port in [`LoadConfig::ports`], `u32` LE |
//! | 20..    | padding: a pseudo-random pattern seeded from the three fields above |
//!
//! The server must echo the datagram verbatim. Because the padding pattern is
//! derived from the header, a changed byte anywhere in the datagram is
//! detected (a payload of exactly 20 bytes has no padding; there only the
//! port index, the sequence range and the timestamp range are checked).
//!
//! # Modes
//!
//! * [`Mode::Closed`]: `window` datagrams outstanding per port (split evenly
//!   over the port's independent clients); a new one is sent when a reply
//!   arrives or when an outstanding one times out.
//! * [`Mode::Open`]: a fixed total rate spread round-robin over the client
//!   sockets (ports first, so consecutive datagrams go to different ports),
//!   paced against absolute deadlines (`start + k / rate`) so it does not drift.
//!
//! # Accounting
//!
//! Each sequence number has one state byte (outstanding / timed out /
//! received / send failed). `received` counts unique matched echoes (a late
//! echo of a timed-out datagram still counts), `duplicates` counts further
//! echoes of an already received datagram, `corrupt` counts echoes that do not
//! match anything that was sent, and `lost = sent - received` after the drain.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use hdrhistogram::Histogram;
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{
    recvmmsg, sendmmsg, setsockopt, sockopt, MsgFlags, MultiHeaders, SockaddrStorage,
};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{
    ClockId as TimerClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags,
};
use nix::time::{clock_gettime, ClockId};
use serde::Serialize;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::AsRawFd;

/// Length of the datagram header (sequence, timestamp, port index).
pub const HEADER_LEN: usize = 20;
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
/// Above this CPU share (% of one CPU, busiest generator thread) a run measures the
/// generator rather than the server: reports flag it (`generator_saturated`).
pub const GEN_SATURATED_PCT: f64 = 80.0;
/// Upper bound on the client sockets of one run (ports × clients per port).
const MAX_SOCKETS: usize = 16_384;

/// Upper bound on the closed-loop window per port.
const MAX_WINDOW: usize = 1 << 20;
/// Upper bound on the open-loop rate (datagrams per second).
const MAX_RATE: u64 = 100_000_000;
/// An open-loop send counts as late when it misses its deadline by more than
/// `max(LATE_SLACK_NS, one interval)`.
const LATE_SLACK_NS: u64 = 100_000;
/// When the open-loop sender is behind by more than
/// `max(CATCHUP_LAG_NS, two intervals)`, the missed slots are skipped (and
/// counted as late) instead of being sent in one burst.
const CATCHUP_LAG_NS: u64 = 10_000_000;
/// At most this many open-loop sends per loop iteration before receives are
/// serviced again.
const MAX_BURST: usize = 64;
/// At most this many `recv` calls per socket readiness event.
const RECV_BATCH: usize = 64;
/// Datagrams per `recvmmsg` / `sendmmsg` call.
pub const IO_BATCH: usize = 32;
/// Safety cap on one `epoll_wait` (the timerfd normally wakes us earlier).
const SAFETY_WAIT_MS: u16 = 100;
/// Requested socket receive buffer (best effort, capped by `rmem_max`).
const SOCKET_RCVBUF: usize = 4 << 20;
/// Upper bound on the number of state bytes preallocated up front.
const MAX_PREALLOC: u64 = 1 << 24;
/// epoll token of the pacing/timeout timer.
const TIMER_TOKEN: u64 = u64::MAX;
const NS_PER_S: u64 = 1_000_000_000;

const ST_OUTSTANDING: u8 = 0;
const ST_TIMED_OUT: u8 = 1;
const ST_RECEIVED: u8 = 2;
const ST_FAILED: u8 = 3;

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
    /// One socket per target port, up to [`IO_BATCH`] datagrams per `sendmmsg`/`recvmmsg`.
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

/// Round-trip-time percentiles in microseconds (all 0 when nothing was received).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RttSummary {
    /// Median RTT in µs.
    pub p50: f64,
    /// 99th percentile RTT in µs.
    pub p99: f64,
    /// 99.9th percentile RTT in µs.
    pub p999: f64,
    /// Largest RTT in µs.
    pub max: f64,
    /// Mean RTT in µs.
    pub mean: f64,
}

/// Result of one run. `sent == received + lost` always holds.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// Datagrams handed to the kernel successfully.
    pub sent: u64,
    /// Unique sent datagrams whose intact echo came back.
    pub received: u64,
    /// `sent - received` after the drain.
    pub lost: u64,
    /// Intact echoes of a datagram that had already been received.
    pub duplicates: u64,
    /// Echoes that match nothing that was sent (wrong size, port index,
    /// sequence, timestamp or padding). They are not counted as received.
    pub corrupt: u64,
    /// Open loop: sends that missed their deadline by more than
    /// max(100 µs, one interval), plus slots skipped because the sender fell
    /// more than max(10 ms, two intervals) behind. Always 0 in closed loop.
    pub late_sends: u64,
    /// Send attempts the kernel refused (ECONNREFUSED twice in a row,
    /// EAGAIN, ENOBUFS); they are not counted in `sent`.
    pub send_errors: u64,
    /// Active seconds: from the start until sending stopped or the last
    /// reply arrived, whichever is later.
    pub duration_s: f64,
    /// `received / duration_s`.
    pub throughput_msgs_per_s: f64,
    /// Round-trip times.
    pub rtt_us: RttSummary,
    /// Datagrams received per target port, in `LoadConfig::ports` order.
    pub received_per_port: Vec<u64>,
    /// Per-port fairness: the least-served port's `received` over the mean per port (1.0 =
    /// every port served equally; 0.0 when nothing was received).
    pub port_fairness: f64,
    /// System calls that sent datagrams (`send` or `sendmmsg`): equals `sent` with
    /// unbatched clients.
    pub send_calls: u64,
    /// System calls that returned datagrams (`recv` or `recvmmsg`): equals `received +
    /// duplicates + corrupt` with unbatched clients.
    pub recv_calls: u64,
    /// Distinct client sockets (source ports) the datagrams were sent from.
    pub client_sockets: usize,
    /// CPU share of the busiest generator thread over its send phase, in % of one CPU
    /// (`CLOCK_THREAD_CPUTIME_ID` / wall time).
    pub generator_cpu_pct: f64,
    /// CPU time of all generator threads over the send phase, in % of one CPU.
    pub generator_cpu_total_pct: f64,
    /// `generator_cpu_pct` > [`GEN_SATURATED_PCT`]: the figures measure the generator.
    pub generator_saturated: bool,
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

/// Runs the load described by `cfg` on the calling thread and returns the
/// report. Equivalent to `run_threaded(cfg, 1)`.
pub fn run(cfg: &LoadConfig) -> io::Result<LoadReport> {
    run_threaded(cfg, 1)
}

/// Runs the load with the ports split round-robin over `threads` threads
/// (capped at the number of ports). The open-loop rate and `max_messages`
/// are divided in proportion to each thread's ports; sequence numbers stay
/// unique across threads.
pub fn run_threaded(cfg: &LoadConfig, threads: usize) -> io::Result<LoadReport> {
    cfg.validate()?;
    if threads == 0 {
        return Err(invalid("thread count must be at least 1"));
    }
    let threads = threads.min(cfg.ports.len());
    let nports = cfg.ports.len() as u64;

    // Thread k takes ports k, k + threads, …; its sockets are ordered client by client, port
    // by port, so that round-robin over them alternates between ports.
    let per_port = cfg.clients.per_port();
    let mut groups: Vec<Vec<Target>> = (0..threads).map(|_| Vec::new()).collect();
    for (ti, group) in groups.iter_mut().enumerate() {
        for client in 0..per_port {
            for (i, &port) in cfg.ports.iter().enumerate().skip(ti).step_by(threads) {
                group.push(open_target(cfg.target, port, i as u32, client as u32)?);
            }
        }
    }

    let start_ns = now_ns();
    let mut workers = Vec::with_capacity(threads);
    let mut ports_before = 0u64;
    for (ti, targets) in groups.into_iter().enumerate() {
        let mine = (targets.len() / per_port) as u64;
        let share = |total: u64| {
            split(total, ports_before + mine, nports) - split(total, ports_before, nports)
        };
        let mode = match cfg.mode {
            Mode::Closed { window } => Mode::Closed { window },
            Mode::Open { rate_per_s } => Mode::Open {
                rate_per_s: share(rate_per_s),
            },
        };
        let max_attempts = cfg.max_messages.map_or(u64::MAX, share);
        ports_before += mine;
        workers.push(Worker::new(
            cfg,
            mode,
            targets,
            ti as u64,
            threads as u64,
            max_attempts,
            start_ns,
        )?);
    }

    let results: Vec<WorkerResult> = if workers.len() == 1 {
        vec![workers.pop().expect("one worker").run()?]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = workers
                .into_iter()
                .map(|w| s.spawn(move || w.run()))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect::<io::Result<Vec<_>>>()
        })?
    };
    merge(results, start_ns)
}

/// The least-served port's count over the mean count per port: 1.0 when every port got the
/// same service, 0.0 when nothing was received (or there are no ports).
pub fn port_fairness(per_port: &[u64]) -> f64 {
    let total: u64 = per_port.iter().sum();
    match per_port.iter().min() {
        Some(&min) if total > 0 => min as f64 * per_port.len() as f64 / total as f64,
        _ => 0.0,
    }
}

/// `part` in % of `whole` (0 when `whole` is 0).
fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64 * 100.0
    }
}

/// `floor(total * num / den)` without overflow.
fn split(total: u64, num: u64, den: u64) -> u64 {
    (u128::from(total) * u128::from(num) / u128::from(den)) as u64
}

fn merge(results: Vec<WorkerResult>, start_ns: u64) -> io::Result<LoadReport> {
    let mut hist = new_histogram()?;
    let mut r = LoadReport {
        sent: 0,
        received: 0,
        lost: 0,
        duplicates: 0,
        corrupt: 0,
        late_sends: 0,
        send_errors: 0,
        duration_s: 0.0,
        throughput_msgs_per_s: 0.0,
        rtt_us: RttSummary::default(),
        received_per_port: Vec::new(),
        port_fairness: 0.0,
        send_calls: 0,
        recv_calls: 0,
        client_sockets: 0,
        generator_cpu_pct: 0.0,
        generator_cpu_total_pct: 0.0,
        generator_saturated: false,
    };
    let mut end_ns = start_ns;
    let ports = results
        .iter()
        .flat_map(|w| w.per_port.iter().map(|&(index, _)| index as usize + 1))
        .max()
        .unwrap_or(0);
    r.received_per_port = vec![0; ports];
    let (mut cpu_total, mut wall_max) = (0u64, 0u64);
    for w in results {
        for &(index, received) in &w.per_port {
            r.received_per_port[index as usize] += received;
        }
        r.send_calls += w.c.send_calls;
        r.recv_calls += w.c.recv_calls;
        r.client_sockets += w.per_port.len();
        cpu_total += w.cpu_ns;
        wall_max = wall_max.max(w.wall_ns);
        r.generator_cpu_pct = r.generator_cpu_pct.max(pct(w.cpu_ns, w.wall_ns));
        r.sent += w.c.sent;
        r.received += w.c.received;
        r.lost += w.lost;
        r.duplicates += w.c.duplicates;
        r.corrupt += w.c.corrupt;
        r.late_sends += w.c.late_sends;
        r.send_errors += w.c.send_errors;
        end_ns = end_ns.max(w.active_end_ns);
        hist.add(&w.hist)
            .map_err(|e| io::Error::other(format!("merging RTT histograms: {e:?}")))?;
    }
    assert_eq!(
        r.sent,
        r.received + r.lost,
        "accounting invariant sent == received + lost violated"
    );
    r.port_fairness = port_fairness(&r.received_per_port);
    r.generator_cpu_total_pct = pct(cpu_total, wall_max);
    r.generator_saturated = r.generator_cpu_pct > GEN_SATURATED_PCT;
    r.duration_s = end_ns.saturating_sub(start_ns) as f64 / NS_PER_S as f64;
    r.throughput_msgs_per_s = if r.duration_s > 0.0 {
        r.received as f64 / r.duration_s
    } else {
        0.0
    };
    if !hist.is_empty() {
        let us = |ns: u64| ns as f64 / 1000.0;
        r.rtt_us = RttSummary {
            p50: us(hist.value_at_quantile(0.50)),
            p99: us(hist.value_at_quantile(0.99)),
            p999: us(hist.value_at_quantile(0.999)),
            max: us(hist.max()),
            mean: hist.mean() / 1000.0,
        };
    }
    Ok(r)
}

// ---------------------------------------------------------------------------
// Helpers: errors, clock, sockets, payload.

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

fn with_context(e: io::Error, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn errno_context(e: Errno, what: &str) -> io::Error {
    with_context(io::Error::from(e), what)
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

/// `CLOCK_MONOTONIC` in nanoseconds (the clock used for datagram timestamps).
fn now_ns() -> u64 {
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always available");
    ts.tv_sec() as u64 * NS_PER_S + ts.tv_nsec() as u64
}

fn timespec_of(ns: u64) -> TimeSpec {
    TimeSpec::from_duration(Duration::from_nanos(ns))
}

fn new_histogram() -> io::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 10 * NS_PER_S, 3)
        .map_err(|e| io::Error::other(format!("creating RTT histogram: {e:?}")))
}

/// One client socket: connected to its target port, nonblocking.
struct Target {
    sock: UdpSocket,
    port: u16,
    /// Index of the port in `LoadConfig::ports` (written into each datagram).
    index: u32,
    /// Which of the port's clients this socket is (0 when batched).
    client: u32,
    /// Batched: datagrams queued for the next `sendmmsg`, `IO_BATCH` slots of the datagram
    /// size (empty with unbatched clients, which send each datagram at once).
    outbox: Vec<u8>,
    /// Local sequence index of each queued datagram.
    queued: Vec<u64>,
    send_headers: Headers,
    /// Intact echoes received from this port (unique datagrams).
    received: u64,
}

/// Preallocated `mmsghdr`s for one `recvmmsg` / `sendmmsg` site.
struct Headers(MultiHeaders<SockaddrStorage>);

impl Headers {
    fn new() -> Headers {
        Headers(MultiHeaders::preallocate(IO_BATCH, None))
    }
}

// SAFETY: `MultiHeaders` is `!Send` only because `mmsghdr` holds raw pointers. Those point into
// its own heap buffers (the address slots, which move with it) or at the I/O slices of the call
// in progress (rewritten by every call), never at thread-local data; a worker's headers are
// used by one thread at a time, the one that owns the worker.
unsafe impl Send for Headers {}

fn open_target(ip: IpAddr, port: u16, index: u32, client: u32) -> io::Result<Target> {
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
fn send_batch(target: &mut Target, size: usize, calls: &mut u64) -> io::Result<usize> {
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
fn send_single(sock: &UdpSocket, datagram: &[u8]) -> io::Result<bool> {
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

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn padding_seed(seq: u64, ts_ns: u64, port_index: u32) -> u64 {
    // A chain of bijections: changing any one field changes the seed.
    let mut s = seq;
    let mut s = ts_ns ^ splitmix64(&mut s);
    let mut s = u64::from(port_index) ^ splitmix64(&mut s);
    splitmix64(&mut s)
}

/// Writes the header and the padding pattern into `buf` (its whole length).
fn encode(buf: &mut [u8], seq: u64, ts_ns: u64, port_index: u32) {
    buf[0..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..16].copy_from_slice(&ts_ns.to_le_bytes());
    buf[16..20].copy_from_slice(&port_index.to_le_bytes());
    let mut state = padding_seed(seq, ts_ns, port_index);
    for chunk in buf[HEADER_LEN..].chunks_mut(8) {
        let word = splitmix64(&mut state).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

/// The header fields of a datagram of at least `HEADER_LEN` bytes.
fn header(buf: &[u8]) -> (u64, u64, u32) {
    let u64_at = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
    let idx = u32::from_le_bytes(buf[16..20].try_into().expect("4 bytes"));
    (u64_at(0), u64_at(8), idx)
}

/// Whether the padding of `buf` is the pattern `encode` writes for its header.
fn padding_ok(buf: &[u8]) -> bool {
    let (seq, ts, idx) = header(buf);
    let mut state = padding_seed(seq, ts, idx);
    buf[HEADER_LEN..]
        .chunks(8)
        .all(|chunk| splitmix64(&mut state).to_le_bytes()[..chunk.len()] == *chunk)
}

// ---------------------------------------------------------------------------
// The per-thread engine.

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    sent: u64,
    received: u64,
    duplicates: u64,
    corrupt: u64,
    late_sends: u64,
    send_errors: u64,
    send_calls: u64,
    recv_calls: u64,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    local: u64,
    target: usize,
    deadline_ns: u64,
}

struct WorkerResult {
    c: Counters,
    lost: u64,
    hist: Histogram<u64>,
    active_end_ns: u64,
    /// `(index in LoadConfig::ports, received)` of each of the worker's client sockets.
    per_port: Vec<(u32, u64)>,
    /// The thread's CPU time and wall time over its send phase (ns).
    cpu_ns: u64,
    wall_ns: u64,
}

struct Worker {
    targets: Vec<Target>,
    mode: Mode,
    /// Batched sends and receives (`sendmmsg`/`recvmmsg`), else one datagram per call.
    batched: bool,
    /// Closed loop: the window of each target (its share of its port's window; the whole
    /// window when batched, with one socket per port).
    windows: Vec<usize>,
    size: usize,
    timeout_ns: u64,
    drain_ns: u64,
    /// Global sequence number = local index * stride + offset.
    seq_stride: u64,
    seq_offset: u64,
    max_attempts: u64,
    start_ns: u64,
    send_end_ns: u64,
    /// One state byte per local sequence index; its length is the number of
    /// send attempts so far.
    states: Vec<u8>,
    /// Closed loop: window slots in use per target.
    in_window: Vec<usize>,
    /// Closed loop: window slots in send order (deadlines are increasing).
    pending: VecDeque<Pending>,
    /// Open loop: next schedule slot.
    next_slot: u64,
    late_slack_ns: u64,
    catchup_lag_ns: u64,
    /// `IO_BATCH` receive buffers, one byte longer than the datagram size so
    /// oversized echoes are detected.
    rbufs: Vec<Vec<u8>>,
    recv_headers: Headers,
    /// Unbatched: the datagram being sent.
    sbuf: Vec<u8>,
    hist: Histogram<u64>,
    c: Counters,
    last_recv_ns: u64,
}

impl Worker {
    fn new(
        cfg: &LoadConfig,
        mode: Mode,
        targets: Vec<Target>,
        thread_index: u64,
        threads: u64,
        max_attempts: u64,
        start_ns: u64,
    ) -> io::Result<Self> {
        let nanos = |d: Duration| d.as_nanos() as u64;
        let (late_slack_ns, catchup_lag_ns, estimate) = match mode {
            Mode::Open { rate_per_s } if rate_per_s > 0 => {
                let interval = NS_PER_S / rate_per_s;
                let est = (cfg.duration.as_secs_f64() * rate_per_s as f64) as u64 + 1;
                (
                    LATE_SLACK_NS.max(interval),
                    CATCHUP_LAG_NS.max(interval.saturating_mul(2)),
                    est,
                )
            }
            Mode::Open { .. } => (LATE_SLACK_NS, CATCHUP_LAG_NS, 0),
            Mode::Closed { window } => (
                LATE_SLACK_NS,
                CATCHUP_LAG_NS,
                (window * targets.len()) as u64 * 1024,
            ),
        };
        let prealloc = estimate.min(max_attempts).min(MAX_PREALLOC) as usize;
        let batched = cfg.clients == Clients::Batched;
        let mut targets = targets;
        if batched {
            for t in &mut targets {
                t.outbox = vec![0; IO_BATCH * cfg.size];
            }
        }
        // A port's window split over its clients: client k gets window / n, plus one while
        // k < window % n, so the shares add up to the window.
        let per_port = cfg.clients.per_port();
        let windows = targets
            .iter()
            .map(|t| match mode {
                Mode::Closed { window } => {
                    window / per_port + usize::from((t.client as usize) < window % per_port)
                }
                Mode::Open { .. } => 0,
            })
            .collect();
        Ok(Worker {
            in_window: vec![0; targets.len()],
            targets,
            mode,
            batched,
            windows,
            size: cfg.size,
            timeout_ns: nanos(cfg.timeout),
            drain_ns: nanos(cfg.drain),
            seq_stride: threads,
            seq_offset: thread_index,
            max_attempts,
            start_ns,
            send_end_ns: start_ns + nanos(cfg.duration),
            states: Vec::with_capacity(prealloc),
            pending: VecDeque::new(),
            next_slot: 0,
            late_slack_ns,
            catchup_lag_ns,
            rbufs: vec![vec![0; cfg.size + 1]; if batched { IO_BATCH } else { 1 }],
            recv_headers: Headers::new(),
            sbuf: if batched {
                Vec::new()
            } else {
                vec![0; cfg.size]
            },
            hist: new_histogram()?,
            c: Counters::default(),
            last_recv_ns: start_ns,
        })
    }

    fn attempts(&self) -> u64 {
        self.states.len() as u64
    }

    /// Open loop: deadline of schedule slot `k`.
    fn slot_deadline(&self, k: u64, rate: u64) -> u64 {
        self.start_ns + (u128::from(k) * u128::from(NS_PER_S) / u128::from(rate)) as u64
    }

    /// Open loop: the first slot whose deadline is at or after `t_ns`.
    fn first_slot_at(&self, t_ns: u64, rate: u64) -> u64 {
        let num = u128::from(t_ns.saturating_sub(self.start_ns)) * u128::from(rate);
        num.div_ceil(u128::from(NS_PER_S)) as u64
    }

    /// Whether more sends may happen (monotonic: once false, stays false).
    fn can_send(&self, now: u64) -> bool {
        if now >= self.send_end_ns || self.attempts() >= self.max_attempts {
            return false;
        }
        match self.mode {
            Mode::Closed { .. } => true,
            Mode::Open { rate_per_s: 0 } => false,
            Mode::Open { rate_per_s } => {
                self.slot_deadline(self.next_slot, rate_per_s) < self.send_end_ns
            }
        }
    }

    fn run(mut self) -> io::Result<WorkerResult> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| errno_context(e, "epoll_create1"))?;
        for (i, t) in self.targets.iter().enumerate() {
            epoll
                .add(&t.sock, EpollEvent::new(EpollFlags::EPOLLIN, i as u64))
                .map_err(|e| errno_context(e, &format!("port {}: epoll_ctl", t.port)))?;
        }
        let timer = TimerFd::new(
            TimerClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(|e| errno_context(e, "timerfd_create"))?;
        epoll
            .add(&timer, EpollEvent::new(EpollFlags::EPOLLIN, TIMER_TOKEN))
            .map_err(|e| errno_context(e, "epoll_ctl(timerfd)"))?;
        let mut armed: Option<u64> = None;
        let mut events = [EpollEvent::empty(); 64];
        let mut drain_end: Option<u64> = None;
        let mut send_stop_ns = self.start_ns;
        // The thread's CPU share over its send phase (from here until sending stops).
        let (cpu0, wall0) = (lfrt::os::thread_cpu_ns(), now_ns());
        let mut cpu_ns = 0;

        if let Mode::Closed { .. } = self.mode {
            let now = now_ns();
            for t in 0..self.targets.len() {
                self.refill(t, now)?;
            }
        }

        loop {
            // Queued sends leave before anything waits or counts on them.
            self.flush_all()?;
            let now = now_ns();
            if drain_end.is_none() && !self.can_send(now) {
                cpu_ns = lfrt::os::thread_cpu_ns().saturating_sub(cpu0);
                send_stop_ns = now;
                drain_end = Some(now.saturating_add(self.drain_ns));
            }
            let wake = match drain_end {
                Some(end) => {
                    if now >= end || self.c.received == self.c.sent {
                        break;
                    }
                    end
                }
                None => {
                    match self.mode {
                        Mode::Open { rate_per_s } => self.send_due(now, rate_per_s)?,
                        Mode::Closed { .. } => self.expire(now)?,
                    }
                    if !self.can_send(now) {
                        // That ended the send phase: start draining now
                        // rather than sleeping until the next deadline.
                        continue;
                    }
                    match self.mode {
                        Mode::Open { rate_per_s } => self.slot_deadline(self.next_slot, rate_per_s),
                        Mode::Closed { .. } => self
                            .pending
                            .front()
                            .map_or(self.send_end_ns, |p| p.deadline_ns.min(self.send_end_ns)),
                    }
                }
            };

            self.flush_all()?;
            let timeout = if wake <= now_ns() {
                EpollTimeout::ZERO
            } else {
                if armed != Some(wake) {
                    timer
                        .set(
                            Expiration::OneShot(timespec_of(wake)),
                            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
                        )
                        .map_err(|e| errno_context(e, "timerfd_settime"))?;
                    armed = Some(wake);
                }
                EpollTimeout::from(SAFETY_WAIT_MS)
            };
            let n = match epoll.wait(&mut events, timeout) {
                Ok(n) => n,
                Err(Errno::EINTR) => 0,
                Err(e) => return Err(errno_context(e, "epoll_wait")),
            };
            for ev in &events[..n] {
                if ev.data() == TIMER_TOKEN {
                    // Consume the expiration; EAGAIN just means it was re-armed.
                    let _ = timer.wait();
                    armed = None;
                } else {
                    self.receive(ev.data() as usize)?;
                }
            }
        }

        self.flush_all()?;
        // Final accounting, re-derived from the per-sequence states.
        let (mut sent, mut received) = (0u64, 0u64);
        for &s in &self.states {
            match s {
                ST_RECEIVED => {
                    sent += 1;
                    received += 1;
                }
                ST_OUTSTANDING | ST_TIMED_OUT => sent += 1,
                _ => {}
            }
        }
        assert_eq!(sent, self.c.sent, "sent counter disagrees with states");
        assert_eq!(
            received, self.c.received,
            "received counter disagrees with states"
        );
        let lost = sent - received;
        assert_eq!(self.c.sent, self.c.received + lost);
        Ok(WorkerResult {
            c: self.c,
            lost,
            active_end_ns: send_stop_ns.max(self.last_recv_ns),
            per_port: self.targets.iter().map(|t| (t.index, t.received)).collect(),
            hist: self.hist,
            cpu_ns,
            wall_ns: send_stop_ns.saturating_sub(wall0),
        })
    }

    /// Sends one datagram to target `t` (consuming a sequence number even if
    /// the kernel refuses it).
    fn send_one(&mut self, t: usize) -> io::Result<()> {
        let local = self.attempts();
        let seq = local * self.seq_stride + self.seq_offset;
        let now = now_ns();
        let size = self.size;
        let target = &mut self.targets[t];
        if self.batched {
            let k = target.queued.len();
            encode(
                &mut target.outbox[k * size..(k + 1) * size],
                seq,
                now,
                target.index,
            );
            target.queued.push(local);
            // Counted as sent (or failed) when the outbox is flushed.
            self.states.push(ST_OUTSTANDING);
        } else {
            let datagram = &mut self.sbuf[..size];
            encode(datagram, seq, now, target.index);
            let ok = send_single(&target.sock, datagram)
                .map_err(|e| with_context(e, format!("port {}: send", target.port)))?;
            // A refused datagram holds its window slot until it times out, as in a batch.
            if ok {
                self.c.sent += 1;
                self.c.send_calls += 1;
                self.states.push(ST_OUTSTANDING);
            } else {
                self.c.send_errors += 1;
                self.states.push(ST_FAILED);
            }
        }
        if let Mode::Closed { .. } = self.mode {
            self.in_window[t] += 1;
            self.pending.push_back(Pending {
                local,
                target: t,
                deadline_ns: now + self.timeout_ns,
            });
        }
        if self.targets[t].queued.len() == IO_BATCH {
            self.flush(t)?;
        }
        Ok(())
    }

    /// Sends target `t`'s queued datagrams; those the kernel refuses are
    /// counted as send errors.
    fn flush(&mut self, t: usize) -> io::Result<()> {
        let target = &mut self.targets[t];
        if target.queued.is_empty() {
            return Ok(());
        }
        let ok = send_batch(target, self.size, &mut self.c.send_calls)
            .map_err(|e| with_context(e, format!("port {}: send", target.port)))?;
        self.c.sent += ok as u64;
        for &local in &target.queued[ok..] {
            self.states[local as usize] = ST_FAILED;
            self.c.send_errors += 1;
        }
        target.queued.clear();
        Ok(())
    }

    fn flush_all(&mut self) -> io::Result<()> {
        for t in 0..self.targets.len() {
            self.flush(t)?;
        }
        Ok(())
    }

    /// Closed loop: fill target `t`'s window.
    fn refill(&mut self, t: usize, now: u64) -> io::Result<()> {
        let Mode::Closed { .. } = self.mode else {
            return Ok(());
        };
        while self.in_window[t] < self.windows[t] && self.can_send(now) {
            self.send_one(t)?;
        }
        Ok(())
    }

    /// Closed loop: time out expired window slots and refill them.
    fn expire(&mut self, now: u64) -> io::Result<()> {
        while let Some(p) = self.pending.front().copied() {
            let state = self.states[p.local as usize];
            if state == ST_RECEIVED {
                // Its slot was freed when the reply arrived.
                self.pending.pop_front();
                continue;
            }
            if p.deadline_ns > now {
                break;
            }
            self.pending.pop_front();
            if state == ST_OUTSTANDING {
                self.states[p.local as usize] = ST_TIMED_OUT;
            }
            self.in_window[p.target] -= 1;
            self.refill(p.target, now)?;
        }
        Ok(())
    }

    /// Open loop: send every slot that is due, at most `MAX_BURST` of them.
    fn send_due(&mut self, now: u64, rate: u64) -> io::Result<()> {
        let n = self.targets.len() as u64;
        let mut burst = 0;
        while burst < MAX_BURST && self.attempts() < self.max_attempts {
            let deadline = self.slot_deadline(self.next_slot, rate);
            if deadline > now || deadline >= self.send_end_ns {
                break;
            }
            let lag = now - deadline;
            if lag > self.catchup_lag_ns {
                // Never count slots beyond the end of the schedule.
                let resume = self
                    .first_slot_at(now - self.catchup_lag_ns, rate)
                    .min(self.first_slot_at(self.send_end_ns, rate));
                debug_assert!(resume > self.next_slot);
                self.c.late_sends += resume - self.next_slot;
                self.next_slot = resume;
                continue;
            }
            if lag > self.late_slack_ns {
                self.c.late_sends += 1;
            }
            let t = (self.next_slot % n) as usize;
            self.next_slot += 1;
            self.send_one(t)?;
            burst += 1;
        }
        Ok(())
    }

    /// Reads up to `RECV_BATCH` datagrams from target `t`, `IO_BATCH` per
    /// `recvmmsg` when batched, else one per `recv`.
    fn receive(&mut self, t: usize) -> io::Result<()> {
        if !self.batched {
            return self.receive_single(t);
        }
        let fd = self.targets[t].sock.as_raw_fd();
        let mut lens = [0usize; IO_BATCH];
        for _ in 0..RECV_BATCH.div_ceil(IO_BATCH) {
            let got = {
                let mut iovs: Vec<[IoSliceMut<'_>; 1]> = self
                    .rbufs
                    .iter_mut()
                    .map(|b| [IoSliceMut::new(b)])
                    .collect();
                match recvmmsg(
                    fd,
                    &mut self.recv_headers.0,
                    &mut iovs,
                    MsgFlags::MSG_DONTWAIT,
                    None,
                ) {
                    Ok(res) => {
                        let mut n = 0;
                        for (len, r) in lens.iter_mut().zip(res) {
                            *len = r.bytes;
                            n += 1;
                        }
                        n
                    }
                    Err(Errno::EAGAIN) => break,
                    // ICMP errors from earlier sends; not a datagram.
                    Err(Errno::ECONNREFUSED | Errno::EINTR) => continue,
                    Err(e) => {
                        return Err(errno_context(
                            e,
                            &format!("port {}: recvmmsg", self.targets[t].port),
                        ))
                    }
                }
            };
            if got > 0 {
                self.c.recv_calls += 1;
            }
            let now = now_ns();
            for (k, &len) in lens[..got].iter().enumerate() {
                self.on_datagram(t, k, len, now)?;
            }
            if got < IO_BATCH {
                break;
            }
        }
        Ok(())
    }

    /// Reads up to `RECV_BATCH` datagrams from target `t`, one per `recv`.
    fn receive_single(&mut self, t: usize) -> io::Result<()> {
        for _ in 0..RECV_BATCH {
            let r = self.targets[t].sock.recv(&mut self.rbufs[0]);
            match r {
                Ok(len) => {
                    self.c.recv_calls += 1;
                    self.on_datagram(t, 0, len, now_ns())?;
                }
                Err(e) => match Errno::from_raw(e.raw_os_error().unwrap_or(0)) {
                    Errno::EAGAIN => break,
                    // ICMP errors from earlier sends; not a datagram.
                    Errno::ECONNREFUSED | Errno::EINTR => {}
                    _ => {
                        let port = self.targets[t].port;
                        return Err(with_context(e, format!("port {port}: recv")));
                    }
                },
            }
        }
        Ok(())
    }

    /// Echo `len` bytes long in receive buffer `k`, from target `t`.
    fn on_datagram(&mut self, t: usize, k: usize, len: usize, now: u64) -> io::Result<()> {
        let Some(local) = self.match_echo(t, k, len, now) else {
            self.c.corrupt += 1;
            return Ok(());
        };
        match self.states[local] {
            ST_RECEIVED => self.c.duplicates += 1,
            state @ (ST_OUTSTANDING | ST_TIMED_OUT) => {
                let was_outstanding = state == ST_OUTSTANDING;
                self.states[local] = ST_RECEIVED;
                self.c.received += 1;
                self.targets[t].received += 1;
                self.last_recv_ns = now;
                let (_, ts, _) = header(&self.rbufs[k][..len]);
                self.hist.saturating_record((now - ts).max(1));
                if was_outstanding {
                    if let Mode::Closed { .. } = self.mode {
                        self.in_window[t] -= 1;
                        self.refill(t, now)?;
                    }
                }
            }
            // ST_FAILED: the kernel refused that send, so no echo can be genuine.
            _ => self.c.corrupt += 1,
        }
        Ok(())
    }

    /// The local sequence index of an intact echo, or `None` if it is corrupt.
    fn match_echo(&self, t: usize, k: usize, len: usize, now: u64) -> Option<usize> {
        if len != self.size {
            return None;
        }
        let buf = &self.rbufs[k][..len];
        let (seq, ts, idx) = header(buf);
        if idx != self.targets[t].index
            || seq % self.seq_stride != self.seq_offset
            || ts < self.start_ns
            || ts > now
        {
            return None;
        }
        let local = seq / self.seq_stride;
        if local >= self.attempts() || !padding_ok(buf) {
            return None;
        }
        Some(local as usize)
    }
}

// ---------------------------------------------------------------------------
// Output.

/// The JSON document written by `--json`: the report's fields plus a
/// `"config"` object describing the run.
pub fn report_json(report: &LoadReport, cfg: &LoadConfig, threads: usize) -> serde_json::Value {
    let mut v = serde_json::to_value(report).expect("LoadReport serializes");
    let mut config = serde_json::json!({
        "target": cfg.target.to_string(),
        "ports": cfg.ports,
        "size": cfg.size,
        "duration_s": cfg.duration.as_secs_f64(),
        "drain_ms": cfg.drain.as_secs_f64() * 1e3,
        "timeout_ms": cfg.timeout.as_secs_f64() * 1e3,
        "max_messages": cfg.max_messages,
        "threads": threads,
        "clients": cfg.clients.name(),
        "clients_per_port": cfg.clients.per_port(),
    });
    let mode = serde_json::to_value(cfg.mode).expect("Mode serializes");
    if let (Some(c), serde_json::Value::Object(m)) = (config.as_object_mut(), mode) {
        c.extend(m);
    }
    v.as_object_mut()
        .expect("LoadReport is a JSON object")
        .insert("config".to_string(), config);
    v
}

/// A human-readable table of the report.
pub fn format_report(report: &LoadReport, cfg: &LoadConfig, threads: usize) -> String {
    let mode = match cfg.mode {
        Mode::Closed { window } => format!("closed loop, window {window}/port"),
        Mode::Open { rate_per_s } => format!("open loop, {rate_per_s} msgs/s"),
    };
    let r = report;
    let clients = match cfg.clients {
        Clients::Unbatched { per_port } => {
            format!("{per_port} independent client(s) per port, one datagram per call")
        }
        Clients::Batched => format!("one batched socket per port, up to {IO_BATCH} per call"),
    };
    let mut s = format!(
        "lfrt-loadgen: {mode} -> {} ports {:?}, {} B, {} thread(s), {clients}\n",
        cfg.target, cfg.ports, cfg.size, threads
    );
    let saturated = if r.generator_saturated {
        " GEN-SATURATED: this run measures the generator"
    } else {
        ""
    };
    let rows: [(&str, String); 15] = [
        ("sent", r.sent.to_string()),
        ("received", r.received.to_string()),
        ("lost", r.lost.to_string()),
        ("duplicates", r.duplicates.to_string()),
        ("corrupt", r.corrupt.to_string()),
        ("late_sends", r.late_sends.to_string()),
        ("send_errors", r.send_errors.to_string()),
        ("duration", format!("{:.3} s", r.duration_s)),
        (
            "throughput",
            format!("{:.1} msgs/s", r.throughput_msgs_per_s),
        ),
        (
            "rtt p50/p99",
            format!("{:.1} / {:.1} us", r.rtt_us.p50, r.rtt_us.p99),
        ),
        (
            "rtt p99.9/max",
            format!("{:.1} / {:.1} us", r.rtt_us.p999, r.rtt_us.max),
        ),
        ("rtt mean", format!("{:.1} us", r.rtt_us.mean)),
        (
            "port fairness",
            format!(
                "{:.3} (least-served port / mean of {} ports)",
                r.port_fairness,
                r.received_per_port.len()
            ),
        ),
        (
            "syscalls",
            format!(
                "{} send, {} recv ({} sockets)",
                r.send_calls, r.recv_calls, r.client_sockets
            ),
        ),
        (
            "generator cpu",
            format!(
                "{:.0} % busiest thread, {:.0} % all{saturated}",
                r.generator_cpu_pct, r.generator_cpu_total_pct
            ),
        ),
    ];
    for (k, v) in rows {
        s.push_str(&format!("  {k:<14} {v:>20}\n"));
    }
    s
}

// ---------------------------------------------------------------------------
// Command line.

/// Scheduling mode on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CliMode {
    /// Keep --window datagrams outstanding per port.
    Closed,
    /// Send --rate datagrams per second in total.
    Open,
}

/// Command-line arguments of `lfrt-loadgen`.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "lfrt-loadgen",
    about = "UDP load generator for benchmarking echo servers (loopback targets only)"
)]
pub struct Cli {
    /// Target host: 127.0.0.0/8 or ::1.
    #[arg(long, default_value = "127.0.0.1")]
    pub target: IpAddr,
    /// Target ports: a range "7000-7003" or a comma list "7000,7002".
    #[arg(long)]
    pub ports: String,
    /// Scheduling mode.
    #[arg(long, value_enum, default_value_t = CliMode::Closed)]
    pub mode: CliMode,
    /// Closed loop: outstanding datagrams per port [default: 8].
    #[arg(long)]
    pub window: Option<usize>,
    /// Open loop: total datagrams per second (required with --mode open).
    #[arg(long)]
    pub rate: Option<u64>,
    /// Datagram size in bytes (20..=65000).
    #[arg(long, default_value_t = DEFAULT_SIZE)]
    pub size: usize,
    /// How long to send for: `5`, `5s`, `500ms`, `1m` (the duration syntax of every lfrt
    /// command).
    #[arg(long, value_name = "TIME", default_value = "5", value_parser = crate::duration::parse)]
    pub duration: Duration,
    /// Milliseconds to wait for replies after sending stops.
    #[arg(long, default_value_t = 200)]
    pub drain_ms: u64,
    /// Closed loop: milliseconds before an outstanding datagram frees its slot.
    #[arg(long, default_value_t = 200)]
    pub timeout_ms: u64,
    /// Stop after this many send attempts in total.
    #[arg(long)]
    pub max_messages: Option<u64>,
    /// Threads to split the ports across.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Independent client sockets per port, each sending one datagram per `send` and
    /// reading one reply per `recv` [default: the window in closed loop (one outstanding
    /// datagram per client), 1 in open loop].
    #[arg(long, conflicts_with = "batched")]
    pub clients_per_port: Option<usize>,
    /// One socket per port with up to 32 datagrams per `sendmmsg`/`recvmmsg`, instead of
    /// independent clients.
    #[arg(long)]
    pub batched: bool,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

impl Cli {
    /// Builds and validates the run configuration.
    pub fn to_config(&self) -> Result<LoadConfig, String> {
        let ports = parse_ports(&self.ports).map_err(|e| format!("--ports: {e}"))?;
        let mode = match self.mode {
            CliMode::Closed => {
                if self.rate.is_some() {
                    return Err("--rate only applies to --mode open".to_string());
                }
                Mode::Closed {
                    window: self.window.unwrap_or(DEFAULT_WINDOW),
                }
            }
            CliMode::Open => {
                if self.window.is_some() {
                    return Err("--window only applies to --mode closed".to_string());
                }
                Mode::Open {
                    rate_per_s: self.rate.ok_or("--mode open requires --rate R")?,
                }
            }
        };
        let duration = self.duration;
        if self.threads == 0 {
            return Err("--threads must be at least 1".to_string());
        }
        let clients = if self.batched {
            Clients::Batched
        } else {
            match self.clients_per_port {
                Some(per_port) => Clients::Unbatched { per_port },
                None => Clients::default_for(mode),
            }
        };
        let cfg = LoadConfig {
            target: self.target,
            ports,
            mode,
            clients,
            size: self.size,
            duration,
            drain: Duration::from_millis(self.drain_ms),
            timeout: Duration::from_millis(self.timeout_ms),
            max_messages: self.max_messages,
        };
        cfg.validate().map_err(|e| e.to_string())?;
        Ok(cfg)
    }
}

/// Entry point of the `lfrt-loadgen` binary: parses the process arguments,
/// runs, prints the table and writes the JSON file if asked. Exit code 0 on
/// success, 2 on a usage error, 1 on a run error.
pub fn cli_main() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    let cfg = match cli.to_config() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("lfrt-loadgen: {e}");
            return ExitCode::from(2);
        }
    };
    let threads = cli.threads.min(cfg.ports.len());
    let report = match run_threaded(&cfg, threads) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lfrt-loadgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", format_report(&report, &cfg, threads));
    if let Some(path) = &cli.json {
        let doc = report_json(&report, &cfg, threads);
        let text = serde_json::to_string_pretty(&doc).expect("JSON value serializes");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("lfrt-loadgen: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use std::time::Instant;

    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    /// What a test server does with one datagram (it may modify it); returns
    /// how many copies to send back.
    type Behaviour = fn(&mut [u8]) -> usize;

    fn seq_of(buf: &[u8]) -> u64 {
        header(buf).0
    }

    fn echo(_: &mut [u8]) -> usize {
        1
    }

    fn drop_every_10th_dup_some(buf: &mut [u8]) -> usize {
        let s = seq_of(buf);
        if s % 10 == 9 {
            0
        } else if s % 7 == 3 {
            2
        } else {
            1
        }
    }

    fn corrupting(buf: &mut [u8]) -> usize {
        let s = seq_of(buf);
        if s % 5 == 2 {
            let last = buf.len() - 1;
            buf[last] ^= 0x40; // padding
        } else if s % 5 == 4 {
            buf[16] ^= 0x01; // port index
        } else if s.is_multiple_of(10) {
            buf[9] ^= 0x10; // timestamp
        }
        1
    }

    fn is_corrupted(s: u64) -> bool {
        s % 5 == 2 || s % 5 == 4 || s.is_multiple_of(10)
    }

    /// A bounded echo server thread on an ephemeral 127.0.0.1 port.
    struct TestServer {
        port: u16,
        stop: Arc<AtomicBool>,
        handle: Option<JoinHandle<()>>,
    }

    impl TestServer {
        fn start(behaviour: Behaviour) -> TestServer {
            Self::start_on(LOCAL, behaviour).expect("bind test server")
        }

        fn start_on(ip: IpAddr, behaviour: Behaviour) -> io::Result<TestServer> {
            let sock = UdpSocket::bind((ip, 0))?;
            let _ = setsockopt(&sock, sockopt::RcvBuf, &SOCKET_RCVBUF);
            sock.set_read_timeout(Some(Duration::from_millis(20)))
                .expect("set read timeout");
            let port = sock.local_addr().expect("local addr").port();
            let stop = Arc::new(AtomicBool::new(false));
            let stop2 = Arc::clone(&stop);
            let handle = std::thread::spawn(move || {
                let started = Instant::now();
                let mut buf = vec![0u8; 65536];
                // Hard bound so a failing test can never leave it running.
                while !stop2.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(30)
                {
                    let Ok((n, from)) = sock.recv_from(&mut buf) else {
                        continue;
                    };
                    assert!(from.ip().is_loopback());
                    let copies = if n >= HEADER_LEN {
                        behaviour(&mut buf[..n])
                    } else {
                        1
                    };
                    for _ in 0..copies {
                        let _ = sock.send_to(&buf[..n], from);
                    }
                }
            });
            Ok(TestServer {
                port,
                stop,
                handle: Some(handle),
            })
        }
    }

    impl Drop for TestServer {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(h) = self.handle.take() {
                let _ = h.join();
            }
        }
    }

    fn servers(n: usize, behaviour: Behaviour) -> (Vec<TestServer>, Vec<u16>) {
        let s: Vec<TestServer> = (0..n).map(|_| TestServer::start(behaviour)).collect();
        let ports = s.iter().map(|s| s.port).collect();
        (s, ports)
    }

    fn config(ports: Vec<u16>, mode: Mode) -> LoadConfig {
        let mut cfg = LoadConfig::new(LOCAL, ports, mode);
        cfg.duration = Duration::from_millis(300);
        // Generous: the drain ends early once everything is answered.
        cfg.drain = Duration::from_secs(2);
        cfg
    }

    fn assert_clean(r: &LoadReport) {
        assert!(r.sent > 0, "{r:?}");
        assert_eq!(r.sent, r.received + r.lost, "{r:?}");
        assert_eq!(r.lost, 0, "{r:?}");
        assert_eq!(r.duplicates, 0, "{r:?}");
        assert_eq!(r.corrupt, 0, "{r:?}");
        assert_eq!(r.send_errors, 0, "{r:?}");
        assert!(r.rtt_us.p50 > 0.0 && r.rtt_us.max >= r.rtt_us.p99, "{r:?}");
        assert!(r.throughput_msgs_per_s > 0.0, "{r:?}");
    }

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

    #[test]
    fn payload_roundtrip_and_every_byte_flip_detected() {
        for size in [MIN_SIZE + 1, 21, 27, 64, 1500] {
            let mut buf = vec![0u8; size];
            encode(&mut buf, 12345, 987_654_321, 3);
            assert_eq!(header(&buf), (12345, 987_654_321, 3));
            assert!(padding_ok(&buf));
            for i in 0..size {
                let mut b = buf.clone();
                b[i] ^= 0x01;
                assert!(!padding_ok(&b), "flip at byte {i} of {size} undetected");
            }
        }
    }

    #[test]
    fn ipv6_loopback_target() {
        let ip = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let Ok(server) = TestServer::start_on(ip, echo) else {
            eprintln!("skipping: no IPv6 loopback on this machine");
            return;
        };
        let mut cfg = config(vec![server.port], Mode::Closed { window: 2 });
        cfg.target = ip;
        cfg.max_messages = Some(100);
        let r = run(&cfg).unwrap();
        assert_clean(&r);
        assert_eq!(r.sent, 100);
    }

    #[test]
    fn closed_loop_against_echo_server() {
        let (_s, ports) = servers(2, echo);
        let cfg = config(ports, Mode::Closed { window: 4 });
        let r = run(&cfg).unwrap();
        // Visible with `cargo test closed_loop -- --nocapture`.
        println!("{}", format_report(&r, &cfg, 1));
        assert_clean(&r);
        assert_eq!(r.late_sends, 0);
    }

    /// The batched shape against the same server: same accounting, one socket per port,
    /// and no more system calls than datagrams.
    #[test]
    fn batched_closed_loop_against_echo_server() {
        let (_s, ports) = servers(2, echo);
        let mut cfg = config(ports, Mode::Closed { window: 8 });
        cfg.clients = Clients::Batched;
        cfg.max_messages = Some(2000);
        cfg.duration = Duration::from_secs(10);
        let r = run(&cfg).unwrap();
        assert_clean(&r);
        assert_eq!(r.sent, 2000);
        assert_eq!(r.client_sockets, 2);
        assert!(
            r.send_calls <= r.sent && r.recv_calls <= r.received,
            "{r:?}"
        );
    }

    /// Unbatched clients (2 per port sharing a window of 5) make one system call per datagram
    /// each way; more clients than the window holds are refused.
    #[test]
    fn unbatched_clients_make_one_call_per_datagram_and_fit_the_window() {
        let (_s, ports) = servers(2, echo);
        let mut cfg = config(ports, Mode::Closed { window: 5 });
        cfg.clients = Clients::Unbatched { per_port: 2 };
        cfg.max_messages = Some(1000);
        cfg.duration = Duration::from_secs(10);
        let r = run_threaded(&cfg, 2).unwrap();
        assert_clean(&r);
        assert_eq!(r.sent, 1000);
        assert_eq!(r.client_sockets, 4);
        assert_eq!(r.send_calls, r.sent);
        assert_eq!(r.recv_calls, r.received);
        let mut bad = cfg.clone();
        bad.clients = Clients::Unbatched { per_port: 6 };
        let e = run(&bad).unwrap_err();
        assert!(e.to_string().contains("exceed the window"), "{e}");
        bad.clients = Clients::Unbatched { per_port: 0 };
        assert_eq!(run(&bad).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn open_loop_against_echo_server() {
        let (_s, ports) = servers(2, echo);
        let mut cfg = config(ports, Mode::Open { rate_per_s: 2000 });
        cfg.size = 200;
        let r = run(&cfg).unwrap();
        assert_clean(&r);
        // No more than the schedule allows: 0.3 s at 2000/s.
        assert!(r.sent <= 600, "{r:?}");
    }

    #[test]
    fn max_messages_bounds_the_run_and_threads_share_it() {
        let (_s, ports) = servers(3, echo);
        let mut cfg = config(ports, Mode::Closed { window: 2 });
        cfg.duration = Duration::from_secs(10);
        cfg.max_messages = Some(301);
        for threads in [1, 2, 3] {
            let r = run_threaded(&cfg, threads).unwrap();
            assert_clean(&r);
            assert_eq!(r.sent, 301, "threads={threads}");
        }
    }

    /// Sequence numbers are 0..sent when there is one thread and no send fails.
    fn expected(sent: u64, pred: impl Fn(u64) -> bool) -> u64 {
        (0..sent).filter(|&s| pred(s)).count() as u64
    }

    #[test]
    fn drops_and_duplicates_counted_exactly_closed_loop() {
        let (_s, ports) = servers(2, drop_every_10th_dup_some);
        let mut cfg = config(ports, Mode::Closed { window: 4 });
        cfg.duration = Duration::from_secs(10);
        cfg.max_messages = Some(400);
        cfg.timeout = Duration::from_millis(20);
        cfg.drain = Duration::from_millis(300);
        let r = run(&cfg).unwrap();
        assert_eq!(r.sent, 400, "{r:?}");
        assert_eq!(r.send_errors, 0, "{r:?}");
        assert_eq!(r.lost, expected(400, |s| s % 10 == 9), "{r:?}");
        assert_eq!(
            r.duplicates,
            expected(400, |s| s % 10 != 9 && s % 7 == 3),
            "{r:?}"
        );
        assert_eq!(r.corrupt, 0, "{r:?}");
        assert_eq!(r.sent, r.received + r.lost);
    }

    #[test]
    fn drops_and_duplicates_counted_exactly_open_loop() {
        let (_s, ports) = servers(2, drop_every_10th_dup_some);
        let mut cfg = config(ports, Mode::Open { rate_per_s: 2000 });
        cfg.duration = Duration::from_secs(10);
        cfg.max_messages = Some(200);
        cfg.drain = Duration::from_millis(300);
        let r = run(&cfg).unwrap();
        assert_eq!(r.sent, 200, "{r:?}");
        assert_eq!(r.lost, expected(200, |s| s % 10 == 9), "{r:?}");
        assert_eq!(
            r.duplicates,
            expected(200, |s| s % 10 != 9 && s % 7 == 3),
            "{r:?}"
        );
        assert_eq!(r.corrupt, 0, "{r:?}");
    }

    #[test]
    fn corrupted_echoes_are_counted() {
        let (_s, ports) = servers(2, corrupting);
        let mut cfg = config(ports, Mode::Closed { window: 4 });
        cfg.duration = Duration::from_secs(10);
        cfg.max_messages = Some(300);
        cfg.timeout = Duration::from_millis(20);
        cfg.drain = Duration::from_millis(300);
        let r = run(&cfg).unwrap();
        assert_eq!(r.sent, 300, "{r:?}");
        let bad = expected(300, is_corrupted);
        assert_eq!(r.corrupt, bad, "{r:?}");
        assert_eq!(r.lost, bad, "{r:?}");
        assert_eq!(r.received, 300 - bad, "{r:?}");
        assert_eq!(r.duplicates, 0, "{r:?}");
    }

    #[test]
    fn no_listener_counts_everything_lost() {
        // Reserve an ephemeral port, then free it so nothing listens there.
        let port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cfg = config(vec![port], Mode::Closed { window: 1 });
        cfg.max_messages = Some(10);
        cfg.timeout = Duration::from_millis(5);
        cfg.drain = Duration::from_millis(20);
        let r = run(&cfg).unwrap();
        assert_eq!(r.sent + r.send_errors, 10, "{r:?}");
        assert_eq!(r.received, 0, "{r:?}");
        assert_eq!(r.lost, r.sent, "{r:?}");
    }

    #[test]
    fn cli_arguments_map_to_config() {
        use clap::Parser;
        let cli = Cli::try_parse_from([
            "lfrt-loadgen",
            "--ports",
            "7000-7003",
            "--mode",
            "open",
            "--rate",
            "1000",
            "--duration",
            "500ms",
            "--size",
            "128",
        ])
        .unwrap();
        let cfg = cli.to_config().unwrap();
        assert_eq!(cfg.ports, vec![7000, 7001, 7002, 7003]);
        assert_eq!(cfg.mode, Mode::Open { rate_per_s: 1000 });
        assert_eq!(cfg.duration, Duration::from_millis(500));
        assert_eq!(cfg.size, 128);
        assert_eq!(cfg.drain, DEFAULT_DRAIN);

        assert_eq!(cfg.clients, Clients::Unbatched { per_port: 1 });

        let cli = Cli::try_parse_from(["x", "--ports", "7000"]).unwrap();
        let cfg = cli.to_config().unwrap();
        assert_eq!(
            cfg.mode,
            Mode::Closed {
                window: DEFAULT_WINDOW
            }
        );
        assert_eq!(
            cfg.clients,
            Clients::Unbatched {
                per_port: DEFAULT_WINDOW
            },
            "default: independent clients, one outstanding datagram each"
        );
        let cli = Cli::try_parse_from(["x", "--ports", "7000", "--batched"]).unwrap();
        assert_eq!(cli.to_config().unwrap().clients, Clients::Batched);
        let cli = Cli::try_parse_from([
            "x",
            "--ports",
            "7000",
            "--window",
            "16",
            "--clients-per-port",
            "4",
        ])
        .unwrap();
        assert_eq!(
            cli.to_config().unwrap().clients,
            Clients::Unbatched { per_port: 4 }
        );
        assert!(Cli::try_parse_from([
            "x",
            "--ports",
            "7000",
            "--batched",
            "--clients-per-port",
            "2"
        ])
        .is_err());

        for args in [
            &["x", "--ports", "7000", "--mode", "open"][..],
            &["x", "--ports", "7000", "--rate", "10"][..],
            &["x", "--ports", "7000", "--target", "10.1.2.3"][..],
            &["x", "--ports", "7000", "--threads", "0"][..],
            &["x", "--ports", "7000", "--size", "10"][..],
            &["x", "--ports", "7000-6000"][..],
            &[
                "x",
                "--ports",
                "7000",
                "--window",
                "2",
                "--clients-per-port",
                "3",
            ][..],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            assert!(cli.to_config().is_err(), "{args:?}");
        }
        // Durations are refused while parsing (the one duration syntax of every command).
        for d in ["--duration=-1", "--duration=inf", "--duration=0.5"] {
            assert!(
                Cli::try_parse_from(["x", "--ports", "7000", d]).is_err(),
                "{d}"
            );
        }
    }

    #[test]
    fn json_report_has_expected_fields() {
        let cfg = LoadConfig::new(LOCAL, vec![7000], Mode::Open { rate_per_s: 10 });
        let report = merge(
            vec![WorkerResult {
                c: Counters {
                    sent: 3,
                    received: 2,
                    ..Counters::default()
                },
                lost: 1,
                hist: new_histogram().unwrap(),
                active_end_ns: NS_PER_S,
                per_port: vec![(0, 2)],
                cpu_ns: 900_000_000,
                wall_ns: NS_PER_S,
            }],
            0,
        )
        .unwrap();
        let v = report_json(&report, &cfg, 1);
        for k in [
            "sent",
            "received",
            "lost",
            "duplicates",
            "corrupt",
            "late_sends",
            "duration_s",
            "throughput_msgs_per_s",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        for k in ["p50", "p99", "p999", "max", "mean"] {
            assert!(v["rtt_us"].get(k).is_some(), "missing rtt_us.{k}");
        }
        assert_eq!(v["config"]["mode"], "open");
        assert_eq!(v["config"]["rate_per_s"], 10);
        assert_eq!(v["throughput_msgs_per_s"], 2.0);
        assert_eq!(v["received_per_port"], serde_json::json!([2]));
        assert_eq!(v["port_fairness"], 1.0);
        assert_eq!(v["config"]["clients"], "unbatched");
        assert_eq!(v["generator_cpu_pct"], 90.0);
        assert_eq!(
            v["generator_saturated"], true,
            "90 % > {GEN_SATURATED_PCT} %"
        );
        for k in [
            "send_calls",
            "recv_calls",
            "client_sockets",
            "generator_cpu_total_pct",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
    }

    #[test]
    fn port_fairness_is_the_least_served_port_over_the_mean() {
        assert_eq!(port_fairness(&[]), 0.0);
        assert_eq!(port_fairness(&[0, 0]), 0.0);
        assert_eq!(port_fairness(&[5, 5, 5]), 1.0);
        assert_eq!(port_fairness(&[50, 100, 150]), 0.5);
    }
}
