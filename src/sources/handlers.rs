//! Built-in handlers, so that a configuration file alone runs a service.
//!
//! # Failure behaviour
//! Each built-in handler does a bounded amount of work per event (at most one
//! [`DATAGRAM_BATCH`] of datagrams or of stream reads), never retries a failing call in a loop,
//! and counts every piece of work it drops or defers in its group's metrics
//! ([`Context::count`]). It also logs each condition, from the pool thread, under one rule:
//! the first occurrence is logged, and after that at most one line per [`LOG_INTERVAL_NS`] per
//! handler and condition, naming the running total; the counter is exact, the log is a sample.
//! So a burst, however long, costs at most one formatted line a second on a pool thread.

use crate::engine::handler::DATAGRAM_BATCH;
use crate::engine::handler::{Context, Disposition, Event, EventHandler, Interest, Pooled};
use crate::error::Error;
use crate::observe::metrics::Incident;
use crate::sources::source::Timer;
use crate::sync::queue::Queue;
use crate::sys::{self, epoll::Epoll};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Least time between two log lines about one condition of one handler (1 s).
pub const LOG_INTERVAL_NS: u64 = 1_000_000_000;

/// How long a [`TcpEcho`] listener that ran out of descriptors or memory pauses before it
/// tries to accept again (10 ms): short enough that service resumes promptly once resources
/// free up, long enough that a stuck backlog costs 100 dispatches a second, not a spinning CPU.
pub const ACCEPT_RETRY_NS: u64 = 10_000_000;

/// Rate limit for one condition's log lines (see the module docs for the rule).
#[derive(Debug, Default)]
struct LogLimit {
    /// Earliest `CLOCK_MONOTONIC` ns of the next line (0: the first occurrence logs).
    next_ns: u64,
}

impl LogLimit {
    /// True if a line may be written now (and then not again for [`LOG_INTERVAL_NS`]).
    /// Called only when the condition occurs: the clock read is the whole cost.
    fn allow(&mut self) -> bool {
        let now = sys::now_ns();
        if now < self.next_ns {
            return false;
        }
        self.next_ns = now + LOG_INTERVAL_NS;
        true
    }
}

/// Burns `ns` nanoseconds of the calling thread's **CPU time**: the built-in handlers' `work_us`,
/// a bounded stand-in for handler cost that harnesses reuse so every architecture they compare
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

/// `work_us` of the built-in echoes. It stays in the library, unlike `cpu_work`: it is a field
/// of the configuration file (`[[group.handler]]`, `[[band]]`) and of the echoes' public
/// constructors, and putting it behind a feature would make the file format and those
/// signatures depend on the build. It is how a configuration alone stands for a service whose
/// handlers cost something (what `lfrt run`, the benchmarks and the inversion experiments
/// measure), bounded by validation (at most 100 ms an event), and costs one comparison at 0.
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
                    group = ctx.group(),
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

/// Accepts TCP connections and serves each with a [`TcpEchoStream`] in the same group.
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
///   cannot be registered (the group already has `max_handles` handles, or epoll refuses the
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
/// The pause needs the listener out of the group's epoll set for a while, and a timer to put
/// it back. The group waits on a private epoll set (the *gate*, this handler's source) that
/// holds the listener and a one-shot retry timer; pausing masks the listener in the gate and
/// arms the timer, so the gate — and the handle — is ready only when the timer fires. The
/// handle never leaves the group (no re-registration, which could fail on a full table), and
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

/// Why an accepted connection was closed unserved (for the log line; each is counted in
/// `connections_refused`).
#[derive(Debug)]
pub(crate) enum Refused {
    /// Configuring the accepted socket failed.
    Setup(io::Error),
    /// The group's handle table is full, or epoll refused the fd.
    Register(Error),
    /// Every slot of a handler's own connection table is in use.
    TableFull {
        /// The table's size.
        max: usize,
    },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Setup(e) => write!(f, "configuring an accepted connection: {e}"),
            Refused::Register(e) => e.fmt(f),
            Refused::TableFull { max } => {
                write!(f, "all {max} connection slots are in use (max_connections)")
            }
        }
    }
}

/// The accept side of the built-in TCP listeners ([`TcpEcho`], [`crate::sources::stream::Framed`]):
/// the gate, the pause on exhaustion and its retry timer, and the counting and logging of
/// refused connections (see [`TcpEcho`]'s failure behaviour and implementation notes). One
/// mechanism; each listener supplies only how it admits a connection.
#[derive(Debug)]
pub(crate) struct Acceptor {
    listener: TcpListener,
    /// What the group waits on: holds the listener (readable, unless paused) and `retry`.
    gate: Epoll,
    /// One-shot timer that ends a pause.
    retry: Timer,
    /// `retry` was armed and its expiry not read yet: read it on the next event, whatever
    /// else happens (an expired, unread timer keeps the gate readable).
    retry_armed: bool,
    /// The listener's place in the gate: `Open` (watched), or out of it until `retry` fires.
    listener_in_gate: InGate,
    /// A pause is in progress (the listener is out of the gate until `retry` fires).
    paused: bool,
    /// Start (`CLOCK_MONOTONIC` ns) of the current exhaustion episode, and whether its start
    /// was logged.
    exhausted: Option<(u64, bool)>,
    /// For the log lines (read once at construction: logging makes no system call for it).
    addr: Option<SocketAddr>,
    exhausted_log: LogLimit,
    refused_log: LogLimit,
}

/// How an [`Acceptor`]'s listener is in its gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InGate {
    /// Watched for readability.
    Open,
    /// A member with no events (paused by `EPOLL_CTL_MOD`).
    Masked,
    /// Not a member (paused by `EPOLL_CTL_DEL`, the fallback when masking failed).
    Removed,
}

/// Epoll data words in an [`Acceptor`] gate (informative only: nothing waits on the gate itself).
const GATE_LISTENER: u64 = 0;
const GATE_RETRY: u64 = 1;

impl Acceptor {
    /// Wraps a bound listener (made nonblocking here); opens the gate and the retry timer.
    pub(crate) fn new(listener: TcpListener) -> io::Result<Acceptor> {
        listener.set_nonblocking(true)?;
        let gate = Epoll::new()?;
        let retry = Timer::new()?;
        gate.add(listener.as_raw_fd(), sys::epoll::IN, GATE_LISTENER)?;
        gate.add(retry.as_fd().as_raw_fd(), sys::epoll::IN, GATE_RETRY)?;
        Ok(Acceptor {
            addr: listener.local_addr().ok(),
            listener,
            gate,
            retry,
            retry_armed: false,
            listener_in_gate: InGate::Open,
            paused: false,
            exhausted: None,
            exhausted_log: LogLimit::default(),
            refused_log: LogLimit::default(),
        })
    }

    /// What the listener's handler waits on: the gate.
    pub(crate) fn source(&self) -> BorrowedFd<'_> {
        self.gate.as_fd()
    }

    /// The listener's address, as read at construction.
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// Arms the retry timer and takes the listener out of the gate: masked (`EPOLL_CTL_MOD`,
    /// which allocates nothing and cannot fail on a member), or, should that fail, removed
    /// (`EPOLL_CTL_DEL`). Either way the gate is then ready only when the timer fires, so a
    /// pause can never turn into a re-dispatch loop.
    ///
    /// # Errors
    /// The timer could not be armed, or the listener could be neither masked nor removed: it
    /// cannot be paused (the caller closes it rather than spin).
    fn pause(&mut self) -> io::Result<()> {
        self.retry.arm(sys::now_ns() + ACCEPT_RETRY_NS, 0)?;
        self.retry_armed = true;
        self.paused = true;
        let listener = self.listener.as_raw_fd();
        if self.listener_in_gate != InGate::Open {
            return Ok(());
        }
        if self.gate.modify(listener, 0, GATE_LISTENER).is_ok() {
            self.listener_in_gate = InGate::Masked;
            return Ok(());
        }
        match self.gate.delete(listener) {
            // ENOENT: not a member, so not watched either.
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => Err(e),
            _ => {
                self.listener_in_gate = InGate::Removed;
                Ok(())
            }
        }
    }

    /// Ends a pause (its timer fired): puts the listener back in the gate. False if that
    /// failed; the pause then starts again (retried when the timer next fires).
    fn resume(&mut self) -> io::Result<bool> {
        let listener = self.listener.as_raw_fd();
        let back = match self.listener_in_gate {
            InGate::Open => Ok(()),
            InGate::Masked => self.gate.modify(listener, sys::epoll::IN, GATE_LISTENER),
            InGate::Removed => self.gate.add(listener, sys::epoll::IN, GATE_LISTENER),
        };
        if back.is_err() {
            self.pause()?;
            return Ok(false);
        }
        self.listener_in_gate = InGate::Open;
        self.paused = false;
        Ok(true)
    }

    /// The listener could not be paused: close it (a listener that stays readable while it
    /// cannot accept would be dispatched in a loop). Logged at error level; rare enough
    /// (the timer or `epoll_ctl` failing on descriptors this handler owns) to log every time.
    fn give_up(&self, e: &io::Error, ctx: &Context) -> Disposition {
        tracing::error!(
            group = ctx.group(),
            listener = ?self.addr,
            error = %e,
            "TCP listener cannot be paused (its retry timer or epoll set failed): closing it \
             rather than dispatching it in a loop"
        );
        Disposition::Close
    }

    /// `accept` failed for lack of resources: count and log a new episode, then pause.
    fn exhausted(&mut self, e: &io::Error, ctx: &Context) -> Disposition {
        if self.exhausted.is_none() {
            let total = ctx.count(Incident::AcceptExhausted, 1);
            let logged = self.exhausted_log.allow();
            if logged {
                tracing::warn!(
                    group = ctx.group(),
                    listener = ?self.addr,
                    error = %e,
                    accept_exhausted = total,
                    retry_ms = ACCEPT_RETRY_NS / 1_000_000,
                    "TCP listener cannot accept (out of file descriptors or memory): pausing it \
                     and retrying; pending connections wait in the backlog"
                );
            }
            self.exhausted = Some((sys::now_ns(), logged));
        }
        match self.pause() {
            Ok(()) => Disposition::Rearm,
            Err(e) => self.give_up(&e, ctx),
        }
    }

    /// The backlog is drained without running out of resources: the episode, if any, is
    /// over. (Not the first successful `accept`: at the limit, every descriptor that frees up
    /// is taken by the next waiting connection, and each would start a new episode.)
    fn caught_up(&mut self, ctx: &Context) {
        if let Some((since_ns, logged)) = self.exhausted.take() {
            if logged {
                tracing::info!(
                    group = ctx.group(),
                    listener = ?self.addr,
                    paused_ms = sys::now_ns().saturating_sub(since_ns) / 1_000_000,
                    "TCP listener drained its backlog: accepting again"
                );
            }
        }
    }

    /// A connection `admit` refused (and dropped, closing it): count and log it.
    fn refused(&mut self, why: &Refused, ctx: &Context) {
        let total = ctx.count(Incident::ConnectionRefused, 1);
        if self.refused_log.allow() {
            tracing::warn!(
                group = ctx.group(),
                listener = ?self.addr,
                error = %why,
                connections_refused = total,
                "TCP listener closed an accepted connection it could not serve (see error); counted in \
                 connections_refused, logged at most once a second"
            );
        }
    }

    /// One event of the gate: ends a pause whose timer fired, then accepts the backlog,
    /// handing each connection to `admit`. A connection `admit` refuses (it is dropped, so
    /// closed) is counted in `connections_refused` and logged.
    pub(crate) fn accept(
        &mut self,
        ctx: &mut Context,
        mut admit: impl FnMut(TcpStream, &mut Context) -> Result<(), Refused>,
    ) -> Disposition {
        // An expired retry timer is always read, paused or not: left unread, it would keep the
        // gate (and so the handle) ready for ever.
        let fired = self.retry_armed && matches!(self.retry.read(), Ok(Some(_)));
        if fired {
            self.retry_armed = false;
        }
        if self.paused {
            if !fired {
                // Spurious: the listener is out of the gate, so nothing else can wake it.
                return Disposition::Rearm;
            }
            match self.resume() {
                Ok(true) => {}
                Ok(false) => return Disposition::Rearm,
                Err(e) => return self.give_up(&e, ctx),
            }
        }
        // At most DATAGRAM_BATCH connections per event, so a connection flood cannot keep a
        // pool thread here: the gate stays readable, so the re-armed handle reports again at
        // once and the rest of the backlog is taken by the next event.
        for _ in 0..DATAGRAM_BATCH {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if let Err(why) = admit(stream, ctx) {
                        self.refused(&why, ctx);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if sys::net::is_out_of_resources(&e) => return self.exhausted(&e, ctx),
                // Caught up with the backlog.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.caught_up(ctx);
                    return Disposition::Rearm;
                }
                // An error of one connection, which `accept` consumed (ECONNABORTED, EPERM,
                // …): nothing spins, keep serving.
                Err(_) => return Disposition::Rearm,
            }
        }
        // The batch is spent. If that emptied the backlog (exactly a batch was waiting), no
        // `WouldBlock` was seen and no further event will come to show it: look now, or an
        // exhaustion episode would never end (and the next one never be counted).
        if !self.backlog_waiting() {
            self.caught_up(ctx);
        }
        Disposition::Rearm
    }

    /// Whether a connection waits in the listener's backlog (`poll`, zero timeout; an error
    /// counts as waiting: the next `accept` reports it).
    fn backlog_waiting(&self) -> bool {
        sys::net::poll_one(self.listener.as_fd(), sys::net::POLL_IN, 0).map_or(true, |r| r != 0)
    }
}

/// What a listener's [`ConnectionTable`] holds per connection: a handler that serves one
/// accepted connection at a time and can be emptied for the next.
pub(crate) trait Reusable: EventHandler {
    /// Ends the connection it serves (closing its socket) and forgets it, leaving the entry as
    /// new. Called when its handle is removed, and when setting it up for a connection failed.
    fn clear(&mut self);
}

/// A listener's connections, preallocated: `max` entries made with the listener, each lent to
/// one accepted connection for its life and given back when its handle is removed. The entry
/// is registered in the lane as it is (it was boxed once, at construction, and the handle set
/// [releases](Pooled::release) it back here instead of freeing it), so accepting a connection
/// allocates nothing. A connection beyond `max` is refused, closed and counted
/// (`connections_refused`). The one connection table of the built-in listeners ([`TcpEcho`]
/// and [`stream::Framed`](crate::sources::stream::Framed)).
///
/// Invariant: every entry is either in `free` or lent, with `home` set, to exactly one
/// registered handle (or to the [`admit`](Self::admit) call setting it up); a lent entry holds
/// the only `Arc` of its table that is not the listener's, so the table outlives its
/// connections and nothing keeps it alive in a cycle (`home` is cleared on return).
pub(crate) struct ConnectionTable<C> {
    /// Entries not lent. A pop never waits for a release that is half done (`sync::queue`):
    /// it then finds the table full for that one connection, which is refused and counted.
    free: Queue<Box<Lent<C>>>,
    max: usize,
}

/// One entry of a [`ConnectionTable`]: a connection's state and, while lent, its table.
struct Lent<C> {
    conn: C,
    home: Option<Arc<ConnectionTable<C>>>,
}

impl<C: Reusable> ConnectionTable<C> {
    /// A table of `max` (at least 1) entries, each made by `make`, which allocates (and
    /// pre-faults) what a connection needs.
    pub(crate) fn new(
        max: usize,
        mut make: impl FnMut() -> io::Result<C>,
    ) -> io::Result<Arc<ConnectionTable<C>>> {
        let free = Queue::new(max.max(1));
        for _ in 0..max {
            // Cannot fail: the queue holds exactly `max`.
            let _ = free.push(Box::new(Lent {
                conn: make()?,
                home: None,
            }));
        }
        Ok(Arc::new(ConnectionTable { free, max }))
    }

    /// Lends an entry to an accepted connection: `open` sets it up (the connection is moved
    /// into it), then it is registered in the lane of `ctx`. Nothing here allocates.
    ///
    /// # Errors
    /// [`Refused::TableFull`] when every entry is lent (`open` is dropped unrun, closing the
    /// connection it holds); `open`'s error; the registration's. The entry goes back to the
    /// table in every case.
    pub(crate) fn admit(
        self: &Arc<Self>,
        ctx: &Context,
        open: impl FnOnce(&mut C) -> io::Result<()>,
    ) -> Result<(), Refused> {
        let mut lent = self
            .free
            .pop()
            .ok_or(Refused::TableFull { max: self.max })?;
        lent.home = Some(Arc::clone(self));
        if let Err(e) = open(&mut lent.conn) {
            lent.release();
            return Err(Refused::Setup(e));
        }
        // A registration that fails drops the handle set's `Held`, which releases the entry.
        ctx.registry()
            .register_pooled(lent)
            .map(drop)
            .map_err(Refused::Register)
    }
}

impl<C> fmt::Debug for ConnectionTable<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionTable")
            .field("max", &self.max)
            .field("free", &self.free.len())
            .finish()
    }
}

impl<C: Reusable> Pooled for Lent<C> {
    /// Clears the entry and puts it back in its table. The entry goes back even if `clear`
    /// panics (in a user handler's `Drop`), so the table never shrinks; the panic then goes
    /// on to the handle set, which counts it.
    fn release(mut self: Box<Self>) {
        let cleared = catch_unwind(AssertUnwindSafe(|| self.conn.clear()));
        if let Some(home) = self.home.take() {
            // Cannot fail: the table has room for every entry it lent.
            let _ = home.free.push(self);
        }
        if let Err(panic) = cleared {
            resume_unwind(panic);
        }
    }
}

/// A lent entry serves as its connection's handler.
impl<C: Reusable> EventHandler for Lent<C> {
    fn source(&self) -> BorrowedFd<'_> {
        self.conn.source()
    }
    fn interest(&self) -> Interest {
        self.conn.interest()
    }
    fn handle(&mut self, event: &Event, ctx: &mut Context) -> Disposition {
        self.conn.handle(event, ctx)
    }
    fn after_panic(&mut self) -> Disposition {
        self.conn.after_panic()
    }
    fn on_close(&mut self) {
        self.conn.on_close()
    }
}

/// Writes `buf[*sent..]` to a nonblocking stream, advancing `*sent`: `Ok(true)` when all of
/// `buf` is out, `Ok(false)` when the socket is full (`EAGAIN`; wait for writability). The one
/// flush loop of the stream handlers ([`TcpEchoStream`] and
/// [`stream::Framed`](crate::sources::stream::Framed)). `std` writes a `TcpStream` with
/// `MSG_NOSIGNAL`, so a reset peer gives `EPIPE`, never `SIGPIPE`.
pub(crate) fn write_out(stream: &TcpStream, buf: &[u8], sent: &mut usize) -> io::Result<bool> {
    while *sent < buf.len() {
        match (&*stream).write(&buf[*sent..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => *sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Echoes the bytes of one TCP connection; closes the handle when the peer closes.
///
/// One event reads at most [`DATAGRAM_BATCH`] times (each up to the thread's buffer), then
/// re-arms: a connection that keeps sending is served in turns with the group's other
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
/// use lfrt::{handlers::PeriodicTimer, GroupConfig, Policy, Runtime, RuntimeConfig, Timer};
/// let mut rt = Runtime::new(RuntimeConfig::default())?;
/// let control = rt.add_group(GroupConfig::new("control", Policy::Fifo, 80))?;
/// let mut t = Timer::new()?;
/// t.arm(lfrt::time::now_ns() + 1_000_000, 1_000_000)?; // 1 kHz
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::handler::{Handles, Registry};
    use std::sync::Arc;

    fn ctx() -> Context {
        let registry = Registry {
            set: Arc::new(Handles::new(4).unwrap()),
        };
        Context::new(64, 0, 0, 0, 0, registry)
    }

    fn gate_ready(a: &Acceptor, timeout_ms: i32) -> bool {
        sys::net::poll_one(a.source(), sys::net::POLL_IN, timeout_ms).unwrap() != 0
    }

    /// An exhaustion episode ends when the backlog is drained, also when it held exactly one
    /// batch (`DATAGRAM_BATCH` connections), so no `accept` ever returned `EAGAIN`.
    #[test]
    fn an_episode_ends_when_exactly_one_batch_drains_the_backlog() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut acceptor = Acceptor::new(listener).unwrap();
        let clients: Vec<_> = (0..DATAGRAM_BATCH)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        assert!(gate_ready(&acceptor, 1000), "the backlog is readable");
        // As if an episode had started earlier and resources had come back since.
        acceptor.exhausted = Some((sys::now_ns(), false));
        let mut ctx = ctx();
        let mut accepted = Vec::new();
        let d = acceptor.accept(&mut ctx, |s, _| {
            accepted.push(s);
            Ok(())
        });
        assert_eq!(d, Disposition::Rearm);
        assert_eq!(accepted.len(), clients.len());
        assert!(!gate_ready(&acceptor, 0), "backlog drained");
        assert_eq!(acceptor.exhausted, None, "the episode is over");
    }

    /// A pause whose `EPOLL_CTL_MOD` fails (here: the listener is no longer in the gate)
    /// still pauses; its timer is read when it fires, so the gate is not left ready for
    /// ever, and the listener accepts again afterwards.
    #[test]
    fn a_failed_epoll_ctl_during_a_pause_leaves_no_ready_gate() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut acceptor = Acceptor::new(listener).unwrap();
        acceptor.gate.delete(acceptor.listener.as_raw_fd()).unwrap();
        let mut ctx = ctx();
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        let _ = acceptor.exhausted(&emfile, &ctx);
        assert!(
            !gate_ready(&acceptor, 0),
            "paused: nothing ready before the timer"
        );
        assert!(gate_ready(&acceptor, 1000), "the retry timer fires");
        let mut accepted = Vec::new();
        let d = acceptor.accept(&mut ctx, |s, _| {
            accepted.push(s);
            Ok(())
        });
        assert_eq!(d, Disposition::Rearm);
        // Bounded: after the event that saw the timer fire, nothing keeps the gate ready.
        assert!(
            !gate_ready(&acceptor, 0),
            "an unread timer keeps the gate ready"
        );
        let _client = TcpStream::connect(addr).unwrap();
        assert!(gate_ready(&acceptor, 1000), "the listener is watched again");
        let d = acceptor.accept(&mut ctx, |s, _| {
            accepted.push(s);
            Ok(())
        });
        assert_eq!(d, Disposition::Rearm);
        assert_eq!(accepted.len(), 1);
    }
}
