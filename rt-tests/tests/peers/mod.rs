//! Peers against a reference model: the driver shared by the proptest state-machine test
//! (`tests/peer_fuzz.rs`, fixed seed, runs in CI) and the libFuzzer targets (`fuzz/`), which
//! include this file by path. It uses only std and lfrt's public API.
//!
//! * [`Streams`]: a runtime with one [`Framed`] listener (a lane of policy `other`, so a fuzzer
//!   can never freeze the machine) and up to [`CONNS`] client connections on loopback driven
//!   by [`StreamOp`]s: well-formed frames split at arbitrary points, raw bytes, oversized
//!   headers, half-closes and resets. [`Streams::finish`] checks the case against the model.
//! * [`Datagrams`]: a runtime with one [`UdpEcho`] lane, fed datagrams of any length and TOS.
//! * [`bands`]: a [`band::bind`] plan fed datagrams of any TOS and payload.
#![allow(dead_code)]

use lfrt::band::{self, Bands, Classify};
use lfrt::handlers::UdpEcho;
use lfrt::stream::{Flow, Framed, Limits, Output};
use lfrt::{LaneConfig, LaneMetrics, Policy, RtMode, Runtime, RuntimeConfig};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Largest frame body the server takes; a longer header closes the connection.
pub const MAX_FRAME: usize = 48;
/// Client connections per case.
pub const CONNS: usize = 3;
/// Every wait is bounded by this: a hang fails the case instead of freezing the run.
const LIVENESS: Duration = Duration::from_secs(10);

/// One step of a stream case.
#[derive(Debug, Clone)]
pub enum StreamOp {
    /// A well-formed frame (its body cut to [`MAX_FRAME`]), written in pieces cut at `splits`.
    Frame {
        conn: usize,
        body: Vec<u8>,
        splits: Vec<usize>,
    },
    /// Any bytes.
    Raw { conn: usize, bytes: Vec<u8> },
    /// A header announcing `MAX_FRAME + 1 + extra` bytes.
    Oversize { conn: usize, extra: u32 },
    /// `shutdown(SHUT_WR)`: the peer's end of stream.
    HalfClose { conn: usize },
    /// `SO_LINGER` 0 and close: a reset.
    Reset { conn: usize },
}

/// How a connection's byte stream parses by the Framed grammar (4-byte big-endian length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// Complete frames before the end or an oversized header.
    pub frames: Vec<Vec<u8>>,
    /// What follows them.
    pub tail: Tail,
}

/// The end of a parsed stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Nothing: the stream ends between frames.
    Clean,
    /// Part of a frame.
    Partial,
    /// A header above [`MAX_FRAME`] (what follows it is never read as frames).
    Oversize,
}

/// The reference model of the Framed grammar.
pub fn parse(wire: &[u8]) -> Parsed {
    let mut frames = Vec::new();
    let mut at = 0;
    loop {
        let rest = &wire[at..];
        if rest.is_empty() {
            return Parsed {
                frames,
                tail: Tail::Clean,
            };
        }
        if rest.len() < 4 {
            return Parsed {
                frames,
                tail: Tail::Partial,
            };
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > MAX_FRAME {
            return Parsed {
                frames,
                tail: Tail::Oversize,
            };
        }
        if rest.len() < 4 + len {
            return Parsed {
                frames,
                tail: Tail::Partial,
            };
        }
        frames.push(rest[4..4 + len].to_vec());
        at += 4 + len;
    }
}

/// The server's answer to a frame: its body reversed.
pub fn answer(frame: &[u8]) -> Vec<u8> {
    frame.iter().rev().copied().collect()
}

/// How a client ended its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Open,
    HalfClosed,
    Reset,
}

struct Client {
    /// `None` once reset (closed with `SO_LINGER` 0).
    sock: Option<TcpStream>,
    /// Every byte written (or attempted: a write after the server closed may fail).
    wire: Vec<u8>,
    end: End,
}

/// A runtime serving one [`Framed`] listener, and the clients of the current case.
pub struct Streams {
    rt: Runtime,
    addr: SocketAddr,
    clients: Vec<Option<Client>>,
    /// The counters at the start of the case.
    before: LaneMetrics,
    /// Handles registered with no client connected (the listener).
    idle_handles: usize,
}

/// A lane `lane` of `threads` threads at policy `other` (never real-time).
fn runtime(threads: usize, buffer_bytes: usize) -> Runtime {
    let mut g = LaneConfig::new("lane", Policy::Other, 0);
    g.threads = threads;
    g.buffer_bytes = buffer_bytes;
    Runtime::new(RuntimeConfig {
        trace: Default::default(),
        rt: RtMode::BestEffort,
        lock_memory: false,
        lanes: vec![g],
        bands: Vec::new(),
    })
    .expect("runtime")
}

fn lane_metrics(rt: &Runtime) -> LaneMetrics {
    rt.metrics().remove(0)
}

/// Polls `cond` every millisecond for up to [`LIVENESS`] (a liveness bound, not a timing
/// assertion).
fn wait_until(mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + LIVENESS;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}

impl Default for Streams {
    fn default() -> Streams {
        Streams::new()
    }
}

impl Streams {
    /// Starts the runtime: 2 threads, room for every client of a case plus those still closing.
    pub fn new() -> Streams {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        let limits = Limits {
            max_connections: 4 * CONNS,
            max_frame: MAX_FRAME,
            max_output: 4 * (4 + MAX_FRAME),
            ..Limits::default()
        };
        let reverse = |frame: &[u8], out: &mut Output<'_>| {
            let body = out.frame(frame.len()).expect("the first reply always fits");
            body.copy_from_slice(frame);
            body.reverse();
            Flow::Continue
        };
        let mut rt = runtime(2, 2048);
        let server = Framed::new(listener, limits, reverse).expect("framed");
        rt.lane("lane")
            .unwrap()
            .registry()
            .register(Box::new(server))
            .unwrap();
        rt.start().expect("start");
        let before = lane_metrics(&rt);
        let idle_handles = before.handles;
        Streams {
            rt,
            addr,
            clients: (0..CONNS).map(|_| None).collect(),
            before,
            idle_handles,
        }
    }

    /// Starts a case: drops the clients of the last one (which may have failed half-way),
    /// waits until the server closed them, and reads the counters again.
    pub fn begin(&mut self) {
        self.clients.iter_mut().for_each(|c| *c = None);
        let (rt, idle) = (&self.rt, self.idle_handles);
        assert!(
            wait_until(|| lane_metrics(rt).handles == idle),
            "the last case's connections were not closed"
        );
        self.before = lane_metrics(&self.rt);
    }

    /// The open client `conn` (connected on first use, and accepted by the server before it
    /// is used, so that a reset always reaches a served connection).
    fn open(&mut self, conn: usize) -> Option<&mut Client> {
        let conn = conn % CONNS;
        if self.clients[conn].is_none() {
            let sock = TcpStream::connect(self.addr).expect("connect");
            sock.set_read_timeout(Some(LIVENESS)).unwrap();
            sock.set_nodelay(true).unwrap();
            self.clients[conn] = Some(Client {
                sock: Some(sock),
                wire: Vec::new(),
                end: End::Open,
            });
            // Handles ever registered: those now, and those closed (the server may have closed
            // this case's earlier connections already).
            let ever = |m: &LaneMetrics| m.handles as u64 + m.handles_closed;
            let opened = self.clients.iter().flatten().count() as u64;
            let (rt, before) = (&self.rt, ever(&self.before));
            assert!(
                wait_until(|| ever(&lane_metrics(rt)) >= before + opened),
                "connection {conn} not accepted within {LIVENESS:?}"
            );
        }
        self.clients[conn].as_mut().filter(|c| c.end == End::Open)
    }

    /// Applies one step. Steps on a connection its client already ended are ignored.
    pub fn apply(&mut self, op: &StreamOp) {
        fn write(c: &mut Client, pieces: &[&[u8]]) {
            let sock = c.sock.as_mut().expect("open");
            for p in pieces {
                c.wire.extend_from_slice(p);
                // The server may have closed already (after an oversized header): the bytes
                // stay in the model, which never reads past that header.
                let _ = sock.write_all(p);
            }
        }
        match op {
            StreamOp::Frame { conn, body, splits } => {
                let Some(c) = self.open(*conn) else { return };
                let body = &body[..body.len().min(MAX_FRAME)];
                let mut frame = (body.len() as u32).to_be_bytes().to_vec();
                frame.extend_from_slice(body);
                let mut cuts: Vec<usize> = splits.iter().map(|s| s % (frame.len() + 1)).collect();
                cuts.extend([0, frame.len()]);
                cuts.sort_unstable();
                cuts.dedup();
                let pieces: Vec<&[u8]> = cuts.windows(2).map(|w| &frame[w[0]..w[1]]).collect();
                write(c, &pieces);
            }
            StreamOp::Raw { conn, bytes } => {
                let Some(c) = self.open(*conn) else { return };
                write(c, &[bytes]);
            }
            StreamOp::Oversize { conn, extra } => {
                let Some(c) = self.open(*conn) else { return };
                let len = (MAX_FRAME as u32 + 1).saturating_add(*extra);
                write(c, &[&len.to_be_bytes()]);
            }
            StreamOp::HalfClose { conn } => {
                let Some(c) = self.open(*conn) else { return };
                let _ = c.sock.as_ref().expect("open").shutdown(Shutdown::Write);
                c.end = End::HalfClosed;
            }
            StreamOp::Reset { conn } => {
                let Some(c) = self.open(*conn) else { return };
                let sock = c.sock.take().expect("open");
                set_linger_zero(&sock);
                drop(sock);
                c.end = End::Reset;
            }
        }
    }

    /// Ends the case: every open client half-closes and every half-closed client reads its
    /// replies to the end. Then checks the model's properties, and panics naming the first
    /// that fails:
    /// * each connection that was not reset gets exactly the answers to its own complete
    ///   frames, in order, then the server's end of stream, never a reset: all of them when the
    ///   stream ended between frames or inside one, and all those before the header when it
    ///   carried an oversized one (the server flushes them, shuts down its side and drains the
    ///   client's input before it closes); nothing of another connection, ever;
    /// * every connection is closed by the server and its handle released, each counted once
    ///   in `handles_closed` and, as its handler closed it, in `handles_closed_by_handler`;
    /// * `frames_oversize` + `connections_reset` grew by exactly one per connection that
    ///   ended abnormally (oversized header, end of stream inside a frame, reset), and
    ///   `frames_oversize` by at least the ones with an oversized header that were not reset;
    /// * no handler panicked, no connection was refused, no accept failed, no connection timed
    ///   out.
    pub fn finish(&mut self) {
        let mut abnormal = 0u64;
        let mut oversize_at_least = 0u64;
        let mut oversize_at_most = 0u64;
        let mut connections = 0u64;
        for (i, c) in self.clients.iter_mut().enumerate() {
            let Some(c) = c else { continue };
            connections += 1;
            let parsed = parse(&c.wire);
            let expected: Vec<Vec<u8>> = parsed.frames.iter().map(|f| answer(f)).collect();
            if parsed.tail == Tail::Oversize {
                oversize_at_most += 1;
            }
            match (c.end, parsed.tail) {
                (End::Reset, _) | (_, Tail::Oversize | Tail::Partial) => abnormal += 1,
                _ => {}
            }
            if c.end == End::Reset {
                continue;
            }
            let sock = c.sock.as_mut().expect("not reset");
            if c.end == End::Open {
                let _ = sock.shutdown(Shutdown::Write);
                c.end = End::HalfClosed;
            }
            let (replies, reset) = read_replies(sock);
            if parsed.tail == Tail::Oversize {
                oversize_at_least += 1;
            }
            assert!(
                !reset,
                "connection {i}: reset by the server (wire {:?}, tail {:?}), replies {replies:?}",
                c.wire, parsed.tail
            );
            assert_eq!(
                replies, expected,
                "connection {i}: replies (wire {:?}, tail {:?})",
                c.wire, parsed.tail
            );
        }
        let (rt, idle) = (&self.rt, self.idle_handles);
        assert!(
            wait_until(|| lane_metrics(rt).handles == idle),
            "connections not closed by the server: {} handles, {idle} idle",
            lane_metrics(rt).handles
        );
        let before = &self.before;
        let grown = |m: &LaneMetrics| {
            (
                m.frames_oversize - before.frames_oversize,
                m.connections_reset - before.connections_reset,
            )
        };
        // A handle leaves the table before its removal is counted, and its handler's close
        // after that: wait for the counts (bounded), then compare them exactly.
        let closed = |m: &LaneMetrics| {
            (
                m.handles_closed - before.handles_closed,
                m.handles_closed_by_handler - before.handles_closed_by_handler,
            )
        };
        wait_until(|| {
            let m = lane_metrics(rt);
            let (o, r) = grown(&m);
            o + r >= abnormal && closed(&m) >= (connections, connections)
        });
        let now = lane_metrics(rt);
        let (oversize, reset) = grown(&now);
        assert_eq!(
            oversize + reset,
            abnormal,
            "frames_oversize +{oversize} and connections_reset +{reset} for {abnormal} \
             abnormal ends"
        );
        assert!(
            (oversize_at_least..=oversize_at_most).contains(&oversize),
            "frames_oversize +{oversize}, expected {oversize_at_least}..={oversize_at_most}"
        );
        assert_eq!(
            closed(&now),
            (connections, connections),
            "handles_closed and handles_closed_by_handler for {connections} connections"
        );
        let unchanged = |m: &LaneMetrics| {
            (
                m.handler_panics,
                m.connections_refused,
                m.accept_exhausted,
                m.stream_idle_timeouts,
                m.stream_write_timeouts,
            )
        };
        assert_eq!(
            unchanged(&now),
            unchanged(before),
            "handler_panics, connections_refused, accept_exhausted, stream_idle_timeouts, \
             stream_write_timeouts"
        );
        self.clients.iter_mut().for_each(|c| *c = None);
    }

    /// Stops the runtime.
    pub fn shutdown(mut self) {
        self.rt.shutdown().expect("shutdown");
    }
}

/// Reads a reply stream to its end: the frames, and whether it ended in a reset.
fn read_replies(sock: &mut TcpStream) -> (Vec<Vec<u8>>, bool) {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let reset = loop {
        match sock.read(&mut buf) {
            Ok(0) => break false,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break true,
            Err(e) => panic!("reading replies: {e} (the server neither answered nor closed)"),
        }
    };
    let mut frames = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= 4 {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        assert!(len <= MAX_FRAME, "a reply longer than max_frame: {len}");
        if bytes.len() - at < 4 + len {
            break;
        }
        frames.push(bytes[at + 4..at + 4 + len].to_vec());
        at += 4 + len;
    }
    assert!(
        reset || at == bytes.len(),
        "the reply stream ended inside a frame: {:?}",
        &bytes[at..]
    );
    (frames, reset)
}

/// Sets `SO_LINGER` to 0, so that closing the socket resets the connection.
fn set_linger_zero(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid fd and a `linger` of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER");
}

/// Slot bytes of the datagram lane: a longer datagram is truncated, dropped and counted.
pub const SLOT: usize = 512;

/// A runtime with one [`UdpEcho`] on loopback and its client.
pub struct Datagrams {
    rt: Runtime,
    client: UdpSocket,
    before: LaneMetrics,
}

impl Default for Datagrams {
    fn default() -> Datagrams {
        Datagrams::new()
    }
}

impl Datagrams {
    /// Starts the runtime: 2 threads of [`SLOT`]-byte datagram slots.
    pub fn new() -> Datagrams {
        let server = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let addr = server.local_addr().unwrap();
        let mut rt = runtime(2, SLOT);
        rt.lane("lane")
            .unwrap()
            .registry()
            .register(Box::new(UdpEcho::new(server, 0).unwrap()))
            .unwrap();
        rt.start().expect("start");
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.connect(addr).unwrap();
        client.set_read_timeout(Some(LIVENESS)).unwrap();
        let before = lane_metrics(&rt);
        Datagrams { rt, client, before }
    }

    /// Starts a case: drops any echo the last one (which may have failed half-way) left, and
    /// reads the counters again.
    pub fn begin(&mut self) {
        let mut buf = vec![0u8; 65536];
        self.client.set_nonblocking(true).unwrap();
        while self.client.recv(&mut buf).is_ok() {}
        self.client.set_nonblocking(false).unwrap();
        self.before = lane_metrics(&self.rt);
    }

    /// Sends each `(tos, payload)` in turn and checks the answer: a datagram that fits a slot
    /// is echoed verbatim (whatever its TOS, empty ones too), a longer one is not answered and
    /// counted in `datagrams_truncated`, one the kernel refuses to send (above 65507 bytes)
    /// reaches nobody. Every counter adds up: `datagrams_truncated` grows by exactly the
    /// longer ones, no handler panics.
    pub fn exchange(&mut self, grams: &[(u8, Vec<u8>)]) {
        let mut buf = vec![0u8; 65536];
        let mut truncated = 0;
        for (i, (tos, payload)) in grams.iter().enumerate() {
            lfrt::os::set_tos(&self.client, *tos).expect("IP_TOS");
            match self.client.send(payload) {
                Ok(n) => assert_eq!(n, payload.len()),
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                    assert!(
                        payload.len() > 65507,
                        "EMSGSIZE for {} bytes",
                        payload.len()
                    );
                    continue;
                }
                Err(e) => panic!("send: {e}"),
            }
            if payload.len() <= SLOT {
                let n = self.client.recv(&mut buf).unwrap_or_else(|e| {
                    panic!(
                        "datagram {i} ({} bytes, tos {tos}) not echoed: {e}",
                        payload.len()
                    )
                });
                assert_eq!(&buf[..n], &payload[..], "datagram {i}: echo");
            } else {
                truncated += 1;
                let (rt, before) = (&self.rt, self.before.datagrams_truncated);
                assert!(
                    wait_until(|| lane_metrics(rt).datagrams_truncated >= before + truncated),
                    "datagram {i} ({} bytes) neither echoed nor counted",
                    payload.len()
                );
            }
        }
        let now = lane_metrics(&self.rt);
        assert_eq!(
            now.datagrams_truncated - self.before.datagrams_truncated,
            truncated
        );
        assert_eq!(now.handler_panics, self.before.handler_panics);
        // Nothing else was answered: no stray echo waits.
        self.client.set_nonblocking(true).unwrap();
        assert!(
            self.client.recv(&mut buf).is_err(),
            "an echo of a datagram that was not to be answered"
        );
        self.client.set_nonblocking(false).unwrap();
    }

    /// Stops the runtime.
    pub fn shutdown(mut self) {
        self.rt.shutdown().expect("shutdown");
    }
}

/// The reference model of the band classifier: the band of a datagram with this TOS and
/// payload.
pub fn band_of(plan: &Bands, tos: u8, payload: &[u8]) -> usize {
    let mark = match plan.classify {
        Classify::Dscp => Some(tos >> 2),
        Classify::PayloadByte(offset) => payload.get(usize::from(offset)).copied(),
    };
    mark.and_then(|m| plan.map.iter().find(|(v, _)| *v == m).map(|&(_, b)| b))
        .unwrap_or(plan.default)
}

/// Binds `plan` on 127.0.0.1 (a fresh port), sends each `(tos, payload)` (payloads cut to
/// 2048 bytes) and checks that each lands in exactly the band the model says, whole. Plans
/// [`band::bind`] refuses are checked to be the invalid ones and return `false`.
pub fn bands(plan: &Bands, grams: &[(u8, Vec<u8>)]) -> bool {
    let valid = plan.count > 0
        && plan.default < plan.count
        && plan.map.len() <= 255
        && plan
            .map
            .iter()
            .all(|&(v, b)| b < plan.count && (plan.classify != Classify::Dscp || v <= 63));
    let sockets = match band::bind("127.0.0.1:0".parse().unwrap(), plan) {
        Ok(s) => s,
        Err(e) => {
            assert!(!valid, "a valid plan refused: {e}: {plan:?}");
            return false;
        }
    };
    assert!(valid, "an invalid plan bound: {plan:?}");
    assert_eq!(sockets.len(), plan.count);
    // A value listed twice: the program's first jump that matches decides, as the model's
    // `find`.
    let addr = sockets[0].local_addr().unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut buf = vec![0u8; 4096];
    for (i, (tos, payload)) in grams.iter().enumerate() {
        let payload = &payload[..payload.len().min(2048)];
        lfrt::os::set_tos(&client, *tos).expect("IP_TOS");
        client.send_to(payload, addr).expect("send");
        let want = band_of(plan, *tos, payload);
        let end = Instant::now() + LIVENESS;
        let got = loop {
            let hit = sockets
                .iter()
                .enumerate()
                .find_map(|(b, s)| s.recv(&mut buf).ok().map(|n| (b, buf[..n].to_vec())));
            if let Some(hit) = hit {
                break hit;
            }
            assert!(Instant::now() < end, "datagram {i} reached no band");
            std::thread::sleep(Duration::from_micros(200));
        };
        assert_eq!(
            got,
            (want, payload.to_vec()),
            "datagram {i} (tos {tos}, {} bytes) in band {} instead of {want}: {plan:?}",
            payload.len(),
            got.0
        );
    }
    true
}
