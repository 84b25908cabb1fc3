//! The pattern paper's OLTP example, on loopback, in one process:
//!
//! ```text
//!  clients ──TCP──► front-end (bound lane: N threads) ══ ONE multiplexed TCP connection ══► back-end (lfrt lane)
//!  (built-in load)   thread takes a client request,                                         unbound Leader/Followers:
//!                    forwards it, waits for ITS reply                                       any thread answers any frame
//!                    (follower or leader: hand-off),
//!                    answers the client
//! ```
//!
//! * **Back-end**: an unbound lfrt [`Runtime`] lane with a TCP listener. Each connection's
//!   handler reads every complete request frame it has, optionally reorders them (`--reorder`
//!   reverse|random: replies then come back in a different order than the requests went out,
//!   as they do in real multi-tier systems), does `--work-us` of busy work per request and
//!   answers with the same request id.
//! * **Front-end**: a **bound lane** of the same [`Runtime`] ([`LaneConfig::bound`]): the
//!   runtime connects it to the back-end (ONE TCP connection), spawns its threads at SCHED_FIFO
//!   `--front-priority` like any lane's, and they `serve` its [`BoundPool`]
//!   ([`Lane::bound_pool`]). Client connections are unbound handles of the pool (hybrid
//!   associations), registered on the lane's registry. A handler forwards each client request
//!   with its own [`Waiter`] and blocks in `join` (as a follower, or as the leader reading the
//!   connection and handing replies to the other waiters), then answers the client.
//! * **Clients**: `--clients` threads, each with its own TCP connection, closed loop: send one
//!   request, wait for the reply, check it, measure the round trip.
//!
//! Everything stops by itself: after `--requests` per client, or after `--max-seconds`. The last
//! line is `replies: <ok> ok, <mismatched> mismatched, <lost> lost`.
//!
//! ```text
//! cargo run --release --example oltp -- --clients 16 --frontend-threads 4 --requests 5000 --reorder reverse
//! ```
//!
//! The front-end's threads run SCHED_FIFO `--front-priority` (10) when the process may
//! (`rt = "best-effort"`: otherwise time-shared, and the run says so); the back-end and the
//! clients run SCHED_OTHER. The front-end's threads block in epoll, futexes or PI locks and
//! every call has a deadline, so the FIFO threads never spin.

use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use lfrt::bound::{decode_header, encode_header, BoundPool, Promotion, Waiter, HEADER_LEN};
use lfrt::{
    BoundLane, Context, Disposition, Event, EventHandler, Interest, LaneConfig, Policy, Runtime,
    RuntimeConfig,
};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A client request and its reply: client id (u32), sequence (u32), value (u64).
const MSG: usize = 16;
/// How long a front-end thread waits for one back-end reply, and a client for one answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Parser, Debug)]
#[command(
    about = "OLTP front-end/back-end over one multiplexed connection (bound Leader/Followers)"
)]
struct Args {
    /// Client connections (closed loop, one request in flight each).
    #[arg(short = 'c', long, default_value_t = 16)]
    clients: usize,
    /// Requests per client.
    #[arg(short = 'n', long, default_value_t = 5000)]
    requests: u32,
    /// Front-end threads serving the bound pool.
    #[arg(short = 't', long, default_value_t = 4)]
    frontend_threads: usize,
    /// SCHED_FIFO priority of the front-end's threads (1..=99).
    #[arg(long, default_value_t = 10)]
    front_priority: u8,
    /// Back-end (unbound lfrt lane) threads.
    #[arg(short = 'b', long, default_value_t = 2)]
    backend_threads: usize,
    /// Busy work per request in the back-end (µs).
    #[arg(short = 'w', long, default_value_t = 0)]
    work_us: u64,
    /// Order in which the back-end answers the requests it has read at once.
    #[arg(short = 'r', long, value_enum, default_value_t = Reorder::Reverse)]
    reorder: Reorder,
    /// Which waiting front-end thread leads next.
    #[arg(short = 'p', long, value_enum, default_value_t = Promo::Fifo)]
    promotion: Promo,
    /// Hard limit on the run (s): clients stop sending after it.
    #[arg(long, default_value_t = 60)]
    max_seconds: u64,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Reorder {
    /// Answer in request order.
    None,
    /// Answer each batch in reverse order.
    Reverse,
    /// Answer each batch in a pseudo-random order.
    Random,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Promo {
    Fifo,
    Lifo,
    Priority,
}

/// The back-end's "transaction": a pure function of the request, so clients can check it.
fn transact(value: u64) -> u64 {
    value.rotate_left(17) ^ 0xa5a5_5a5a_0f0f_f0f0
}

// ---------------------------------------------------------------------------------------------
// Back-end: an unbound lfrt lane.

/// Accepts front-end connections into the lane.
struct BackendListener {
    listener: TcpListener,
    reorder: Reorder,
    work_us: u64,
    accepted: Arc<AtomicU64>,
}

impl EventHandler for BackendListener {
    fn source(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }
    fn handle(&mut self, _ev: &Event, ctx: &mut Context) -> Disposition {
        while let Ok((stream, _)) = self.listener.accept() {
            self.accepted.fetch_add(1, Relaxed);
            if let Ok(conn) = BackendConn::new(stream, self.reorder, self.work_us) {
                let _ = ctx.registry().register(Box::new(conn));
            }
        }
        Disposition::Rearm
    }
}

/// One multiplexed connection from a front-end: reads request frames, answers each.
struct BackendConn {
    stream: TcpStream,
    inbuf: Box<[u8]>,
    in_len: usize,
    out: Vec<u8>,
    sent: usize,
    batch: Vec<(u64, usize)>,
    reorder: Reorder,
    work_us: u64,
    rng: u64,
}

/// Bytes buffered per back-end connection, each way (allocated at accept).
const BACKEND_BUF: usize = 256 * 1024;

impl BackendConn {
    fn new(stream: TcpStream, reorder: Reorder, work_us: u64) -> io::Result<BackendConn> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(BackendConn {
            stream,
            inbuf: vec![0; BACKEND_BUF].into_boxed_slice(),
            in_len: 0,
            out: Vec::with_capacity(BACKEND_BUF),
            sent: 0,
            batch: Vec::with_capacity(BACKEND_BUF / HEADER_LEN),
            reorder,
            work_us,
            rng: 0x9e37_79b9_7f4a_7c15,
        })
    }

    /// Writes pending replies; true when all are out.
    fn flush(&mut self) -> io::Result<bool> {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        self.sent = 0;
        Ok(true)
    }

    /// Answers every complete frame in the input buffer, in the configured order.
    fn answer(&mut self) {
        let mut at = 0;
        while self.in_len - at >= HEADER_LEN {
            let (id, len) = decode_header(self.inbuf[at..at + HEADER_LEN].try_into().unwrap());
            let end = at + HEADER_LEN + len as usize;
            if end > self.in_len {
                break;
            }
            self.batch.push((id, at + HEADER_LEN));
            at = end;
        }
        match self.reorder {
            Reorder::None => {}
            Reorder::Reverse => self.batch.reverse(),
            Reorder::Random => {
                for i in (1..self.batch.len()).rev() {
                    self.rng ^= self.rng << 13;
                    self.rng ^= self.rng >> 7;
                    self.rng ^= self.rng << 17;
                    self.batch.swap(i, (self.rng % (i as u64 + 1)) as usize);
                }
            }
        }
        for &(id, body) in &self.batch {
            lfrt::handlers::cpu_work(self.work_us * 1000);
            let req = &self.inbuf[body..body + MSG];
            let value = u64::from_le_bytes(req[8..16].try_into().unwrap());
            self.out.extend_from_slice(&encode_header(id, MSG as u32));
            self.out.extend_from_slice(&req[..8]);
            self.out.extend_from_slice(&transact(value).to_le_bytes());
        }
        self.batch.clear();
        self.inbuf.copy_within(at..self.in_len, 0);
        self.in_len -= at;
    }
}

impl EventHandler for BackendConn {
    fn source(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
    fn interest(&self) -> Interest {
        if self.out.is_empty() {
            Interest::READABLE
        } else {
            Interest::WRITABLE
        }
    }
    fn handle(&mut self, _ev: &Event, _ctx: &mut Context) -> Disposition {
        match self.flush() {
            Ok(true) => {}
            Ok(false) => return Disposition::Rearm,
            Err(_) => return Disposition::Close,
        }
        loop {
            if self.in_len == self.inbuf.len() {
                break; // full: answer what we have first
            }
            match self.stream.read(&mut self.inbuf[self.in_len..]) {
                Ok(0) => return Disposition::Close,
                Ok(n) => self.in_len += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Disposition::Close,
            }
        }
        self.answer();
        match self.flush() {
            Ok(_) => Disposition::Rearm,
            Err(_) => Disposition::Close,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Front-end: a bound pool; client connections are its unbound handles.

/// Accepts client connections into the front-end pool, each with its own waiter.
struct FrontListener {
    listener: TcpListener,
    pool: BoundPool,
}

impl EventHandler for FrontListener {
    fn source(&self) -> BorrowedFd<'_> {
        self.listener.as_fd()
    }
    fn handle(&mut self, _ev: &Event, ctx: &mut Context) -> Disposition {
        while let Ok((stream, _)) = self.listener.accept() {
            let Ok(waiter) = self.pool.waiter() else {
                continue; // no slot: the connection is dropped (its client sees EOF)
            };
            if stream.set_nonblocking(true).is_err() || stream.set_nodelay(true).is_err() {
                continue;
            }
            let conn = FrontConn {
                stream,
                pool: self.pool.clone(),
                waiter,
                buf: [0; MSG * 4],
                len: 0,
            };
            let _ = ctx.registry().register(Box::new(conn));
        }
        Disposition::Rearm
    }
}

/// One client's connection: forwards each request to the back-end and relays the reply.
struct FrontConn {
    stream: TcpStream,
    pool: BoundPool,
    waiter: Waiter,
    buf: [u8; MSG * 4],
    len: usize,
}

impl FrontConn {
    fn reply(&mut self, msg: &[u8]) -> bool {
        // One small reply per request in flight: it fits the socket buffer; a full buffer
        // means the client is gone.
        matches!(self.stream.write(msg), Ok(n) if n == msg.len())
    }
}

impl EventHandler for FrontConn {
    fn source(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
    fn handle(&mut self, _ev: &Event, _ctx: &mut Context) -> Disposition {
        loop {
            match self.stream.read(&mut self.buf[self.len..]) {
                Ok(0) => return Disposition::Close,
                Ok(n) => self.len += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Disposition::Rearm,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Disposition::Close,
            }
            let mut at = 0;
            while self.len - at >= MSG {
                let mut req = [0u8; MSG];
                req.copy_from_slice(&self.buf[at..at + MSG]);
                at += MSG;
                // The bound call: register, send on the shared connection, join the pool.
                let answer = match self.pool.call(
                    &mut self.waiter,
                    &req,
                    Some(Instant::now() + CALL_TIMEOUT),
                ) {
                    Ok(reply) if reply.len() == MSG => {
                        let mut a = [0u8; MSG];
                        a.copy_from_slice(&reply);
                        a
                    }
                    // Failure or malformed reply: tell the client (it counts the request lost).
                    _ => [0xff; MSG],
                };
                if !self.reply(&answer) {
                    return Disposition::Close;
                }
            }
            self.buf.copy_within(at..self.len, 0);
            self.len -= at;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Clients: the built-in load.

#[derive(Default)]
struct ClientResult {
    ok: u64,
    mismatched: u64,
    lost: u64,
    unsent: u64,
}

fn client(
    id: u32,
    addr: std::net::SocketAddr,
    requests: u32,
    stop_at: Instant,
    hist: &mut Histogram<u64>,
) -> ClientResult {
    let mut r = ClientResult::default();
    let Ok(mut s) = TcpStream::connect(addr) else {
        r.unsent = u64::from(requests);
        return r;
    };
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(CALL_TIMEOUT * 2));
    let mut rng = 0x2545_f491_4f6c_dd1du64 ^ u64::from(id);
    for seq in 0..requests {
        if Instant::now() >= stop_at {
            r.unsent += u64::from(requests - seq);
            break;
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let mut req = [0u8; MSG];
        req[..4].copy_from_slice(&id.to_le_bytes());
        req[4..8].copy_from_slice(&seq.to_le_bytes());
        req[8..].copy_from_slice(&rng.to_le_bytes());
        let t0 = Instant::now();
        let mut rep = [0u8; MSG];
        if s.write_all(&req).is_err() || s.read_exact(&mut rep).is_err() {
            // The connection is gone: this and every later request are lost.
            r.lost += u64::from(requests - seq);
            break;
        }
        hist.saturating_record(t0.elapsed().as_nanos() as u64);
        if rep == [0xff; MSG] {
            r.lost += 1;
        } else if rep[..8] == req[..8] && rep[8..] == transact(rng).to_le_bytes() {
            r.ok += 1;
        } else {
            r.mismatched += 1;
        }
    }
    r
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.clients == 0 || args.frontend_threads == 0 || args.backend_threads == 0 {
        return Err(
            "--clients, --frontend-threads and --backend-threads must be at least 1".into(),
        );
    }

    // Back-end: an unbound lane; its listener exists before the front-end connects to it.
    let backend = TcpListener::bind("127.0.0.1:0")?;
    backend.set_nonblocking(true)?;
    let backend_addr = backend.local_addr()?;
    let mut back = LaneConfig::new("backend", Policy::Other, 0);
    back.threads = args.backend_threads;
    back.max_handles = 16;

    // Front-end: a bound lane over ONE connection to the back-end; client connections are
    // its unbound handles, each with a waiter of its own.
    let mut front = LaneConfig::new("front", Policy::Fifo, args.front_priority);
    front.threads = args.frontend_threads;
    front.promotion = match args.promotion {
        Promo::Fifo => Promotion::Fifo,
        Promo::Lifo => Promotion::Lifo,
        Promo::Priority => Promotion::Priority,
    };
    front.max_handles = args.clients + 1;
    front.buffer_bytes = 256;
    front.bound = Some(BoundLane {
        max_waiters: args.frontend_threads + args.clients + 1,
        max_body: 256,
        ..BoundLane::new(backend_addr)
    });

    let mut rt = Runtime::new(RuntimeConfig {
        lanes: vec![back, front],
        ..RuntimeConfig::default()
    })?;
    let accepted = Arc::new(AtomicU64::new(0));
    rt.lane("backend")?
        .registry()
        .register(Box::new(BackendListener {
            listener: backend,
            reorder: args.reorder,
            work_us: args.work_us,
            accepted: accepted.clone(),
        }))?;
    let pool = rt
        .lane("front")?
        .bound_pool()
        .expect("`front` is a bound lane");
    let front = TcpListener::bind("127.0.0.1:0")?;
    front.set_nonblocking(true)?;
    let front_addr = front.local_addr()?;
    rt.lane("front")
        .unwrap()
        .registry()
        .register(Box::new(FrontListener {
            listener: front,
            pool: pool.clone(),
        }))?;
    let report = rt.start()?;
    let front_sched = rt.metrics()[1].kernel_sched.clone();
    drop(pool);

    println!(
        "# back-end: lfrt lane, {} threads, reorder {:?}, work {} us, on {backend_addr}",
        args.backend_threads, args.reorder, args.work_us
    );
    println!(
        "# front-end: bound lane, {} threads ({}{}), promotion {:?}, one connection to the back-end; {} clients x {} requests",
        args.frontend_threads,
        front_sched.join(", "),
        if report.rt_applied { "" } else { "; SCHED_FIFO refused: time-shared" },
        args.promotion,
        args.clients,
        args.requests
    );

    // Clients.
    let started = Instant::now();
    let stop_at = started + Duration::from_secs(args.max_seconds);
    let clients: Vec<_> = (0..args.clients as u32)
        .map(|id| {
            let requests = args.requests;
            std::thread::spawn(move || {
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
                    .expect("histogram bounds");
                let r = client(id, front_addr, requests, stop_at, &mut h);
                (r, h)
            })
        })
        .collect();
    let mut total = ClientResult::default();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    for c in clients {
        let (r, h) = c.join().map_err(|_| "client thread panicked")?;
        total.ok += r.ok;
        total.mismatched += r.mismatched;
        total.lost += r.lost;
        total.unsent += r.unsent;
        hist.add(&h)?;
    }
    let elapsed = started.elapsed();

    // Stops both lanes: the front-end's threads leave the pool, its handlers are closed.
    let metrics = rt.shutdown()?;
    let stats = metrics[1].bound.expect("`front` is a bound lane");
    let backend_dispatched = metrics[0].dispatched;

    let done = total.ok + total.mismatched;
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "requests answered: {done} in {:.3} s = {:.0} req/s",
        elapsed.as_secs_f64(),
        done as f64 / elapsed.as_secs_f64()
    );
    println!(
        "round trip (client-observed, client -> front-end -> back-end -> client): p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us, max {:.1} us",
        us(0.5),
        us(0.99),
        us(0.999),
        hist.max() as f64 / 1000.0
    );
    println!(
        "bound pool: replies {} (handed off {}, read by their own waiter {}), promotions {}, vacant {}, inline {}, deferred {}, unknown {}, late {}, timeouts {}",
        stats.replies, stats.handoffs, stats.own, stats.promotions, stats.vacant, stats.inline, stats.deferred, stats.unknown, stats.late, stats.timeouts
    );
    println!(
        "back-end: connections accepted {}, events dispatched {}",
        accepted.load(Relaxed),
        backend_dispatched
    );
    if total.unsent > 0 {
        println!("unsent (stopped by --max-seconds): {}", total.unsent);
    }
    println!(
        "replies: {} ok, {} mismatched, {} lost",
        total.ok, total.mismatched, total.lost
    );
    Ok(())
}
