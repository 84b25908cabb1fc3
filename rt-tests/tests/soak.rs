//! Soak: one process, one runtime of two lanes, every kind of load at once for a while; then
//! the books must balance and the process must not have grown.
//!
//! `scripts/soak.sh` runs it for 60 s (or `--duration`); in the test suite it runs 10 s. The
//! duration comes from `LFRT_SOAK_DURATION` in lfrt's one duration syntax (`60`, `60s`, `10m`;
//! at least 5 s).
//!
//! # Set-up
//! A runtime of two lanes of 2 threads: `high` (SCHED_FIFO 60) and `low` (SCHED_FIFO 20) when
//! this process may use SCHED_FIFO, else both SCHED_OTHER (under CI, where privilege is
//! required, `util::rt_allowed` fails the test instead). Concurrently, for the duration:
//! * **UDP flood** (high lane): a client sends 64-byte datagrams, each a sequence number and a
//!   pattern derived from it, at [`UDP_RATE`]/s in bursts of [`UDP_BURST`] every millisecond,
//!   to an echo handler that checks each datagram (pattern, first sighting of its sequence
//!   number) and echoes the batch with one `sendmmsg`; a client receiver checks each echo the
//!   same way.
//! * **TCP churn** (low lane): connect to the built-in `TcpEcho` listener, send 16 unique bytes,
//!   read them back, close; at most one connection every [`TCP_PAUSE`] (≤ 200/s).
//! * **Timers**: 1 ms and 1.5 ms periodic timers on the high lane, 2 ms on the low lane.
//! * **Handle churn** (one thread per lane, not a pool thread): register an eventfd handler,
//!   notify it [`NOTES`] times with the registration's own payload `k` (unique per
//!   registration), wait until it has seen exactly those, notify once more (left pending) and
//!   deregister at once; then close the eventfd. The next registration takes the same slot
//!   (the free list is LIFO) and usually the same fd number, so a stale event of the old one
//!   would reach the new handler: each handler counts every dispatch whose token is not its
//!   own, whose eventfd is empty, or whose value is not a multiple of its `k`.
//! * **fd reuse**: the churned eventfds and TCP connections close and reopen descriptors all
//!   the time; the figures count how many registrations got an fd number and a slot used before.
//!
//! Load is bounded (paced or paused generators, no busy loops), so the FIFO lanes stay far
//! below the RT throttle (95% of each CPU): about 20,000 events/s in all, for which the pool
//! threads used about 20% of the 2 CPUs on the development machine (the figures print it).
//!
//! # What is checked
//! * **0 datagrams lost inside the server.** After the flood stops and drains, every datagram
//!   the client sent is accounted for, from counters of the handler, the client and the kernel:
//!   - sent = received by the handler + dropped by the kernel on the server socket's receive
//!     queue (`drops` of that socket in /proc/net/udp), and nothing is left in that queue;
//!   - received by the handler = echoed (accepted by `sendmmsg`) + refused by `sendmmsg` (the
//!     handler counts the echoes it asked for that `sendmmsg` did not send; the kernel's
//!     `SndbufErrors` in /proc/net/snmp must have grown by at least as many, so they were the
//!     kernel's send buffer and not the batch losing them);
//!   - echoed = received by the client + dropped on the client socket's receive queue.
//!
//!   "Lost in kernel" is the sum of the three kernel counts (the send refusals only as far as
//!   the kernel confirms them); "lost in server" is sent − received by the client − lost in
//!   kernel, and must be 0: no datagram that reached the server socket failed to reach the
//!   handler, and none the handler got was dropped on the way out.
//! * **0 duplicates and 0 corrupt datagrams**, seen by the handler and by the client.
//! * **0 stale deliveries**: no churned handler ran for an event not its own (another
//!   registration's token or value); every registration saw all its notifications (bounded
//!   wait) and never more than were written; every deregistration succeeded once. A run with
//!   nothing to read is not stale: handles are edge-triggered, and a report can reach a thread
//!   after an earlier run of the same handler read what it was for; such runs are counted and
//!   printed (`runs with nothing to read`).
//! * **Timers**: every period is accounted for: after the load, each timer's expirations read
//!   reach the number of periods elapsed (`missed` counts the periods that came in the same
//!   read as another: late, not lost).
//! * **TCP**: every connection completed before shutdown echoed its bytes.
//! * **RSS flat**: VmRSS is read every second; after a warm-up of 20% of the run, max − min
//!   stays under [`RSS_BOUND_KIB`] (2 MiB). Everything the runtime uses is preallocated in
//!   `Runtime::new`/`start`, and the test's own tables (sequence bitmaps) are written before the
//!   start; what is allocated per operation (a boxed handler per registration, a 4 KiB buffer
//!   per TCP connection, the client's 16-byte message) is freed after it and reused by the
//!   allocator. So a steady state only moves by the allocator's caching; a leak of one object
//!   per operation grows by its size times ~1,900 operations/s (15,000 in a 10 s run's 8 s
//!   window): 2 MiB catches a leak of ≥ 150 bytes per operation in 10 s, of ≥ 25 bytes in 60 s.
//! * **Shutdown under full load** (a second flood, the churns and the timers all running)
//!   returns within [`SHUTDOWN_BOUND`] (2 s): a liveness bound, not a latency claim.

mod util;

use lfrt::{
    Context, Disposition, Event, EventHandler, LaneConfig, Notifier, Policy, Registry, RtMode,
    Runtime, RuntimeConfig, Timer,
};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The test suite's duration when `LFRT_SOAK_DURATION` is not set.
const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Shortest run that leaves the RSS check a few samples after the warm-up.
const MIN_DURATION: Duration = Duration::from_secs(5);
/// UDP datagrams per second the client sends.
const UDP_RATE: u64 = 10_000;
/// Datagrams sent together, every millisecond.
const UDP_BURST: u64 = UDP_RATE / 1000;
/// Bytes per datagram: sequence number (8) and pattern.
const UDP_SIZE: usize = 64;
/// Least pause between two TCP connections.
const TCP_PAUSE: Duration = Duration::from_millis(5);
/// Pause between two registrations of one handle-churn thread.
const CHURN_PAUSE: Duration = Duration::from_millis(1);
/// Notifications each churned registration must see.
const NOTES: u64 = 3;
/// Timers: (lane, period µs).
const TIMERS: [(usize, u64); 3] = [(0, 1000), (0, 1500), (1, 2000)];
/// Delay from the start to the first expiry of every timer.
const TIMER_DELAY_NS: u64 = 20_000_000;
/// Bound on VmRSS max − min after the warm-up (see the module docs for why 2 MiB).
const RSS_BOUND_KIB: u64 = 2048;
/// Bound on `shutdown` under full load (liveness).
const SHUTDOWN_BOUND: Duration = Duration::from_secs(2);
/// Bound on every wait for something that must happen (drains, deliveries).
const LIVENESS_SECS: u64 = 10;
/// Sequence numbers of the flood that runs during shutdown start here (the handler's bitmap
/// does not cover them: they are not accounted).
const SHUTDOWN_FLOOD_SEQ: u64 = 1 << 62;

fn soak_duration() -> Duration {
    let d = match std::env::var("LFRT_SOAK_DURATION") {
        Ok(s) => {
            lfrt_tools::duration::parse(&s).unwrap_or_else(|e| panic!("LFRT_SOAK_DURATION: {e}"))
        }
        Err(_) => DEFAULT_DURATION,
    };
    assert!(
        d >= MIN_DURATION,
        "LFRT_SOAK_DURATION: at least {MIN_DURATION:?}"
    );
    d
}

// ---------------------------------------------------------------------------------------------
// Datagrams and the bitmaps that find duplicates.

fn pattern(seq: u64, i: usize) -> u8 {
    (seq.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(i as u32) as u8)
        ^ i as u8
}

fn fill(seq: u64, buf: &mut [u8; UDP_SIZE]) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in buf.iter_mut().enumerate().skip(8) {
        *b = pattern(seq, i);
    }
}

/// The sequence number of an intact datagram.
fn intact(buf: &[u8]) -> Option<u64> {
    if buf.len() != UDP_SIZE {
        return None;
    }
    let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
    (8..UDP_SIZE)
        .all(|i| buf[i] == pattern(seq, i))
        .then_some(seq)
}

/// One bit per sequence number, written at construction so its pages are resident before the
/// run (the RSS check).
struct Seen(Vec<AtomicU64>);

impl Seen {
    fn new(bits: u64) -> Seen {
        Seen((0..bits.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }
    /// `Some(true)` the first time `seq` is marked, `Some(false)` after; `None` out of range.
    fn mark(&self, seq: u64) -> Option<bool> {
        let word = self.0.get(usize::try_from(seq / 64).ok()?)?;
        let bit = 1 << (seq % 64);
        Some(word.fetch_or(bit, Relaxed) & bit == 0)
    }
}

#[derive(Default)]
struct Flow {
    /// Datagrams taken (server) or echoes received (client).
    received: AtomicU64,
    duplicates: AtomicU64,
    corrupt: AtomicU64,
    /// Intact, but a sequence number beyond the bitmap.
    out_of_range: AtomicU64,
}

impl Flow {
    fn check(&self, seen: &Seen, payload: &[u8]) {
        self.received.fetch_add(1, Relaxed);
        match intact(payload).map(|s| (s, seen.mark(s))) {
            None => self.corrupt.fetch_add(1, Relaxed),
            Some((_, Some(false))) => self.duplicates.fetch_add(1, Relaxed),
            Some((s, None)) if s < SHUTDOWN_FLOOD_SEQ => self.out_of_range.fetch_add(1, Relaxed),
            Some(_) => 0,
        };
    }
}

/// The echo handler: checks each datagram of a batch, echoes the batch, counts what the kernel
/// refused.
struct SeqEcho {
    sock: UdpSocket,
    flow: Arc<Flow>,
    seen: Arc<Seen>,
    echoed: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

impl EventHandler for SeqEcho {
    fn source(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
    fn handle(&mut self, _e: &Event, ctx: &mut Context) -> Disposition {
        let batch = ctx.datagrams();
        loop {
            match batch.recv(self.sock.as_fd()) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Disposition::Rearm,
            }
        }
        let mut replies = 0;
        for i in 0..batch.len() {
            let mut d = batch.get(i);
            self.flow.check(&self.seen, d.payload());
            // Echo every datagram that arrived whole (all do: the slots hold 2048 bytes).
            if !d.is_truncated() {
                d.answer();
                replies += 1;
            }
        }
        let sent = batch.reply(self.sock.as_fd());
        self.echoed.fetch_add(sent as u64, Relaxed);
        self.refused.fetch_add((replies - sent) as u64, Relaxed);
        Disposition::Rearm
    }
}

/// Sends sequence-numbered datagrams at [`UDP_RATE`] (bursts every millisecond against absolute
/// deadlines; a sender more than 10 ms behind skips ahead instead of bursting) until `stop`.
fn udp_sender(sock: &UdpSocket, first: u64, stop: &AtomicBool, sent: &AtomicU64) {
    let tick = Duration::from_millis(1);
    let mut next = Instant::now();
    let mut seq = first;
    let mut buf = [0u8; UDP_SIZE];
    while !stop.load(Relaxed) {
        for _ in 0..UDP_BURST {
            fill(seq, &mut buf);
            seq += 1;
            if sock.send(&buf).is_ok() {
                sent.fetch_add(1, Relaxed);
            }
        }
        next += tick;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else if now - next > 10 * tick {
            next = now;
        }
    }
}

/// Receives and checks echoes until `stop`.
fn udp_receiver(sock: &UdpSocket, flow: &Flow, seen: &Seen, stop: &AtomicBool) {
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let mut buf = [0u8; 2048];
    while !stop.load(Relaxed) {
        if let Ok(n) = sock.recv(&mut buf) {
            flow.check(seen, &buf[..n]);
        }
    }
}

/// `(bytes queued to receive, datagrams the kernel dropped)` of a UDP socket, from its line in
/// /proc/net/udp (found by the socket's inode).
fn udp_socket_counters(inode: u64) -> (u64, u64) {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 13 && f[9].parse() == Ok(inode) {
            let rx = f[4].split(':').nth(1).unwrap();
            return (u64::from_str_radix(rx, 16).unwrap(), f[12].parse().unwrap());
        }
    }
    panic!("socket inode {inode} not in /proc/net/udp");
}

/// The kernel's count of UDP sends refused for lack of send buffer (`SndbufErrors` in
/// /proc/net/snmp; for the network namespace, so other processes may add to it).
fn udp_sndbuf_errors() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap();
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next().unwrap(), udp.next().unwrap());
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "SndbufErrors")
        .map(|(_, v)| v.parse().unwrap())
        .expect("SndbufErrors in /proc/net/snmp")
}

fn socket_inode(fd: BorrowedFd<'_>) -> u64 {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
    let link = link.to_string_lossy();
    link.strip_prefix("socket:[")
        .and_then(|s| s.strip_suffix(']'))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a socket: {link}"))
}

// ---------------------------------------------------------------------------------------------
// Timers.

#[derive(Default)]
struct TimerCounts {
    expiries: AtomicU64,
    missed: AtomicU64,
    /// Dispatches with no expiry to read: handles are edge-triggered, and a report can reach
    /// a thread after an earlier run of the same handler read what it was for (allowed, and
    /// counted; a report of *another* handle would fail the churn check instead).
    empty: AtomicU64,
}

struct Tick {
    timer: Timer,
    counts: Arc<TimerCounts>,
}

impl EventHandler for Tick {
    fn source(&self) -> BorrowedFd<'_> {
        self.timer.as_fd()
    }
    fn handle(&mut self, _e: &Event, _c: &mut Context) -> Disposition {
        match self.timer.read() {
            Ok(Some((n, _))) => {
                self.counts.expiries.fetch_add(n, Relaxed);
                self.counts.missed.fetch_add(n - 1, Relaxed);
            }
            _ => {
                self.counts.empty.fetch_add(1, Relaxed);
            }
        }
        Disposition::Rearm
    }
}

// ---------------------------------------------------------------------------------------------
// Handle churn.

/// One churn thread's state, shared with the handler it has registered at the moment.
#[derive(Default)]
struct ChurnState {
    /// Token of the current registration.
    token: AtomicU64,
    /// Notifications the current registration has seen.
    delivered: AtomicU64,
    /// Dispatches not for the current registration, or with a value not its own (all
    /// registrations).
    stale: AtomicU64,
    /// Dispatches of the current registration with nothing to read (see `TimerCounts::empty`).
    empty: AtomicU64,
}

struct Churned {
    n: Arc<Notifier>,
    k: u64,
    state: Arc<ChurnState>,
}

impl EventHandler for Churned {
    fn source(&self) -> BorrowedFd<'_> {
        self.n.as_fd()
    }
    fn handle(&mut self, e: &Event, _c: &mut Context) -> Disposition {
        let v = self.n.take().unwrap_or(0);
        if e.token().raw() != self.state.token.load(Acquire) || !v.is_multiple_of(self.k) {
            self.state.stale.fetch_add(1, Relaxed);
        } else if v == 0 {
            self.state.empty.fetch_add(1, Relaxed);
        } else {
            self.state.delivered.fetch_add(v / self.k, Release);
        }
        Disposition::Rearm
    }
}

#[derive(Default)]
struct ChurnCounts {
    registrations: AtomicU64,
    deregistrations: AtomicU64,
    /// Registrations that did not see all their notifications within the liveness bound.
    undelivered: AtomicU64,
    /// Registrations that saw more notifications than were written.
    extra: AtomicU64,
    /// Deregistrations that did not return true once, then false.
    bad_deregistrations: AtomicU64,
    register_errors: AtomicU64,
    fd_reused: AtomicU64,
    slot_reused: AtomicU64,
}

/// Registers, notifies, checks and deregisters eventfd handlers in `reg` until `stop`. Failures
/// observed once `shutting_down` is set are not counted (the lane no longer dispatches).
fn churn(
    tag: u64,
    reg: &Registry,
    state: &Arc<ChurnState>,
    counts: &ChurnCounts,
    shutting_down: &AtomicBool,
    stop: &AtomicBool,
) {
    let mut fds_seen = vec![false; 1 << 16];
    let mut slots_seen = vec![false; 1 << 16];
    let mut round = 0u64;
    while !stop.load(Relaxed) {
        round += 1;
        let k = tag << 40 | round;
        let n = Arc::new(Notifier::new().unwrap());
        let fd = n.as_fd().as_raw_fd() as usize;
        state.delivered.store(0, Relaxed);
        let handler = Churned {
            n: n.clone(),
            k,
            state: state.clone(),
        };
        let token = match reg.register(Box::new(handler)) {
            Ok(t) => t,
            Err(_) => {
                if !shutting_down.load(Relaxed) {
                    counts.register_errors.fetch_add(1, Relaxed);
                }
                std::thread::sleep(CHURN_PAUSE);
                continue;
            }
        };
        state.token.store(token.raw(), Release);
        counts.registrations.fetch_add(1, Relaxed);
        if let Some(seen) = fds_seen.get_mut(fd) {
            counts.fd_reused.fetch_add(u64::from(*seen), Relaxed);
            *seen = true;
        }
        if let Some(seen) = slots_seen.get_mut(token.index()) {
            counts.slot_reused.fetch_add(u64::from(*seen), Relaxed);
            *seen = true;
        }
        for _ in 0..NOTES {
            n.notify(k).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(LIVENESS_SECS);
        while state.delivered.load(Acquire) < NOTES
            && Instant::now() < deadline
            && !stop.load(Relaxed)
        {
            std::thread::sleep(Duration::from_micros(50));
        }
        let counting = !shutting_down.load(Relaxed);
        if counting && state.delivered.load(Acquire) < NOTES {
            counts.undelivered.fetch_add(1, Relaxed);
        }
        // Left pending: its event may be on its way while the slot is emptied and reused.
        n.notify(k).unwrap();
        let first = reg.deregister(token);
        let again = reg.deregister(token);
        if counting && !shutting_down.load(Relaxed) && (!first || again) {
            counts.bad_deregistrations.fetch_add(1, Relaxed);
        }
        counts.deregistrations.fetch_add(u64::from(first), Relaxed);
        if state.delivered.load(Acquire) > NOTES + 1 {
            counts.extra.fetch_add(1, Relaxed);
        }
        drop(n); // the handler's clone went with the deregistration: the eventfd closes
        std::thread::sleep(CHURN_PAUSE);
    }
}

// ---------------------------------------------------------------------------------------------
// TCP churn, RSS, CPU.

#[derive(Default)]
struct TcpCounts {
    ok: AtomicU64,
    failed: AtomicU64,
    corrupt: AtomicU64,
}

/// Opens a connection, echoes 16 unique bytes, closes; until `stop`.
fn tcp_churn(addr: SocketAddr, counts: &TcpCounts, stop: &AtomicBool) {
    let timeout = Some(Duration::from_secs(2));
    let mut n = 0u64;
    while !stop.load(Relaxed) {
        n += 1;
        let msg = format!("conn {n:010}\n");
        let result = (|| -> io::Result<[u8; 16]> {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
            s.set_read_timeout(timeout)?;
            s.set_write_timeout(timeout)?;
            s.write_all(msg.as_bytes())?;
            let mut back = [0u8; 16];
            s.read_exact(&mut back)?;
            Ok(back)
        })();
        match result {
            Ok(back) if back == msg.as_bytes() => counts.ok.fetch_add(1, Relaxed),
            Ok(_) => counts.corrupt.fetch_add(1, Relaxed),
            Err(_) => counts.failed.fetch_add(1, Relaxed),
        };
        std::thread::sleep(TCP_PAUSE);
    }
}

fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// CPU seconds (user + system) a thread of this process has used.
fn thread_cpu_s(tid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces): state is field 3, utime 14,
    // stime 15.
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks as f64 / hz as f64
}

// ---------------------------------------------------------------------------------------------

/// Sets every flag when dropped, so that a check failing inside the thread scope still stops
/// the load threads the scope then joins.
struct StopAll<'a>(Vec<&'a AtomicBool>);

impl Drop for StopAll<'_> {
    fn drop(&mut self) {
        for flag in &self.0 {
            flag.store(true, Relaxed);
        }
    }
}

/// What the run found, taken before the shutdown (and its duration).
struct End {
    balanced: bool,
    srv_drops: u64,
    srv_refused: u64,
    sndbuf_errors: u64,
    cli_drops: u64,
    timers_caught_up: bool,
    due: Vec<u64>,
    pool_cpu_s: f64,
    run_s: f64,
    tcp_ok: u64,
    tcp_failed: u64,
    tcp_corrupt: u64,
    shutdown_time: Duration,
}

#[derive(Default)]
struct Churns {
    high: ChurnCounts,
    low: ChurnCounts,
}

#[test]
fn soak_under_load_loses_nothing_and_stays_flat() {
    let _l = util::rt_lock();
    let duration = soak_duration();
    let fifo = util::rt_allowed("soak_under_load_loses_nothing_and_stays_flat", 60);
    let lane = |name: &str, priority: u8, buffer_bytes: usize| {
        let mut g = if fifo {
            LaneConfig::new(name, Policy::Fifo, priority)
        } else {
            LaneConfig::new(name, Policy::Other, 0)
        };
        g.threads = 2;
        g.buffer_bytes = buffer_bytes;
        g.max_handles = 256;
        g
    };
    let mut rt = Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: if fifo {
            RtMode::Required
        } else {
            RtMode::BestEffort
        },
        lock_memory: false,
        lanes: vec![lane("high", 60, 2048), lane("low", 20, 4096)],
        bands: Vec::new(),
    })
    .unwrap();
    let regs = [
        rt.lane("high").unwrap().registry(),
        rt.lane("low").unwrap().registry(),
    ];

    // UDP echo on the high lane.
    let seq_bits = UDP_RATE * (duration.as_secs() + 10);
    let (server_seen, client_seen) = (Arc::new(Seen::new(seq_bits)), Arc::new(Seen::new(seq_bits)));
    let (server_flow, client_flow) = (Arc::new(Flow::default()), Arc::new(Flow::default()));
    let (echoed, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let server = UdpSocket::bind("127.0.0.1:0").unwrap();
    server.set_nonblocking(true).unwrap();
    let server_addr = server.local_addr().unwrap();
    let server_inode = socket_inode(server.as_fd());
    regs[0]
        .register(Box::new(SeqEcho {
            sock: server,
            flow: server_flow.clone(),
            seen: server_seen.clone(),
            echoed: echoed.clone(),
            refused: refused.clone(),
        }))
        .unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.connect(server_addr).unwrap();
    let client_inode = socket_inode(client.as_fd());

    // TCP echo on the low lane.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_addr = listener.local_addr().unwrap();
    regs[1]
        .register(Box::new(
            lfrt::handlers::TcpEcho::new(listener, 0, 64, 64 * 1024).unwrap(),
        ))
        .unwrap();

    // Timers.
    let first_ns = lfrt::os::now_ns() + TIMER_DELAY_NS;
    let timers: Vec<(u64, Arc<TimerCounts>)> = TIMERS
        .iter()
        .map(|&(g, period_us)| {
            let mut t = Timer::new().unwrap();
            t.arm(first_ns, period_us * 1000).unwrap();
            let counts = Arc::new(TimerCounts::default());
            regs[g]
                .register(Box::new(Tick {
                    timer: t,
                    counts: counts.clone(),
                }))
                .unwrap();
            (period_us * 1000, counts)
        })
        .collect();

    let sndbuf_errors_before = udp_sndbuf_errors();
    rt.start().unwrap();
    let started = Instant::now();
    let (stop_udp, stop_rx, stop_rss) = (
        AtomicBool::new(false),
        AtomicBool::new(false),
        AtomicBool::new(false),
    );
    let (shutting_down, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let sent = AtomicU64::new(0);
    let tcp = TcpCounts::default();
    let churns = Churns::default();
    let states = [
        Arc::new(ChurnState::default()),
        Arc::new(ChurnState::default()),
    ];
    let rss: Mutex<Vec<(f64, u64)>> =
        Mutex::new(Vec::with_capacity(duration.as_secs() as usize + 64));

    // The flood that runs during the shutdown.
    let flood = UdpSocket::bind("127.0.0.1:0").unwrap();
    flood.connect(server_addr).unwrap();
    let (stop_flood, flood_sent) = (AtomicBool::new(false), AtomicU64::new(0));

    let report = std::thread::scope(|s| {
        let _stop_all = StopAll(vec![
            &stop_udp,
            &stop_rx,
            &stop_rss,
            &shutting_down,
            &stop,
            &stop_flood,
        ]);
        s.spawn(|| {
            while !stop_rss.load(Relaxed) {
                let sample = (started.elapsed().as_secs_f64(), vm_rss_kib());
                rss.lock().unwrap().push(sample);
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        let sender = s.spawn(|| udp_sender(&client, 0, &stop_udp, &sent));
        s.spawn(|| udp_receiver(&client, &client_flow, &client_seen, &stop_rx));
        s.spawn(|| tcp_churn(tcp_addr, &tcp, &stop));
        for (i, counts) in [&churns.high, &churns.low].into_iter().enumerate() {
            let (reg, state) = (&regs[i], &states[i]);
            let (shutting_down, stop) = (&shutting_down, &stop);
            s.spawn(move || churn(i as u64 + 1, reg, state, counts, shutting_down, stop));
        }

        std::thread::sleep(duration.saturating_sub(started.elapsed()));

        // 1. The flood stops and drains; every datagram is accounted for.
        stop_udp.store(true, Relaxed);
        stop_rss.store(true, Relaxed);
        sender.join().unwrap();
        let books = || {
            let (srv_queue, srv_drops) = udp_socket_counters(server_inode);
            let (cli_queue, cli_drops) = udp_socket_counters(client_inode);
            let s = sent.load(Relaxed);
            let (r, e, f) = (
                server_flow.received.load(Relaxed),
                echoed.load(Relaxed),
                refused.load(Relaxed),
            );
            let c = client_flow.received.load(Relaxed);
            let balanced = s == r + srv_drops && r == e + f && e == c + cli_drops;
            (
                balanced && srv_queue == 0 && cli_queue == 0,
                (srv_drops, f, cli_drops),
            )
        };
        util::wait_until(LIVENESS_SECS, || books().0);
        let (balanced, (srv_drops, srv_refused, cli_drops)) = books();
        let sndbuf_errors = udp_sndbuf_errors() - sndbuf_errors_before;
        stop_rx.store(true, Relaxed);

        // 2. Every timer period elapsed by now is read by its handler.
        let now = lfrt::os::now_ns();
        let due: Vec<u64> = timers
            .iter()
            .map(|(period, _)| now.saturating_sub(first_ns) / period + 1)
            .collect();
        util::wait_until(LIVENESS_SECS, || {
            timers
                .iter()
                .zip(&due)
                .all(|((_, c), &d)| c.expiries.load(Relaxed) >= d)
        });
        let timers_caught_up = timers
            .iter()
            .zip(&due)
            .all(|((_, c), &d)| c.expiries.load(Relaxed) >= d);

        // 3. Shutdown under full load: a second flood, the churns, the timers.
        let flood_thread =
            s.spawn(|| udp_sender(&flood, SHUTDOWN_FLOOD_SEQ, &stop_flood, &flood_sent));
        std::thread::sleep(Duration::from_millis(300));
        let end = End {
            balanced,
            srv_drops,
            srv_refused,
            sndbuf_errors,
            cli_drops,
            timers_caught_up,
            due,
            pool_cpu_s: rt
                .thread_ids()
                .iter()
                .map(|&(_, _, tid)| thread_cpu_s(tid))
                .sum(),
            run_s: started.elapsed().as_secs_f64(),
            tcp_ok: tcp.ok.load(Relaxed),
            tcp_failed: tcp.failed.load(Relaxed),
            tcp_corrupt: tcp.corrupt.load(Relaxed),
            shutdown_time: Duration::ZERO,
        };
        shutting_down.store(true, Relaxed);
        let t0 = Instant::now();
        let metrics = rt.shutdown();
        let shutdown_time = t0.elapsed();
        stop.store(true, Relaxed);
        stop_flood.store(true, Relaxed);
        flood_thread.join().unwrap();
        (
            metrics,
            End {
                shutdown_time,
                ..end
            },
        )
    });
    let (metrics, end) = report;
    let End {
        balanced,
        srv_drops,
        srv_refused,
        sndbuf_errors,
        cli_drops,
        timers_caught_up,
        due,
        pool_cpu_s,
        run_s,
        tcp_ok,
        tcp_failed,
        tcp_corrupt,
        shutdown_time,
    } = end;
    let metrics = metrics.expect("every pool thread returned");

    // The figures.
    let sent = sent.load(Relaxed);
    let received = client_flow.received.load(Relaxed);
    // Only the refusals the kernel confirms are the kernel's.
    let srv_send_refused = srv_refused.min(sndbuf_errors);
    let lost_in_kernel = srv_drops + srv_send_refused + cli_drops;
    let lost_in_server = sent as i64 - received as i64 - lost_in_kernel as i64;
    let dups = server_flow.duplicates.load(Relaxed) + client_flow.duplicates.load(Relaxed);
    let corrupt = server_flow.corrupt.load(Relaxed) + client_flow.corrupt.load(Relaxed);
    let out_of_range =
        server_flow.out_of_range.load(Relaxed) + client_flow.out_of_range.load(Relaxed);
    let expiries: u64 = timers.iter().map(|(_, c)| c.expiries.load(Relaxed)).sum();
    let missed: u64 = timers.iter().map(|(_, c)| c.missed.load(Relaxed)).sum();
    let timer_empty: u64 = timers.iter().map(|(_, c)| c.empty.load(Relaxed)).sum();
    let sum = |f: fn(&ChurnCounts) -> &AtomicU64| {
        f(&churns.high).load(Relaxed) + f(&churns.low).load(Relaxed)
    };
    let stale: u64 = states.iter().map(|s| s.stale.load(Relaxed)).sum();
    let empty_runs = timer_empty + states.iter().map(|s| s.empty.load(Relaxed)).sum::<u64>();
    let filtered: u64 = metrics.iter().map(|m| m.stale_events).sum();
    let warmup_s = duration.as_secs_f64() * 0.2;
    let window: Vec<u64> = rss
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| *t >= warmup_s)
        .map(|&(_, kib)| kib)
        .collect();
    let (rss_min, rss_max) = (
        window.iter().copied().min().unwrap_or(0),
        window.iter().copied().max().unwrap_or(0),
    );
    let lanes = if fifo {
        "SCHED_FIFO lanes: high 60, low 20"
    } else {
        "SCHED_OTHER lanes (no RT privilege)"
    };
    let row = |what: &str, figure: String| println!("| {what:<44} | {figure:>34} |");
    println!(
        "\n=== lfrt soak: {:.0} s, {lanes}, 2 + 2 pool threads ===",
        duration.as_secs_f64()
    );
    row("UDP datagrams sent", sent.to_string());
    row(
        "UDP datagrams echoed (back at the client)",
        received.to_string(),
    );
    row(
        "UDP lost in kernel (srv rcvbuf/srv send/cli rcvbuf)",
        format!("{lost_in_kernel} ({srv_drops}/{srv_send_refused}/{cli_drops})"),
    );
    row("UDP lost in server", lost_in_server.to_string());
    row(
        "UDP duplicates (server + client)",
        format!(
            "{dups} ({} + {})",
            server_flow.duplicates.load(Relaxed),
            client_flow.duplicates.load(Relaxed)
        ),
    );
    row("UDP corrupt (server + client)", corrupt.to_string());
    row(
        "TCP connections ok / failed (before shutdown)",
        format!("{tcp_ok} / {tcp_failed}"),
    );
    row(
        "timer expiries / missed periods",
        format!("{expiries} / {missed} ({} timers)", TIMERS.len()),
    );
    let (registrations, deregistrations) = (sum(|c| &c.registrations), sum(|c| &c.deregistrations));
    row(
        "handle registrations / deregistrations / stale",
        format!(
            "{registrations} / {deregistrations} (+{} at shutdown) / {stale}",
            registrations - deregistrations
        ),
    );
    row(
        "  fd numbers reused / slots reused",
        format!("{} / {}", sum(|c| &c.fd_reused), sum(|c| &c.slot_reused)),
    );
    row(
        "  stale events filtered by the runtime",
        filtered.to_string(),
    );
    row(
        "runs with nothing to read (timers + churn)",
        empty_runs.to_string(),
    );
    row(
        &format!("RSS min / max after {warmup_s:.0} s warm-up (KiB)"),
        format!(
            "{rss_min} / {rss_max} (+{} KiB, {} samples)",
            rss_max - rss_min,
            window.len()
        ),
    );
    row(
        "pool threads' CPU (share of 2 CPUs)",
        format!(
            "{pool_cpu_s:.2} s in {run_s:.1} s ({:.1}%)",
            100.0 * pool_cpu_s / run_s / 2.0
        ),
    );
    row(
        "shutdown under full load",
        format!("{:.1} ms", shutdown_time.as_secs_f64() * 1e3),
    );
    println!("=== end ===");

    assert!(
        balanced,
        "UDP books do not balance: sent {sent}, handler took {}, echoed {}, refused \
         {srv_refused}, client got {received}, kernel drops server {srv_drops} client {cli_drops}",
        server_flow.received.load(Relaxed),
        echoed.load(Relaxed)
    );
    assert_eq!(lost_in_server, 0, "datagrams lost inside the server");
    // The echoes the handler counts as refused by the kernel were: the kernel counted at least
    // as many refusals (for the whole namespace) meanwhile.
    assert!(
        srv_refused <= sndbuf_errors,
        "{srv_refused} echoes not sent, but the kernel refused only {sndbuf_errors} UDP sends"
    );
    assert_eq!(dups, 0, "duplicated datagrams");
    assert_eq!(corrupt, 0, "corrupt datagrams");
    assert_eq!(out_of_range, 0, "sequence numbers past the bitmap");
    assert!(sent > 0 && received > 0, "the flood did not run");
    assert_eq!(stale, 0, "a handler ran for an event not its own");
    assert_eq!(
        sum(|c| &c.undelivered),
        0,
        "registrations that did not see all their notifications"
    );
    assert_eq!(
        sum(|c| &c.extra),
        0,
        "registrations that saw more notifications than were written"
    );
    assert_eq!(
        sum(|c| &c.bad_deregistrations),
        0,
        "deregistrations not true once, then false"
    );
    assert_eq!(sum(|c| &c.register_errors), 0, "registrations refused");
    assert!(registrations > 0, "the handle churn did not run");
    // Each churn thread may have had one registration in flight that the shutdown closed.
    assert!(
        registrations - deregistrations <= 2,
        "{registrations} registrations, {deregistrations} deregistrations"
    );
    assert!(
        timers_caught_up,
        "timer expirations read {:?} < periods elapsed {due:?}",
        timers
            .iter()
            .map(|(_, c)| c.expiries.load(Relaxed))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        (tcp_failed, tcp_corrupt),
        (0, 0),
        "TCP connections failed or echoed other bytes"
    );
    assert!(tcp_ok > 0, "the TCP churn did not run");
    assert!(window.len() >= 3, "too few RSS samples: {window:?}");
    assert!(
        rss_max - rss_min < RSS_BOUND_KIB,
        "RSS grew after the warm-up: {window:?} KiB"
    );
    assert!(
        shutdown_time < SHUTDOWN_BOUND,
        "shutdown under load took {shutdown_time:?}"
    );
    assert!(metrics.iter().all(|m| m.handler_panics == 0), "{metrics:?}");
}
