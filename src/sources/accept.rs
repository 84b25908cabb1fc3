//! The TCP plumbing the built-in listeners share ([`TcpEcho`](crate::sources::handlers::TcpEcho)
//! and [`stream::Framed`](crate::sources::stream::Framed)): the accept side ([`Acceptor`]: the
//! gate, the pause when descriptors or memory run out and its retry, refused connections counted
//! and logged), the preallocated [`ConnectionTable`] whose entries accepted connections borrow,
//! and the one flush loop of their streams ([`write_out`]). Each listener supplies only how it
//! admits a connection and how it serves one; the demo handlers are in `handlers.rs`.
//!
//! Logging follows the rule of the [handlers' module docs](crate::sources::handlers): the first
//! occurrence of a condition is logged, and after that at most one line per [`LOG_INTERVAL_NS`]
//! per handler and condition ([`LogLimit`]).

use crate::engine::handler::DATAGRAM_BATCH;
use crate::engine::handler::{Context, Disposition, Event, EventHandler, Interest, Pooled};
use crate::error::Error;
use crate::observe::metrics::Incident;
use crate::sources::source::Timer;
use crate::sync::queue::Queue;
use crate::sys::{self, epoll::Epoll};
use std::fmt;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Least time between two log lines about one condition of one handler (1 s).
pub const LOG_INTERVAL_NS: u64 = 1_000_000_000;

/// How long a [`TcpEcho`] listener that ran out of descriptors or memory pauses before it
/// tries to accept again (10 ms): short enough that service resumes promptly once resources
/// free up, long enough that a stuck backlog costs 100 dispatches a second, not a spinning CPU.
///
/// [`TcpEcho`]: crate::sources::handlers::TcpEcho
pub const ACCEPT_RETRY_NS: u64 = 10_000_000;

/// Rate limit for one condition's log lines (see the module docs for the rule).
#[derive(Debug, Default)]
pub(crate) struct LogLimit {
    /// Earliest `CLOCK_MONOTONIC` ns of the next line (0: the first occurrence logs).
    next_ns: u64,
}

impl LogLimit {
    /// True if a line may be written now (and then not again for [`LOG_INTERVAL_NS`]).
    /// Called only when the condition occurs: the clock read is the whole cost.
    pub(crate) fn allow(&mut self) -> bool {
        let now = sys::now_ns();
        if now < self.next_ns {
            return false;
        }
        self.next_ns = now + LOG_INTERVAL_NS;
        true
    }
}

/// Why an accepted connection was closed unserved (for the log line; each is counted in
/// `connections_refused`).
#[derive(Debug)]
pub(crate) enum Refused {
    /// Configuring the accepted socket failed.
    Setup(io::Error),
    /// The lane's handle table is full, or epoll refused the fd.
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
///
/// [`TcpEcho`]: crate::sources::handlers::TcpEcho
#[derive(Debug)]
pub(crate) struct Acceptor {
    listener: TcpListener,
    /// What the lane waits on: holds the listener (readable, unless paused) and `retry`.
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
            // Not a member, so not watched either.
            Err(e) if !sys::epoll::is_not_member(&e) => Err(e),
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
            lane = ctx.lane(),
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
                    lane = ctx.lane(),
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
                    lane = ctx.lane(),
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
                lane = ctx.lane(),
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
/// [`TcpEcho`]: crate::sources::handlers::TcpEcho
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
///
/// [`TcpEchoStream`]: crate::sources::handlers::TcpEchoStream
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
        let emfile = io::Error::from_raw_os_error(sys::net::EMFILE);
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
