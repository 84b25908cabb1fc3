//! Sockets for lane tasks: UDP, TCP listener and TCP stream with `async` receive, send and
//! accept, whose readiness comes from the lane's own handle set (no thread of their own).
//!
//! Each socket is one handle in its lane's handle set, registered when the socket is made
//! (`bind`, `accept`), for readability, edge-triggered like every handle (`engine/handle_set.rs`)
//! and never suspended: the kernel reports it when new input arrives, and nothing re-arms it.
//! Readiness is handed to the reader, as mio and tokio do it:
//! * a task tries the nonblocking call; on `WouldBlock` it stores its waker (one reader slot
//!   per socket) and **tries once more**; only a second `WouldBlock` makes it wait;
//! * the handle's handler takes the stored waker and wakes it, and reads nothing itself: the
//!   reader reads until `WouldBlock` before it waits again, so the handler says the source is
//!   drained (`Context::set_drained`), and no `epoll_ctl` follows it.
//!
//! No wake-up is lost: input that arrives before the reader's second try is found by that
//! try; input that arrives after it makes the kernel report the handle again (an edge), and the
//! handler that report leads to runs after the waker was stored (a report that arrives while
//! the handler runs gives it one more run, `engine/claim.rs`). A report that finds no waker
//! (nobody waits, or the reader found the input first) wakes nothing; the input stays in the
//! socket for the next call.
//!
//! **One reader at a time.** A socket has one reader slot: while one task's `recv_from`,
//! `read` or `accept` is in progress (from its first poll until it completes or is dropped),
//! another one on the same socket fails at once with [`io::ErrorKind::ResourceBusy`]. Two
//! readers sharing the slot would each replace the other's waker on every `WouldBlock`, and a
//! replaced waker must be woken (or its task would sleep for good), so they would keep waking
//! each other: a livelock at the lane's priority. Share one socket's input between tasks through
//! a [`channel`](fn@crate::task::channel) fed by one reader task.
//!
//! # Real-time contract
//! Making a socket registers one handler (one `Box`, the registry's allocation); receiving,
//! sending and accepting readiness make no allocation and no `epoll_ctl`: a `WouldBlock` costs
//! the second try, the event the wake of the task (its lane's doorbell, at most one `write`);
//! a blocked send one `timerfd_settime`.

use crate::engine::handler::Registry;
use crate::engine::handler::{
    AfterDispatch, Context as LaneContext, Disposition, Event, EventHandler, Interest,
};
use crate::engine::word::Token;
use crate::sync::atomic::{AtomicBool, Ordering::*};
use crate::sync::Mutex;
use crate::sys;
use crate::task::executor::{self, fast_path_arg};
use crate::task::time::LaneTimer;
use crate::task::Spawner;
use std::fmt;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

/// How long a writer that met `WouldBlock` waits before it tries again (lane timer).
const WRITE_RETRY_NS: u64 = 100_000;

/// The readiness state a socket shares with its handler.
struct Readiness {
    /// The waker of the reader in progress (module docs: one reader at a time).
    readers: Mutex<Option<Waker>>,
    /// A `recv_from`, `read` or `accept` is in progress ([`Reader`]).
    reading: AtomicBool,
    token: OnceLock<Token>,
    registry: Registry,
}

/// The one reader in progress on a socket: taken at its first poll, given back when it
/// completes or is dropped (then its stored waker is forgotten, not woken: nobody waits).
struct Reader<'a>(&'a Readiness);

impl Readiness {
    /// Makes the caller the socket's reader, or refuses: another read is in progress.
    fn claim(&self) -> io::Result<Reader<'_>> {
        if self.reading.swap(true, AcqRel) {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "another task is already receiving on this lfrt::task::net socket: one reader at a \
                 time (feed other tasks from one reader through lfrt::task::channel)",
            ));
        }
        Ok(Reader(self))
    }

    /// A nonblocking call returned `WouldBlock`: store the reader's waker for the handle's
    /// next event (the caller then tries once more: module docs). The waker replaces the
    /// reader's earlier one (the same reader's: [`claim`](Self::claim)), which is not woken:
    /// its future is the one being polled now.
    fn wait(&self, cx: &mut Context<'_>) {
        let mut g = self.readers.lock();
        match &*g {
            Some(o) if o.will_wake(cx.waker()) => {}
            _ => *g = Some(cx.waker().clone()),
        }
    }

    /// The second try found input after all: the stored waker is taken back (dropped outside
    /// the lock: a waker's drop may run foreign code), so a later report wakes nobody.
    fn found(&self) {
        let w = self.readers.lock().take();
        drop(w);
    }
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        let forgotten = self.0.readers.lock().take();
        self.0.reading.store(false, Release);
        drop(forgotten); // outside the lock: a waker's drop may run foreign code
    }
}

struct Shared<S> {
    sock: S,
    ready: Readiness,
    /// The executor of the lane the socket is registered with (the fast path's).
    lane: Arc<executor::Shared>,
}

/// The socket's handler in the lane's handle set.
struct Source<S>(Arc<Shared<S>>);

impl<S: AsFd + Send + Sync + 'static> EventHandler for Source<S> {
    fn source(&self) -> BorrowedFd<'_> {
        self.0.sock.as_fd()
    }
    fn interest(&self) -> Interest {
        // Readable only: a socket is writable nearly always, so waiting for it in a level-
        // triggered set would fire at once on every resume (a spin at FIFO priority).
        // Writers that meet `WouldBlock` retry on the lane timer instead (module docs).
        Interest::READABLE
    }
    fn handle(&mut self, _event: &Event, ctx: &mut LaneContext) -> Disposition {
        // The reader reads until `WouldBlock` before it waits again (module docs): the
        // readiness is handed to it, and the handle needs no re-check.
        ctx.set_drained();
        let w = self.0.ready.readers.lock().take();
        if let Some(w) = w {
            // A task of this socket's lane: polled at the end of this dispatch, the same-lane
            // fast path (`executor.rs`), with no trip through the doorbell. Otherwise woken:
            // a lane task's waker directly, a combinator's wrapper through the relay.
            let here = executor::lane_task(&w)
                .filter(|(ex, _, _)| std::ptr::eq(*ex, Arc::as_ptr(&self.0.lane)))
                .map(|(_, index, gen)| fast_path_arg(index, gen));
            if let Some(arg) = here {
                let work: Arc<dyn AfterDispatch> = self.0.lane.clone();
                if ctx.run_after(work, arg).is_ok() {
                    return Disposition::Rearm; // `w` (a count of the lane) is dropped here
                }
            }
            executor::wake(w);
        }
        Disposition::Rearm
    }
}

/// Registers `sock` with the lane of `lane` (armed for good: module docs).
fn register<S: AsFd + Send + Sync + 'static>(
    lane: &Spawner,
    sock: S,
) -> io::Result<Arc<Shared<S>>> {
    let shared = Arc::new(Shared {
        sock,
        lane: lane.shared.clone(),
        ready: Readiness {
            readers: Mutex::new(None),
            reading: AtomicBool::new(false),
            token: OnceLock::new(),
            registry: lane.registry.clone(),
        },
    });
    let token = lane
        .registry
        .register(Box::new(Source(shared.clone())))
        .map_err(io::Error::other)?;
    let _ = shared.ready.token.set(token);
    Ok(shared)
}

/// Runs the nonblocking `op` until it stops saying `WouldBlock`, waiting on the lane between:
/// a reader for the socket's readiness, a writer (`retry`: its timer entry) for its lane's
/// timer, `WRITE_RETRY_NS` later. The lane is the task's being polled, found from the thread
/// (`executor::current_task`), and the entry wakes the waker the future was polled with, however
/// a combinator wrapped it; outside a lane task the writer yields.
fn poll_io<S, T>(
    sh: &Shared<S>,
    retry: Option<&mut LaneTimer>,
    cx: &mut Context<'_>,
    mut op: impl FnMut(&S) -> io::Result<T>,
) -> Poll<io::Result<T>> {
    match op(&sh.sock) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            match retry {
                Some(t) => {
                    if t.poll_until(sys::now_ns() + WRITE_RETRY_NS, cx).is_none() {
                        cx.waker().wake_by_ref();
                    }
                }
                None => {
                    sh.ready.wait(cx);
                    match op(&sh.sock) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        r => {
                            sh.ready.found();
                            return Poll::Ready(r);
                        }
                    }
                }
            }
            Poll::Pending
        }
        r => Poll::Ready(r),
    }
}

fn deregister<S>(sh: &Shared<S>) {
    if let Some(t) = sh.ready.token.get() {
        let _ = sh.ready.registry.deregister(*t);
    }
}

/// A UDP socket for lane tasks.
///
/// # Examples
/// ```no_run
/// # async fn echo(lane: lfrt::task::Spawner) -> std::io::Result<()> {
/// let sock = lfrt::task::net::UdpSocket::bind(&lane, "127.0.0.1:7000".parse().unwrap())?;
/// let mut buf = [0u8; 1500];
/// loop {
///     let (n, from) = sock.recv_from(&mut buf).await?;
///     sock.send_to(&buf[..n], from).await?;
/// }
/// # }
/// ```
pub struct UdpSocket(Arc<Shared<std::net::UdpSocket>>);

impl fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UdpSocket").field(&self.0.sock).finish()
    }
}

impl UdpSocket {
    /// Binds `addr` and registers the socket with `lane`'s handle set.
    ///
    /// # Errors
    /// The bind's error, or the registry's (e.g. the lane's handle table is full).
    pub fn bind(lane: &Spawner, addr: SocketAddr) -> io::Result<UdpSocket> {
        Self::from_std(lane, std::net::UdpSocket::bind(addr)?)
    }

    /// Takes over a bound std socket (made nonblocking here).
    ///
    /// # Errors
    /// As [`bind`](Self::bind).
    pub fn from_std(lane: &Spawner, sock: std::net::UdpSocket) -> io::Result<UdpSocket> {
        sock.set_nonblocking(true)?;
        Ok(UdpSocket(register(lane, sock)?))
    }

    /// The local address.
    ///
    /// # Errors
    /// `getsockname`'s.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.sock.local_addr()
    }

    /// Receives one datagram, waiting on the lane until one arrives.
    ///
    /// # Errors
    /// The socket's error; [`io::ErrorKind::ResourceBusy`] if another receive on this socket
    /// is in progress (one reader at a time: module docs).
    pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let _reader = self.0.ready.claim()?;
        poll_fn(|cx| poll_io(&self.0, None, cx, |s| s.recv_from(buf))).await
    }

    /// Sends one datagram, waiting on the lane while the socket's buffer is full.
    ///
    /// # Errors
    /// The socket's error.
    pub async fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        let mut retry = LaneTimer::default();
        poll_fn(|cx| poll_io(&self.0, Some(&mut retry), cx, |s| s.send_to(buf, to))).await
    }
}

impl Drop for UdpSocket {
    /// Removes the socket's handle from the lane (closing the socket).
    fn drop(&mut self) {
        deregister(&self.0);
    }
}

/// A TCP listener for lane tasks; accepted streams are registered with the same lane.
pub struct TcpListener {
    shared: Arc<Shared<std::net::TcpListener>>,
    lane: Spawner,
}

impl fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TcpListener")
            .field(&self.shared.sock)
            .finish()
    }
}

impl TcpListener {
    /// Binds `addr` and registers the listener with `lane`'s handle set.
    ///
    /// # Errors
    /// The bind's error, or the registry's.
    pub fn bind(lane: &Spawner, addr: SocketAddr) -> io::Result<TcpListener> {
        let l = std::net::TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        Ok(TcpListener {
            shared: register(lane, l)?,
            lane: lane.clone(),
        })
    }

    /// The local address.
    ///
    /// # Errors
    /// `getsockname`'s.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.shared.sock.local_addr()
    }

    /// Accepts one connection, waiting on the lane until one arrives; the stream is
    /// registered with the same lane (one handler allocation per connection).
    ///
    /// # Errors
    /// `accept`'s error, or the registry's (the lane's handle table is full: the connection
    /// is closed); [`io::ErrorKind::ResourceBusy`] if another `accept` on this listener is in
    /// progress (one reader at a time: module docs).
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let reader = self.shared.ready.claim()?;
        let (s, from) = poll_fn(|cx| poll_io(&self.shared, None, cx, |l| l.accept())).await?;
        drop(reader);
        s.set_nonblocking(true)?;
        Ok((TcpStream(register(&self.lane, s)?), from))
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        deregister(&self.shared);
    }
}

/// A TCP stream for lane tasks.
pub struct TcpStream(Arc<Shared<std::net::TcpStream>>);

impl fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TcpStream").field(&self.0.sock).finish()
    }
}

impl TcpStream {
    /// Reads into `buf`, waiting on the lane until bytes (or the end of the stream, `Ok(0)`)
    /// arrive.
    ///
    /// # Errors
    /// The socket's error; [`io::ErrorKind::ResourceBusy`] if another read on this stream is
    /// in progress (one reader at a time: module docs).
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        use std::io::Read;
        let _reader = self.0.ready.claim()?;
        poll_fn(|cx| poll_io(&self.0, None, cx, |mut s| s.read(buf))).await
    }

    /// Writes from `buf`, waiting on the lane while the socket's buffer is full; returns the
    /// bytes written (maybe fewer than `buf.len()`).
    ///
    /// # Errors
    /// The socket's error.
    pub async fn write(&self, buf: &[u8]) -> io::Result<usize> {
        use std::io::Write;
        let mut retry = LaneTimer::default();
        poll_fn(|cx| poll_io(&self.0, Some(&mut retry), cx, |mut s| s.write(buf))).await
    }

    /// Writes all of `buf`.
    ///
    /// # Errors
    /// The socket's error; `WriteZero` if the socket accepts no more bytes.
    pub async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write(buf).await? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => buf = &buf[n..],
            }
        }
        Ok(())
    }

    /// The peer's address.
    ///
    /// # Errors
    /// `getpeername`'s.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.0.sock.peer_addr()
    }
}

impl Drop for TcpStream {
    fn drop(&mut self) {
        deregister(&self.0);
    }
}
