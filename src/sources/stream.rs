//! Stream handlers: framed request/reply over TCP, with per-connection read and write state,
//! bounded write buffering, back-pressure, half-close and reset handling.
//!
//! A [`Framed`] listener, registered in a lane, accepts connections and registers one handle
//! per connection in the same lane, so the lane's threads serve different connections at the
//! same time (one thread per connection at a time, as for every handle). On the wire a frame
//! is a 4-byte big-endian body length ([`HEADER`]) followed by the body, read by the runtime's
//! one frame reader (`sources/frame.rs`, which the bound pool's connection uses with its own
//! header). The user's
//! [`FrameHandler`] (a closure is one) receives each complete frame and writes reply frames
//! into an [`Output`].
//!
//! Each connection moves through these states:
//!
//! ```text
//!              frames read and answered; replies flushed
//!            ┌──────────────────────────────┐
//!            ▼                              │ pending output drained: read again
//!   ──► READING ─── write returned EAGAIN, ──► WRITING (back-pressure: armed for writability
//!    (armed readable)  or frame budget spent     only, nothing read, no frame delivered)
//!                      with the socket full
//!                      (count 1 episode)
//!            │
//!            │ peer EOF (half-close)            │ Flow::Close, or a header above max_frame
//!            ▼                                  ▼   (frames_oversize; the rest of the input
//!        DRAINING ── frames already read   CLOSING    is dropped)
//!            │       are answered, replies      │ replies to the frames before it flushed
//!            │       flushed                    ▼
//!            │                               LINGER ── shutdown(Write): a FIN after the last
//!            │                                  │      reply; the peer's input is read and
//!            │                                  │      dropped until its EOF, at most
//!            ▼                                  ▼      write_timeout
//!         CLOSED ◄── from any state: reset, EPIPE or another socket error, EOF inside a
//!                    frame (connections_reset); idle_timeout with nothing received and
//!                    nothing pending (stream_idle_timeouts); write_timeout with output that
//!                    does not move (stream_write_timeouts)
//! ```
//!
//! # Deadlines
//! Each slot owns a timer, and the connection's handle waits on the slot's private epoll set
//! (the socket, watched for what its state needs, and the timer), as the accept side does: a
//! stalled peer is noticed by the lane's own threads, with no extra thread. The timer is
//! armed lazily: progress (bytes read or written) only moves the deadline in memory, and the
//! timer is re-armed when it fires early or must fire sooner, so a busy connection costs a
//! clock read per event, not a system call.
//!
//! # Invariants
//! * **Reading only in READING.** While replies wait for the socket (a write returned
//!   `EAGAIN`) the handle is armed for writability only: nothing more is read and no frame is
//!   delivered until the output drained. A peer that does not read its replies therefore
//!   stops being read; TCP flow control then stops it sending. A connection never holds more
//!   than [`Limits::max_output`] bytes of replies.
//! * **A frame is delivered only with room for its reply**: at least [`HEADER`] +
//!   [`Limits::max_frame`] bytes free in the output buffer, so the first reply to any frame
//!   always fits. A handler that writes more replies than fit gets [`SendError::Full`].
//! * **Exactly once, in order.** Frames are delivered in the order they arrived; a frame is
//!   consumed as soon as its handler call returns. A handler that panics closes the connection
//!   (it is not shown the frame again).
//! * **Bounded work per event**: at most [`READS_PER_EVENT`] reads and [`FRAMES_PER_EVENT`]
//!   frames, then the handle is re-armed. If complete frames remain, it is armed for
//!   writability, which is ready at once when the socket has room, so they are served on the
//!   next dispatch without waiting for new input (and other handles run in between).
//! * **Nothing is dropped silently**: an oversized frame closes the connection (after the
//!   replies to the frames before it) and counts (`frames_oversize`); a reset, broken pipe or
//!   truncated last frame counts (`connections_reset`); a connection beyond the table closes
//!   unserved and counts (`connections_refused`); a timeout counts (`stream_idle_timeouts`,
//!   `stream_write_timeouts`). No path panics on a peer's behaviour.
//! * **No reset after a clean close**: a connection the server ends (`Flow::Close`, an
//!   oversized frame) shuts down its writing side and drains the peer's input before it
//!   closes, so late input cannot make the kernel answer with a reset that would discard
//!   replies still in flight.
//! * **Slots are clean**: a reply body handed out by [`Output::frame`] is zeroed, so no byte
//!   of an earlier reply or connection can leak into it.
//!
//! # Real-time contract and memory bound
//! [`Framed::new`] allocates and pre-faults the whole connection table:
//! `max_connections × (HEADER + max_frame + max_output)` bytes ([`Limits::table_bytes`]),
//! and opens each slot's epoll set and timer (`2 × max_connections` descriptors). A
//! connection takes one entry of the table (its buffers, gate and timer, and the handle the
//! lane runs, boxed once at construction) for its life and returns it when its handle is
//! removed. Accepting, reading, framing, the handler calls and writing allocate nothing (a
//! test counts the allocations over 1000 accepted connections). The accept side — the pause
//! when descriptors or memory run out, refusals counted in `connections_refused` — and the
//! connection table are the ones [`TcpEcho`](crate::sources::handlers::TcpEcho) uses.
//!
//! # Example
//! A lane that answers each frame with its body reversed:
//! ```no_run
//! use lfrt::stream::{Flow, Framed, Limits, Output};
//! use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
//! use std::net::TcpListener;
//!
//! let mut cfg = RuntimeConfig::default();
//! cfg.lanes.push(LaneConfig::new("admin", Policy::Other, 0));
//! let mut rt = Runtime::new(cfg)?;
//! let listener = TcpListener::bind("127.0.0.1:7100").unwrap();
//! let reverse = |frame: &[u8], out: &mut Output<'_>| {
//!     match out.frame(frame.len()) {
//!         Ok(body) => {
//!             body.copy_from_slice(frame);
//!             body.reverse();
//!             Flow::Continue
//!         }
//!         Err(_) => Flow::Close,
//!     }
//! };
//! let server = Framed::new(listener, Limits::default(), reverse).unwrap();
//! rt.lane("admin").unwrap().registry().register(Box::new(server))?;
//! rt.start()?;
//! # rt.shutdown()?;
//! # Ok::<(), lfrt::Error>(())
//! ```

use crate::engine::handler::{Context, Disposition, Event, EventHandler, DATAGRAM_BATCH};
use crate::observe::metrics::Incident;
use crate::sources::accept::{write_out, Acceptor, ConnectionTable, Reusable};
use crate::sources::frame::{Format, Next, Reader};
use crate::sources::source::Timer;
use crate::sys::{self, epoll::Epoll, mem, net};
use std::fmt;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of a frame's header: the body length, big-endian `u32`.
pub const HEADER: usize = 4;

/// The wire format for the runtime's one frame reader ([`crate::sources::frame`]): a
/// [`HEADER`] of the body length, big-endian, and no tag.
#[derive(Debug)]
struct LengthPrefix;

impl Format for LengthPrefix {
    const HEADER: usize = HEADER;
    type Tag = ();
    fn decode(header: &[u8]) -> ((), u32) {
        let mut h = [0u8; HEADER];
        h.copy_from_slice(header);
        ((), u32::from_be_bytes(h))
    }
}

/// Most `read` calls one event of a connection makes.
pub const READS_PER_EVENT: usize = DATAGRAM_BATCH;

/// Most frames one event of a connection delivers to its handler.
pub const FRAMES_PER_EVENT: usize = 64;

/// The bounds of a [`Framed`] listener, fixed at construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once (the table's slots). One more is accepted, closed at once
    /// and counted in `connections_refused`. Default 64.
    pub max_connections: usize,
    /// Largest frame body, in bytes, either way. A peer's frame above it closes the connection
    /// (`frames_oversize`); a reply above it is refused ([`SendError::TooLarge`]). At most
    /// `u32::MAX`. Default 16 KiB.
    pub max_frame: usize,
    /// Bytes of replies a connection may hold unsent (headers included); at least
    /// [`HEADER`] + `max_frame`, so one largest reply always fits. Default 64 KiB.
    pub max_output: usize,
    /// A connection with no replies pending that receives nothing for this long is closed and
    /// counted (`stream_idle_timeouts`): a silent peer cannot hold a slot for ever. At least
    /// 1 ms. Default 60 s.
    pub idle_timeout: Duration,
    /// A connection whose pending replies make no progress for this long (the peer does not
    /// read them) is closed and counted (`stream_write_timeouts`). It also bounds the drain
    /// after a close (see the module docs). At least 1 ms. Default 10 s.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 64,
            max_frame: 16 * 1024,
            max_output: 64 * 1024,
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(10),
        }
    }
}

impl Limits {
    /// Bytes one connection's slot holds: input (`HEADER + max_frame`) and output
    /// (`max_output`).
    pub fn slot_bytes(&self) -> u64 {
        (HEADER as u64)
            .saturating_add(self.max_frame as u64)
            .saturating_add(self.max_output as u64)
    }

    /// Bytes [`Framed::new`] allocates for the table: `max_connections × slot_bytes()`.
    pub fn table_bytes(&self) -> u64 {
        (self.max_connections as u64).saturating_mul(self.slot_bytes())
    }

    /// An `InvalidInput` error naming the first field out of range.
    fn check(&self) -> io::Result<()> {
        let bad = |msg: String| Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
        if self.max_connections == 0 {
            return bad("stream::Limits.max_connections must be at least 1".into());
        }
        if u32::try_from(self.max_frame).is_err() {
            return bad(format!(
                "stream::Limits.max_frame ({}) must fit the 4-byte header (at most {})",
                self.max_frame,
                u32::MAX
            ));
        }
        for (name, t) in [
            ("idle_timeout", self.idle_timeout),
            ("write_timeout", self.write_timeout),
        ] {
            if t < Duration::from_millis(1) {
                return bad(format!(
                    "stream::Limits.{name} ({t:?}) must be at least 1 ms"
                ));
            }
        }
        if self.max_output < HEADER + self.max_frame {
            return bad(format!(
                "stream::Limits.max_output ({}) must hold one largest reply: at least \
                 HEADER + max_frame = {}",
                self.max_output,
                HEADER + self.max_frame
            ));
        }
        Ok(())
    }
}

/// What a [`FrameHandler`] wants after a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep serving the connection.
    Continue,
    /// Deliver no more frames; flush the replies written so far, then close.
    Close,
}

/// Application code for one connection: receives each complete frame, writes replies.
///
/// Each connection gets its own clone of the handler given to [`Framed::new`] (clone
/// shared state behind an `Arc`: no allocation). Any `FnMut(&[u8], &mut Output<'_>) -> Flow`
/// closure that is `Clone + Send + 'static` is a handler.
///
/// # Real-time safety
/// It runs on a pool thread like any [`EventHandler`]: it should be short
/// and must not block or allocate.
pub trait FrameHandler: Clone + Send + 'static {
    /// One complete frame's body (without the header). Replies written to `out` are sent in
    /// order after it returns.
    fn frame(&mut self, frame: &[u8], out: &mut Output<'_>) -> Flow;
}

impl<F> FrameHandler for F
where
    F: FnMut(&[u8], &mut Output<'_>) -> Flow + Clone + Send + 'static,
{
    fn frame(&mut self, frame: &[u8], out: &mut Output<'_>) -> Flow {
        self(frame, out)
    }
}

/// Why a reply was not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The body is longer than [`Limits::max_frame`].
    TooLarge,
    /// The connection's pending output ([`Limits::max_output`]) has no room for it now.
    Full,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendError::TooLarge => "reply longer than max_frame",
            SendError::Full => "no room for the reply in the connection's pending output",
        })
    }
}

impl std::error::Error for SendError {}

/// Where a [`FrameHandler`] writes its replies: the connection's output buffer. Each reply is
/// one frame (the header is written for you).
pub struct Output<'a> {
    buf: &'a mut [u8],
    len: &'a mut usize,
    max_frame: usize,
}

impl Output<'_> {
    /// The longest body that fits now (at least `max_frame` for the first reply to a frame).
    pub fn room(&self) -> usize {
        (self.buf.len() - *self.len)
            .saturating_sub(HEADER)
            .min(self.max_frame)
    }

    /// Appends a reply of `len` body bytes and returns the body to fill in place (zeros until
    /// written: never bytes of an earlier reply or connection).
    ///
    /// # Errors
    /// [`SendError::TooLarge`] above `max_frame`, [`SendError::Full`] when it does not fit;
    /// nothing is written then.
    pub fn frame(&mut self, len: usize) -> Result<&mut [u8], SendError> {
        if len > self.max_frame {
            return Err(SendError::TooLarge);
        }
        let at = *self.len;
        if self.buf.len() - at < HEADER + len {
            return Err(SendError::Full);
        }
        // `len <= max_frame <= u32::MAX` (checked by `Limits::check`).
        self.buf[at..at + HEADER].copy_from_slice(&(len as u32).to_be_bytes());
        *self.len = at + HEADER + len;
        let body = &mut self.buf[at + HEADER..at + HEADER + len];
        body.fill(0);
        Ok(body)
    }

    /// Appends a reply with this body. Errors as for [`frame`](Self::frame).
    pub fn send(&mut self, body: &[u8]) -> Result<(), SendError> {
        self.frame(body.len())?.copy_from_slice(body);
        Ok(())
    }
}

impl fmt::Debug for Output<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Output")
            .field("pending", &*self.len)
            .field("room", &self.room())
            .finish()
    }
}

/// A connection's preallocated resources: its input and output buffers, and what its handle
/// waits on.
struct Slot {
    /// Input: room for one largest frame (`HEADER + max_frame`), read by the runtime's one
    /// frame reader ([`crate::sources::frame`]).
    rx: Reader<LengthPrefix>,
    /// Output: `max_output` bytes of reply frames.
    tx: Box<[u8]>,
    /// What the connection's handle waits on: its socket (readable or writable, as its state
    /// needs) and `timer`. Opened with the slot, so accepting opens no descriptor.
    gate: Epoll,
    /// One-shot timer for the connection's deadline (idle, write, or the drain after a close).
    timer: Timer,
}

/// Epoll data words in a connection's gate (informative only).
const GATE_STREAM: u64 = 0;
const GATE_TIMER: u64 = 1;

/// A TCP listener whose connections speak length-prefixed frames to a [`FrameHandler`]. See
/// the [module docs](self).
pub struct Framed<H> {
    acceptor: Acceptor,
    table: Arc<ConnectionTable<Connection<H>>>,
    handler: H,
    limits: Limits,
}

impl<H: FrameHandler> Framed<H> {
    /// Wraps a bound listener (made nonblocking here) and allocates and pre-faults the
    /// connection table ([`Limits::table_bytes`]). Each slot also opens two descriptors (an
    /// epoll set and a timer, for the connection's deadlines), so the table holds
    /// `2 × max_connections` descriptors.
    ///
    /// # Errors
    /// `InvalidInput` naming the [`Limits`] field out of range; the errors of opening the
    /// accept side (an epoll set and a timer, as for [`TcpEcho`](crate::sources::handlers::TcpEcho))
    /// or a slot's descriptors.
    pub fn new(listener: TcpListener, limits: Limits, handler: H) -> io::Result<Framed<H>> {
        limits.check()?;
        let table = ConnectionTable::new(limits.max_connections, || {
            let mut slot = Slot {
                rx: Reader::new(limits.max_frame, 0),
                tx: vec![0u8; limits.max_output].into_boxed_slice(),
                gate: Epoll::new()?,
                timer: Timer::new()?,
            };
            slot.gate
                .add(slot.timer.as_fd().as_raw_fd(), sys::epoll::IN, GATE_TIMER)?;
            mem::prefault(&mut slot.tx);
            Ok(Connection::idle(slot, &limits))
        })?;
        Ok(Framed {
            acceptor: Acceptor::new(listener)?,
            table,
            handler,
            limits,
        })
    }

    /// The listener's address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.acceptor.local_addr()
    }
}

impl<H> fmt::Debug for Framed<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Framed")
            .field("listener", &self.acceptor.local_addr())
            .field("limits", &self.limits)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl<H: FrameHandler> EventHandler for Framed<H> {
    fn source(&self) -> BorrowedFd<'_> {
        self.acceptor.source()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        let Framed {
            acceptor,
            table,
            handler,
            ..
        } = self;
        acceptor.accept(ctx, |stream, ctx| {
            // Cloned before an entry is taken: a panicking user `Clone` must not lose one.
            let handler = handler.clone();
            table.admit(ctx, |conn| conn.open(stream, handler))
        })
    }
}

/// A connection's state (the module docs' diagram).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Reading,
    /// Back-pressure: replies wait for the socket.
    Writing,
    /// The peer closed its side: answer what was read, flush, close.
    Draining,
    /// The handler returned [`Flow::Close`], or the peer sent an oversized frame: deliver
    /// nothing more, flush, then linger.
    Closing,
    /// Replies flushed and our side shut down (`shutdown(Write)`): read and discard the
    /// peer's input until its end of stream or the drain deadline, then close. Closing at
    /// once with unread input would make the kernel answer with a reset, which can discard
    /// replies the peer has not received yet.
    Linger,
}

/// What [`Connection::deliver`] stopped at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// No complete frame left (or the handler asked to close).
    Drained,
    /// The output has no room for a reply: flush first.
    OutputFull,
    /// [`FRAMES_PER_EVENT`] delivered this event.
    Budget,
    /// The next frame's header announces more than `max_frame`.
    Oversize,
}

/// One entry of a listener's connection table: its slot, and while it serves an accepted
/// connection, that connection's stream, handler and state. Registered in the lane as it is
/// (the table boxed it once, at construction) and returned to the table when its handle is
/// removed ([`Reusable::clear`]).
struct Connection<H> {
    /// The accepted connection's socket; `None` while the entry waits in its table.
    stream: Option<TcpStream>,
    /// Its clone of the listener's handler; `None` while the entry waits in its table.
    handler: Option<H>,
    slot: Slot,
    max_frame: usize,
    /// [`Limits::idle_timeout`] and [`Limits::write_timeout`], in ns.
    idle_ns: u64,
    write_ns: u64,
    /// Reply bytes in `tx`, and how many of them were written (`tx_sent <= tx_len`).
    tx_len: usize,
    tx_sent: usize,
    state: State,
    /// Complete frames remain after the frame budget: be dispatched again at once.
    again: bool,
    /// The socket's events in the gate now (0: not added yet).
    watching: u32,
    /// Its abnormal end is counted already (`frames_oversize`): a failure while flushing the
    /// replies before the oversized frame is not counted again as a reset.
    oversized: bool,
    /// A read or write moved bytes during this event.
    moved: bool,
    /// `CLOCK_MONOTONIC` ns of the last progress (bytes read or written), or of the start of
    /// the linger: the current deadline counts from it.
    progress_ns: u64,
    /// When `timer` is armed to fire (0: not armed). Lazily kept: progress only moves the
    /// deadline; the timer is re-armed when it fires early or must fire sooner.
    armed_ns: u64,
}

impl<H: FrameHandler> Connection<H> {
    /// A table entry with `slot`, serving no connection yet.
    fn idle(slot: Slot, limits: &Limits) -> Connection<H> {
        Connection {
            stream: None,
            handler: None,
            slot,
            max_frame: limits.max_frame,
            idle_ns: sys::duration_ns(limits.idle_timeout).unwrap_or(u64::MAX),
            write_ns: sys::duration_ns(limits.write_timeout).unwrap_or(u64::MAX),
            tx_len: 0,
            tx_sent: 0,
            state: State::Reading,
            again: false,
            watching: 0,
            moved: false,
            oversized: false,
            progress_ns: 0,
            armed_ns: 0,
        }
    }

    /// Takes on an accepted connection (the entry is idle: [`clear`](Reusable::clear)ed or
    /// new). On an error the table clears it again and the connection is refused.
    fn open(&mut self, stream: TcpStream, handler: H) -> io::Result<()> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        self.stream = Some(stream);
        self.handler = Some(handler);
        self.progress_ns = sys::now_ns();
        self.watch()?;
        self.arm_deadline()
    }

    /// Writes pending replies ([`write_out`]); true when all are out.
    fn flush(&mut self) -> io::Result<bool> {
        let Some(stream) = &self.stream else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let before = self.tx_sent;
        let out = write_out(stream, &self.slot.tx[..self.tx_len], &mut self.tx_sent);
        self.moved |= self.tx_sent != before;
        if !out? {
            return Ok(false);
        }
        self.tx_len = 0;
        self.tx_sent = 0;
        Ok(true)
    }

    /// Hands complete frames to the handler, oldest first, while the output has room for a
    /// reply and the event's budget lasts. Called only with the output flushed
    /// (`tx_sent == 0`).
    fn deliver(&mut self, frames: &mut usize) -> Stop {
        debug_assert_eq!(self.tx_sent, 0);
        let slot = &mut self.slot;
        let Some(handler) = self.handler.as_mut() else {
            return Stop::Drained;
        };
        while self.state != State::Closing {
            let body = match slot.rx.next() {
                Next::Incomplete => break,
                Next::Oversized(_) => return Stop::Oversize,
                Next::Frame { body, .. } => body,
            };
            if *frames == FRAMES_PER_EVENT {
                return Stop::Budget;
            }
            if slot.tx.len() - self.tx_len < HEADER + self.max_frame {
                return Stop::OutputFull;
            }
            let mut out = Output {
                buf: &mut slot.tx,
                len: &mut self.tx_len,
                max_frame: self.max_frame,
            };
            let flow = handler.frame(slot.rx.slice(body.clone()), &mut out);
            // Consumed: never delivered again, whatever comes next.
            slot.rx.consume(body.end);
            *frames += 1;
            if flow == Flow::Close {
                self.state = State::Closing;
            }
        }
        Stop::Drained
    }

    /// Whether the socket would take output now (`poll` with a zero timeout; an error
    /// counts as writable: the next `write` reports it).
    fn writable(&self) -> bool {
        self.stream
            .as_ref()
            .is_none_or(|s| net::poll_one(s.as_fd(), net::POLL_OUT, 0).map_or(true, |r| r != 0))
    }

    /// Closed abnormally: count it, unless its end was counted already (an oversized frame
    /// whose earlier replies were being flushed): one abnormal end, one count.
    fn reset(&self, ctx: &Context) -> Disposition {
        if !self.oversized {
            ctx.count(Incident::ConnectionReset, 1);
        }
        Disposition::Close
    }

    /// The socket's events in the gate for the current state: readable only in READING with
    /// nothing pending (and while lingering); otherwise writable (replies wait, or frames
    /// remain to be delivered at once).
    fn wanted(&self) -> u32 {
        let reading = self.state == State::Reading && !self.again && self.tx_len == self.tx_sent;
        if reading || self.state == State::Linger {
            sys::epoll::IN
        } else {
            sys::epoll::OUT
        }
    }

    /// Puts the socket in the gate with the events its state needs (an `epoll_ctl` only when
    /// they change).
    fn watch(&mut self) -> io::Result<()> {
        let want = self.wanted();
        if want == self.watching {
            return Ok(());
        }
        let Some(stream) = &self.stream else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let fd = stream.as_raw_fd();
        if self.watching == 0 {
            self.slot.gate.add(fd, want, GATE_STREAM)?;
        } else {
            self.slot.gate.modify(fd, want, GATE_STREAM)?;
        }
        self.watching = want;
        Ok(())
    }

    /// Whether the connection waits for the socket to take output: replies are pending, or
    /// frames wait for room (back-pressure).
    fn output_waits(&self) -> bool {
        self.state == State::Writing || self.tx_sent < self.tx_len
    }

    /// The current deadline: the drain's while lingering, the write timeout's while output
    /// waits, else the idle timeout's.
    fn deadline_ns(&self) -> u64 {
        let after = if self.state == State::Linger || self.output_waits() {
            self.write_ns
        } else {
            self.idle_ns
        };
        self.progress_ns.saturating_add(after)
    }

    /// Arms the timer for the current deadline unless it is already armed to fire no later.
    fn arm_deadline(&mut self) -> io::Result<()> {
        let due = self.deadline_ns();
        if self.armed_ns != 0 && self.armed_ns <= due {
            return Ok(());
        }
        self.slot.timer.arm(due, 0)?;
        self.armed_ns = due;
        Ok(())
    }

    /// Whether the deadline passed. Reads the timer (clearing the gate) only once it is due,
    /// so an event before then costs a clock read, not a system call.
    fn expired(&mut self, now: u64) -> bool {
        if self.armed_ns != 0 && now >= self.armed_ns {
            let _ = self.slot.timer.read();
            self.armed_ns = 0;
        }
        now >= self.deadline_ns()
    }

    /// Replies flushed after a close: shut our side down (a FIN after the last reply) and
    /// start the bounded drain.
    fn linger(&mut self, now: u64) -> Disposition {
        let shut = self.stream.as_ref().map(|s| s.shutdown(Shutdown::Write));
        if !matches!(shut, Some(Ok(()))) {
            return Disposition::Close;
        }
        self.state = State::Linger;
        self.progress_ns = now;
        self.discard()
    }

    /// LINGER: reads and drops the peer's input, at most [`READS_PER_EVENT`] reads; closes at
    /// its end of stream (or an error).
    fn discard(&mut self) -> Disposition {
        let Some(mut stream) = self.stream.as_ref() else {
            return Disposition::Close;
        };
        for _ in 0..READS_PER_EVENT {
            self.slot.rx.clear();
            match stream.read(self.slot.rx.space()) {
                Ok(0) => return Disposition::Close,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Disposition::Rearm,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Disposition::Close,
            }
        }
        Disposition::Rearm
    }

    /// The deadline passed: close, counting an idle or a write timeout (not the end of a
    /// drain: every reply was already handed to the kernel).
    fn timed_out(&self, ctx: &Context) -> Disposition {
        match self.state {
            State::Linger => {}
            _ if self.output_waits() => {
                ctx.count(Incident::StreamWriteTimeout, 1);
            }
            _ => {
                ctx.count(Incident::StreamIdleTimeout, 1);
            }
        }
        Disposition::Close
    }

    /// One event's reading, delivering and writing (the module docs' state machine).
    fn serve(&mut self, ctx: &mut Context, now: u64) -> Disposition {
        if self.state == State::Linger {
            return self.discard();
        }
        self.again = false;
        let mut reads = 0;
        let mut frames = 0;
        // Set once this event has nothing more to read or deliver; the loop then only flushes.
        let mut done = false;
        loop {
            // 1. Output first: nothing is read or delivered while replies wait.
            match self.flush() {
                Ok(true) => {
                    if self.state == State::Writing {
                        self.state = State::Reading;
                    }
                }
                Ok(false) => {
                    if self.state == State::Reading {
                        self.state = State::Writing;
                        ctx.count(Incident::StreamBackpressure, 1);
                    }
                    return Disposition::Rearm;
                }
                Err(_) => return self.reset(ctx),
            }
            if done {
                // Frames remain: armed for writability to come back at once. If the socket
                // has no room (the peer is not reading), that wait is back-pressure, as after
                // `EAGAIN`.
                if self.again && self.state == State::Reading && !self.writable() {
                    self.state = State::Writing;
                    ctx.count(Incident::StreamBackpressure, 1);
                }
                return Disposition::Rearm;
            }
            // 2. Frames already read.
            match self.deliver(&mut frames) {
                Stop::Drained => {}
                Stop::OutputFull => continue,
                Stop::Budget => {
                    self.again = true;
                    done = true;
                    continue;
                }
                Stop::Oversize => {
                    // The frames before it were answered: their replies go out first, then
                    // the connection closes as after `Flow::Close`. Its input is dropped.
                    ctx.count(Incident::FrameOversize, 1);
                    self.oversized = true;
                    self.state = State::Closing;
                    self.slot.rx.clear();
                    continue;
                }
            }
            // 3. End of the connection: once every reply is out.
            if matches!(self.state, State::Draining | State::Closing) {
                if self.tx_len > 0 {
                    continue;
                }
                if self.state == State::Draining && self.slot.rx.buffered() > 0 {
                    // The peer's stream ended inside a frame.
                    return self.reset(ctx);
                }
                if self.state == State::Draining {
                    // The peer already ended its stream: nothing more can arrive.
                    return Disposition::Close;
                }
                return self.linger(now);
            }
            // 4. Read more.
            if reads == READS_PER_EVENT {
                done = true;
                continue;
            }
            reads += 1;
            let Some(mut stream) = self.stream.as_ref() else {
                return Disposition::Close;
            };
            // Not empty: after `deliver`, `rx` holds less than one whole frame.
            match stream.read(self.slot.rx.space()) {
                Ok(0) => self.state = State::Draining,
                Ok(n) => {
                    self.slot.rx.commit(n);
                    self.moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => done = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.reset(ctx),
            }
        }
    }
}

impl<H: FrameHandler> EventHandler for Connection<H> {
    /// The slot's gate (see [`Slot::gate`]).
    fn source(&self) -> BorrowedFd<'_> {
        self.slot.gate.as_fd()
    }

    /// The readiness itself is not inspected: every path ends in a `read` or `write` that
    /// reports the socket's state (data, end of stream, `EAGAIN`, or the error). The handle
    /// waits on the slot's gate (always readable interest); which of the socket's events the
    /// gate watches follows the connection's state.
    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        let now = sys::now_ns();
        self.moved = false;
        let d = self.serve(ctx, now);
        if d == Disposition::Close {
            return d;
        }
        if self.moved && self.state != State::Linger {
            self.progress_ns = now;
        }
        if self.expired(now) {
            return self.timed_out(ctx);
        }
        if self.watch().is_err() || self.arm_deadline().is_err() {
            return self.reset(ctx);
        }
        Disposition::Rearm
    }

    /// A handler that panicked may have left its own state broken: close the connection (the
    /// panic is counted in `handler_panics`).
    fn after_panic(&mut self) -> Disposition {
        Disposition::Close
    }

    /// At shutdown: one last nonblocking attempt to write the pending replies.
    fn on_close(&mut self) {
        let _ = self.flush();
    }
}

impl<H: FrameHandler> Reusable for Connection<H> {
    /// Leaves the entry as new: the socket out of its gate (before the socket closes, so the
    /// next connection's gate never reports this one), the timer disarmed (which also clears
    /// an unread expiry), the socket closed, the state reset; the handler's clone is dropped
    /// last (user code).
    fn clear(&mut self) {
        if let Some(stream) = self.stream.take() {
            if self.watching != 0 {
                let _ = self.slot.gate.delete(stream.as_raw_fd());
            }
        }
        let _ = self.slot.timer.arm(0, 0);
        self.slot.rx.clear();
        self.tx_len = 0;
        self.tx_sent = 0;
        self.state = State::Reading;
        self.again = false;
        self.watching = 0;
        self.moved = false;
        self.oversized = false;
        self.armed_ns = 0;
        self.handler = None;
    }
}

impl<H> fmt::Debug for Connection<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field(
                "peer",
                &self.stream.as_ref().and_then(|s| s.peer_addr().ok()),
            )
            .field("state", &self.state)
            .field("rx", &self.slot.rx)
            .field("tx_pending", &(self.tx_len - self.tx_sent))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked_by_field() {
        let ok = Limits::default();
        assert!(ok.check().is_ok());
        let e = Limits {
            max_output: ok.max_frame,
            ..ok
        }
        .check()
        .unwrap_err();
        assert!(e.to_string().contains("max_output"), "{e}");
        let e = Limits {
            max_connections: 0,
            ..ok
        }
        .check()
        .unwrap_err();
        assert!(e.to_string().contains("max_connections"), "{e}");
        assert_eq!(ok.table_bytes(), 64 * (4 + 16 * 1024 + 64 * 1024));
    }

    #[test]
    fn output_writes_headers_and_refuses_what_does_not_fit() {
        let mut buf = [0u8; 16];
        let mut len = 0;
        let mut out = Output {
            buf: &mut buf,
            len: &mut len,
            max_frame: 8,
        };
        assert_eq!(out.room(), 8);
        out.send(b"abc").unwrap();
        assert_eq!(out.send(&[0; 9]), Err(SendError::TooLarge));
        assert_eq!(out.room(), 5);
        assert_eq!(out.send(&[1; 6]), Err(SendError::Full));
        out.frame(2).unwrap().copy_from_slice(b"xy");
        assert_eq!(len, 13);
        assert_eq!(&buf[..13], b"\0\0\0\x03abc\0\0\0\x02xy");
    }
}
