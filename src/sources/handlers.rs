//! Built-in handlers, so that a configuration file alone runs a service.
//!
//! # Failure behaviour
//! Each built-in handler does a bounded amount of work per event (at most one
//! [`DATAGRAM_BATCH`] of datagrams or of stream reads), never retries a failing call in a loop,
//! and counts every piece of work it drops or defers in its lane's metrics
//! ([`Context::count`]). It also logs each condition, from the pool thread, under one rule:
//! the first occurrence is logged, and after that at most one line per [`LOG_INTERVAL_NS`] per
//! handler and condition, naming the running total; the counter is exact, the log is a sample.
//! So a burst, however long, costs at most one formatted line a second on a pool thread.
//!
//! The TCP listeners' accept side, connection table and flush loop, which
//! [`stream::Framed`](crate::stream::Framed) shares, are infrastructure of their own
//! (`sources/accept.rs`); this module holds the handlers.

use crate::engine::handler::DATAGRAM_BATCH;
use crate::engine::handler::{Context, Disposition, Event, EventHandler, Interest};
use crate::observe::metrics::Incident;
use crate::sources::accept::{write_out, Acceptor, ConnectionTable, LogLimit, Reusable};
use crate::sources::source::Timer;
use crate::sys;
use std::fmt;
use std::io::{self, Read};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

pub use crate::sources::accept::{ACCEPT_RETRY_NS, LOG_INTERVAL_NS};

/// Burns `ns` nanoseconds of the calling thread's **CPU time**: the built-in echoes' `work_us`
/// (the `lfrt` command's key, [`Runtime::with_echo_work`](crate::Runtime::with_echo_work)), a
/// bounded stand-in for handler cost that harnesses reuse so every architecture they compare
/// burns the same work. CPU time, not wall time, so a handler preempted mid-work still costs the
/// same CPU as one that is not. Bounded: it also returns after `ns` plus one second of
/// wall-clock time, whatever happens.
///
/// # Examples
/// ```
/// let t0 = lfrt::os::thread_cpu_ns();
/// lfrt::handlers::cpu_work(200_000); // 200 µs of this thread's CPU
/// println!("burnt {} ns", lfrt::os::thread_cpu_ns() - t0);
/// ```
///
/// A measurement tool's hook, not a service's API: only with the `tools` feature.
#[cfg(feature = "tools")]
pub fn cpu_work(ns: u64) {
    burn_cpu(ns);
}

/// `cpu_work`'s body, which the built-in handlers' `work_us` uses with or without the
/// `tools` feature.
pub(crate) fn burn_cpu(ns: u64) {
    if ns == 0 {
        return;
    }
    let start = sys::mem::thread_cpu_ns();
    let give_up = sys::now_ns() + ns + 1_000_000_000;
    while sys::mem::thread_cpu_ns().wrapping_sub(start) < ns && sys::now_ns() < give_up {
        std::hint::spin_loop();
    }
}

/// `work_us` of the built-in echoes. It stays in the library, unlike `cpu_work`: it is a
/// parameter of the echoes' public constructors, and putting it behind a feature would make
/// those signatures depend on the build. It is not a key of the configuration file: the `lfrt`
/// command reads it from its own configuration (`[[lane.handler]]`, `[[band]]`), bounds it (at
/// most 100 ms an event) and hands it to `Runtime::with_echo_work`, so that a file stands for a
/// service whose handlers cost something (what `lfrt run`, the benchmarks and the inversion
/// experiments measure). It costs one comparison at 0.
fn busy_work(us: u64) {
    burn_cpu(us.saturating_mul(1000));
}

/// Echoes each datagram verbatim to its sender, after `work_us` of busy work.
///
/// A datagram longer than a slot (`buffer_bytes`) arrives truncated: it is dropped, counted in
/// `datagrams_truncated` and logged (see the [module docs](self) for the rule).
///
/// # Examples
/// ```no_run
/// # fn f(lane: lfrt::Lane) -> Result<(), Box<dyn std::error::Error>> {
/// use lfrt::handlers::UdpEcho;
/// let socket = std::net::UdpSocket::bind("127.0.0.1:7000")?;
/// lane.registry().register(Box::new(UdpEcho::new(socket, 0)?))?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct UdpEcho {
    socket: UdpSocket,
    work_us: u64,
    truncated_log: LogLimit,
}

impl UdpEcho {
    /// Wraps a bound socket (made nonblocking here).
    pub fn new(socket: UdpSocket, work_us: u64) -> io::Result<UdpEcho> {
        socket.set_nonblocking(true)?;
        // The runtime reports each dispatch's kernel-receive-to-handler latency from these.
        crate::DatagramBatch::stamp_arrivals(socket.as_fd())?;
        Ok(UdpEcho {
            socket,
            work_us,
            truncated_log: LogLimit::default(),
        })
    }
}

impl EventHandler for UdpEcho {
    fn source(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// Takes the datagrams queued *now* (at most [`DATAGRAM_BATCH`]) in one `recvmmsg`, works
    /// on each, and echoes them in one `sendmmsg`. Datagrams that arrive meanwhile wait for the
    /// re-armed handle, so one busy socket cannot hold a thread for longer than one batch.
    ///
    /// [`DATAGRAM_BATCH`]: crate::DATAGRAM_BATCH
    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        let batch = ctx.datagrams();
        loop {
            match batch.recv(self.socket.as_fd()) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // WouldBlock (another event drained it), or an ICMP error surfaced on the
                // socket: nothing to echo now, keep serving.
                Err(_) => return Disposition::Rearm,
            }
        }
        // Echo verbatim every datagram that arrived whole; one longer than a slot (truncated)
        // is not answered, only counted below.
        for i in 0..batch.len() {
            busy_work(self.work_us);
            let mut d = batch.get(i);
            if !d.is_truncated() {
                d.answer();
            }
        }
        let truncated = batch.truncated() as u64;
        // A full send buffer drops an echo, as UDP may; the client counts it lost.
        batch.reply(self.socket.as_fd());
        if truncated > 0 {
            let total = ctx.count(Incident::DatagramTruncated, truncated);
            if self.truncated_log.allow() {
                tracing::warn!(
                    lane = ctx.lane(),
                    socket = ?self.socket.local_addr().ok(),
                    slot_bytes = ctx.datagrams().slot_bytes(),
                    datagrams_truncated = total,
                    "UDP echo dropped datagrams longer than a slot (raise buffer_bytes to take \
                     them); counted in datagrams_truncated, logged at most once a second"
                );
            }
        }
        Disposition::Rearm
    }
}

/// Accepts TCP connections and serves each with a [`TcpEchoStream`] in the same lane.
///
/// The connections come from a table preallocated by [`TcpEcho::new`]: `max_connections`
/// echo streams, each with its pending buffer of `buffer_bytes` (pre-faulted). A connection
/// takes one for its life, registered in the lane as it is, and gives it back when its handle
/// is removed: accepting allocates nothing.
///
/// # Failure behaviour
/// * **Out of file descriptors or memory.** When `accept` fails with `EMFILE`, `ENFILE`,
///   `ENOBUFS` or `ENOMEM`, the listener pauses for [`ACCEPT_RETRY_NS`] and then tries again,
///   as often as needed. Meanwhile pending connections wait in the kernel's listen backlog
///   (lfrt drops none); beyond the backlog the kernel stops answering new handshakes and
///   clients retry. An episode lasts until the listener has drained its backlog again; each
///   counts once in `accept_exhausted`, its start is logged (and its end, if its start was).
/// * **Connection or handle table full.** A connection beyond `max_connections`, or one that
///   cannot be registered (the lane already has `max_handles` handles, or epoll refuses the
///   fd), is closed at once, counted in `connections_refused` and logged.
///
/// Both logs follow the [module](self)'s rule. The same accept side (pause, retry, refusal)
/// serves [`stream::Framed`](crate::sources::stream::Framed).
///
/// # Implementation notes
/// Without the pause, a listener whose backlog holds a connection it cannot accept is
/// readable again as soon as it is re-armed: it would be dispatched over and over (about
/// 650,000 times a second was measured), and at `SCHED_FIFO` that loop owns a CPU.
///
/// The pause needs the listener out of the lane's epoll set for a while, and a timer to put
/// it back. The lane waits on a private epoll set (the *gate*, this handler's source) that
/// holds the listener and a one-shot retry timer; pausing masks the listener in the gate and
/// arms the timer, so the gate — and the handle — is ready only when the timer fires. The
/// handle never leaves the lane (no re-registration, which could fail on a full table), and
/// the two extra descriptors are opened at construction, not when descriptors have run out.
///
/// The other known remedy, a reserve descriptor closed to accept and immediately drop the
/// waiting connection, was not chosen: it only helps `EMFILE` (a spare fd frees neither
/// system-wide files for long nor memory, so `ENFILE`, `ENOBUFS` and `ENOMEM` would still
/// spin), and it resets connections that the pause lets wait to be served.
///
/// # Examples
/// ```no_run
/// # fn f(lane: lfrt::Lane) -> Result<(), Box<dyn std::error::Error>> {
/// use lfrt::handlers::TcpEcho;
/// let listener = std::net::TcpListener::bind("127.0.0.1:7001")?;
/// // Up to 64 connections at once, each keeping up to 64 KiB of echo its peer has not taken.
/// lane.registry().register(Box::new(TcpEcho::new(listener, 0, 64, 64 * 1024)?))?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TcpEcho {
    acceptor: Acceptor,
    table: Arc<ConnectionTable<TcpEchoStream>>,
}

impl TcpEcho {
    /// Wraps a bound listener (made nonblocking here) and preallocates and pre-faults its
    /// connection table: `max_connections` streams of `buffer_bytes` each
    /// ([`table_bytes`](Self::table_bytes)), each echoing after `work_us` of busy work per
    /// read. Opens two more descriptors, an epoll set and a timer (see the type's
    /// implementation notes).
    ///
    /// # Errors
    /// `InvalidInput` if `max_connections` or `buffer_bytes` is 0; the errors of opening the
    /// accept side.
    pub fn new(
        listener: TcpListener,
        work_us: u64,
        max_connections: usize,
        buffer_bytes: usize,
    ) -> io::Result<TcpEcho> {
        if max_connections == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "TcpEcho needs a max_connections of at least 1",
            ));
        }
        let table = ConnectionTable::new(max_connections, || {
            let mut stream = TcpEchoStream::idle(work_us, buffer_bytes)?;
            sys::mem::prefault(&mut stream.pending);
            Ok(stream)
        })?;
        Ok(TcpEcho {
            acceptor: Acceptor::new(listener)?,
            table,
        })
    }

    /// Bytes [`new`](Self::new) allocates for its connection table: `max_connections ×
    /// buffer_bytes`.
    pub fn table_bytes(max_connections: usize, buffer_bytes: usize) -> u64 {
        (max_connections as u64).saturating_mul(buffer_bytes as u64)
    }
}

impl EventHandler for TcpEcho {
    fn source(&self) -> BorrowedFd<'_> {
        self.acceptor.source()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        let TcpEcho { acceptor, table } = self;
        acceptor.accept(ctx, |stream, ctx| {
            table.admit(ctx, |echo| echo.open(stream))
        })
    }
}

/// Echoes the bytes of one TCP connection; closes the handle when the peer closes.
///
/// One event reads at most [`DATAGRAM_BATCH`] times (each up to the thread's buffer), then
/// re-arms: a connection that keeps sending is served in turns with the lane's other
/// handles, as a busy UDP socket is, instead of holding a thread until it pauses.
///
/// Unsent bytes (the peer is not reading) are kept in a buffer of `buffer_bytes`, allocated
/// with the stream, and the handle waits for writability until they are flushed: no
/// allocation per message. [`TcpEcho`] preallocates its streams, so accepting allocates
/// nothing either.
///
/// # Examples
/// ```no_run
/// # fn f(lane: lfrt::Lane) -> Result<(), Box<dyn std::error::Error>> {
/// use lfrt::handlers::TcpEchoStream;
/// let listener = std::net::TcpListener::bind("127.0.0.1:7002")?;
/// let (stream, _) = listener.accept()?;
/// lane.registry()
///     .register(Box::new(TcpEchoStream::new(stream, 0, 64 * 1024)?))?;
/// # Ok(()) }
/// ```
pub struct TcpEchoStream {
    /// `None` only while it waits in a [`TcpEcho`]'s connection table.
    stream: Option<TcpStream>,
    work_us: u64,
    /// The echo the peer has not taken yet: `pending[sent..len]`.
    pending: Box<[u8]>,
    len: usize,
    sent: usize,
}

impl TcpEchoStream {
    /// Wraps an accepted stream (made nonblocking, Nagle off). `buffer_bytes` bounds both the
    /// bytes kept when the peer does not take the echo and each read (whatever the thread's
    /// buffer), so nothing read is ever dropped.
    ///
    /// # Errors
    /// `InvalidInput` if `buffer_bytes` is 0; the socket's errors.
    pub fn new(stream: TcpStream, work_us: u64, buffer_bytes: usize) -> io::Result<TcpEchoStream> {
        let mut echo = TcpEchoStream::idle(work_us, buffer_bytes)?;
        echo.open(stream)?;
        Ok(echo)
    }

    /// A stream with its buffer and no connection (an entry of [`TcpEcho`]'s table).
    fn idle(work_us: u64, buffer_bytes: usize) -> io::Result<TcpEchoStream> {
        if buffer_bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "TcpEchoStream needs a buffer_bytes of at least 1",
            ));
        }
        Ok(TcpEchoStream {
            stream: None,
            work_us,
            pending: vec![0u8; buffer_bytes].into_boxed_slice(),
            len: 0,
            sent: 0,
        })
    }

    /// Takes on an accepted connection (the stream is idle).
    fn open(&mut self, stream: TcpStream) -> io::Result<()> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        self.stream = Some(stream);
        Ok(())
    }

    /// Writes pending bytes; true when all are out.
    fn flush(&mut self) -> io::Result<bool> {
        let Some(stream) = &self.stream else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        if !write_out(stream, &self.pending[..self.len], &mut self.sent)? {
            return Ok(false);
        }
        self.len = 0;
        self.sent = 0;
        Ok(true)
    }
}

impl fmt::Debug for TcpEchoStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpEchoStream")
            .field(
                "peer",
                &self.stream.as_ref().and_then(|s| s.peer_addr().ok()),
            )
            .field("work_us", &self.work_us)
            .field("buffer_bytes", &self.pending.len())
            .field("pending", &(self.len - self.sent))
            .finish()
    }
}

impl EventHandler for TcpEchoStream {
    fn source(&self) -> BorrowedFd<'_> {
        match &self.stream {
            Some(s) => s.as_fd(),
            // A stream without a connection waits in its table, unregistered: `source` is
            // asked only by a registration, and `ConnectionTable::admit` opens it first.
            None => unreachable!("an idle TcpEchoStream is never registered"),
        }
    }

    fn interest(&self) -> Interest {
        if self.len == 0 {
            Interest::READABLE
        } else {
            Interest::WRITABLE
        }
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        match self.flush() {
            Ok(true) => {}
            Ok(false) => return Disposition::Rearm,
            Err(_) => return Disposition::Close,
        }
        let Some(mut stream) = self.stream.as_ref() else {
            return Disposition::Close;
        };
        // Each read is bounded by what the connection can keep if the peer stops taking the
        // echo: `pending` is empty here (flushed above), so whatever a write leaves unsent
        // fits in it. The thread's buffer may be larger (a thread lent by a lane with bigger
        // buffers, or a connection built with a smaller `buffer_bytes`).
        let buf = ctx.buffer();
        let take = buf.len().min(self.pending.len());
        let buf = &mut buf[..take];
        for _ in 0..DATAGRAM_BATCH {
            let n = match stream.read(buf) {
                Ok(0) => return Disposition::Close,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ctx.set_drained();
                    return Disposition::Rearm;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Disposition::Close,
            };
            busy_work(self.work_us);
            let mut off = 0;
            match write_out(stream, &buf[..n], &mut off) {
                Ok(true) => {}
                Ok(false) => {
                    // Keep the rest (it fits: the read was bounded by the pending buffer) and
                    // wait for writability before reading more.
                    let rest = n - off;
                    self.pending[..rest].copy_from_slice(&buf[off..n]);
                    self.len = rest;
                    self.sent = 0;
                    return Disposition::Rearm;
                }
                Err(_) => return Disposition::Close,
            }
        }
        // Bytes may still be queued: the re-armed handle is ready again at once and queues
        // behind the handles that were already ready.
        Disposition::Rearm
    }
}

impl Reusable for TcpEchoStream {
    fn clear(&mut self) {
        self.stream = None;
        self.len = 0;
        self.sent = 0;
    }
}

/// A periodic timer that reports its wake-up latency through telemetry: the sample's origin is
/// the expiry the timer was due at, so latency = handler entry − expected expiry. Missed
/// periods (expirations > 1) are counted as missed periods.
///
/// # Examples
/// ```
/// use lfrt::{handlers::PeriodicTimer, LaneConfig, Policy, Runtime, RuntimeConfig, Timer};
/// let mut rt = Runtime::new(RuntimeConfig::default())?;
/// let control = rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
/// let mut t = Timer::new()?;
/// t.arm(lfrt::task::time::now_ns() + 1_000_000, 1_000_000)?; // 1 kHz
/// control.registry().register(Box::new(PeriodicTimer::new(t)))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PeriodicTimer {
    timer: Timer,
}

impl PeriodicTimer {
    /// Wraps an armed timer.
    pub fn new(timer: Timer) -> PeriodicTimer {
        PeriodicTimer { timer }
    }
}

impl EventHandler for PeriodicTimer {
    fn source(&self) -> BorrowedFd<'_> {
        self.timer.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        if let Ok(Some((expirations, due_ns))) = self.timer.read() {
            ctx.set_origin_ns(due_ns);
            ctx.add_missed_periods(expirations - 1);
        }
        // One read empties a timerfd: the next expiry is reported by itself.
        ctx.set_drained();
        Disposition::Rearm
    }
}
