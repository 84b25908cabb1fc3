//! Bound handle/thread associations: many threads share **one multiplexed connection** to a
//! back-end; each sends requests and waits for *its own* replies (Schmidt et al.,
//! *Leader/Followers*, POSA2, Variants: *Bound Handle/Thread Associations*, the
//! `Bound_LF_Thread_Pool`; and *Hybrid Thread Associations*).
//!
//! # The protocol
//! A thread that wants to call the back-end
//! 1. registers the request it will send: [`BoundPool::expecting_response`] returns a fresh
//!    request id. Registration comes *before* sending, so a fast reply always finds its waiter;
//! 2. sends the request frame: [`BoundPool::send`] (writes are serialised by a
//!    priority-inheritance lock, so frames of different threads never interleave);
//! 3. [`joins`](BoundPool::join) the pool until its reply has arrived, its deadline passed or
//!    the connection failed. [`BoundPool::call`] does all three.
//!
//! In `join` a thread either **follows** (parked on its own futex: the pattern's *specific
//! notification*) or **leads**: the one leader reads frames from the connection. A reply for
//! another thread is copied into that waiter's preallocated buffer and exactly that thread is
//! woken (the *hand-off*); the leader goes on reading. When the leader's own reply arrives it
//! promotes a follower to leader (FIFO or by priority, [`BoundConfig::promotion`]) and returns.
//!
//! ```text
//!   thread A: expecting_response ─ send ─ join ─┬─ follower: park(A) ─────────── woken: reply in A's buffer ─► return
//!                                               └─ leader: epoll ─ read ─ frame for B ─ copy to B's buffer, unpark(B)
//!                                                                       └─ frame for A ─ copy, promote follower ─► return
//! ```
//!
//! Frames (both directions): `request id: u64 LE | body length: u32 LE | body`
//! ([`encode_header`], [`HEADER_LEN`]). The back-end copies the request id into its reply.
//!
//! # Hybrid associations
//! The same threads also serve **unbound** events while they wait. The pool owns a handle set
//! (the core's epoll slab, [`BoundPool::registry`]); its handles (client connections, a
//! listener, timers: any [`EventHandler`](crate::EventHandler)) are watched by the same leader, in the same epoll
//! wait as the multiplexed connection:
//! * threads with nothing to wait for call [`BoundPool::serve`]: they take turns as leader like
//!   a normal Leader/Followers lane, and while leading they also read the connection and hand
//!   off replies;
//! * a thread in `join` that leads and detects an unbound event promotes a follower and runs the
//!   handler itself, inline, then resumes waiting (its reply may have been handed to it
//!   meanwhile). So when **every** thread waits for a reply, new client requests are still
//!   served and the process does not deadlock, which matters when the back-end's replies depend
//!   on them (call-backs).
//!
//! A handler may itself call the back-end: it owns a [`Waiter`] of its own (handles are
//! one-shot, so a handler never runs on two threads at once and its waiter is always free).
//! Inline processing nests; [`BoundConfig::max_nesting`] bounds the depth (thread stacks are
//! finite). A leader at the limit does not run the handler: it defers the event to a queue and
//! wakes a follower that may run it; such threads check the queue before they lead or park.
//! Deadlock is then possible only if every thread is nested `max_nesting` deep and the replies
//! they wait for depend on the deferred events.
//!
//! # In the runtime: bound lanes
//! A pool is usually a lane of the [`Runtime`](crate::Runtime) ([`LaneConfig::bound`](crate::LaneConfig::bound),
//! TOML `[lane.bound]`): the runtime connects it, spawns its threads with the lane's
//! policy, priority, CPUs and pre-faulted stack (the same set-up as every lane's), leases
//! each thread's waiter when the lane is built, and the threads `serve` until shutdown. Work
//! reaches them through the lane's registry (the pool's handle set); callers get the pool
//! from [`Lane::bound_pool`](crate::Lane::bound_pool). A pool built with
//! [`BoundPool::new`] is served by threads of the caller's own, as below.
//!
//! # Layer
//! * **Owns:** the bound pool ([`BoundPool`], this file), its wire format and receive buffer
//!   (`frame.rs`), its hand-off state machine (`table.rs`) and a bound pool as a runtime
//!   lane's body (`lane.rs`: the connection made when the lane is built, the waiters leased
//!   then, served through the engine's `Served` trait).
//! * **May use:** `engine` (the promotion protocol, follower queue, handle set, data word,
//!   handler interface and `Served`), `sources` (only the one length-prefixed frame reader,
//!   `sources::frame`, which `Framed` shares), `observe` (its counters, [`BoundStats`], live
//!   there), `sync`, `sys` and `error`.
//! * **Must never use:** `config` (a bound lane's sizes arrive as a [`BoundConfig`] that
//!   `config` builds), `runtime`, any other source or `task`. Only `config` (the `[lane.bound]`
//!   document) and `runtime` (connecting and serving bound lanes) use it.
//!
//! # Invariants
//! The state machine is `bound/table.rs`, built on the runtime's one Leader/Followers protocol
//! (`engine/leader.rs`: leader slot, follower queue, promotion and parkers, shared with the
//! unbound lanes and extended with the hand-off of a reply to a named follower): one PI lock, no
//! system calls but the lock's and the parkers', checked by loom models (`scripts/loom.sh`;
//! in `engine/leader/loom_tests.rs`: hand-off, failure, shutdown, a timeout racing a hand-off;
//! in `table/loom_tests.rs`: reverse-order hand-off, connection close, timeout with a late
//! reply, deferral to a serving thread, three waiters).
//! * **At most one leader.** The role is taken only when vacant (under the lock) or handed by
//!   the leader to a follower it removed from the queue. The leader holds the receive buffer's
//!   lock for as long as it leads and releases it *before* naming a successor; a new leader
//!   takes it with `try_lock` and panics if it is held ("two leaders").
//! * **Each reply is delivered exactly once, to its waiter.** Ids are issued by the pool:
//!   `sequence << 16 | slot`. The leader looks the slot up in O(1) and delivers only if the
//!   slot expects exactly that sequence (`Expecting → Filling → Replied`); a second copy, or a
//!   reply for a waiter that timed out or cancelled, is *late*; an id never issued is
//!   *unknown*. Both are counted and dropped.
//! * **No lost wake-up.** A thread is unparked only after it was removed from the follower
//!   queue under the lock, and only after its new state (leader, `Replied`, `Failed`) was
//!   written under that lock; the futex parker keeps a token that arrives before `park`. A
//!   thread queues itself and parks only after checking, under the lock, that it has nothing
//!   to do. While no thread leads, no thread is queued: the next thread to arrive leads. A
//!   deadline that passes just as the thread is woken leaves the token behind: it ends the
//!   thread's next park early, and the thread checks again (a spurious wake-up, never a lost
//!   one).
//! * **Every waiter wakes on connection failure.** EOF, a read or write error, a malformed frame
//!   (a length beyond `max_body`, a header or body cut short by EOF) or [`BoundPool::shutdown`]
//!   records the first failure, marks every expected request `Failed`, unparks every queued
//!   waiter, and shuts the socket down, which wakes a leader blocked in epoll. Later
//!   `expecting_response` calls fail at once. Unbound service continues after a connection
//!   failure, until `shutdown`.
//!
//! # Real-time safety
//! Every buffer is allocated by [`BoundPool::new`] (reply buffers: `max_waiters × max_body`,
//! the receive buffer, the follower queue) and [`BoundPool::waiter`] (its handler buffers).
//! After that, `expecting_response`, `send`, `join` and `serve` do not allocate: frames are
//! written with one gathering `sendmsg`, read in bulk into the receive buffer and copied once
//! into the waiter's buffer; errors are `Copy` values. They block only in `epoll_wait` (the
//! leader), the waiter's futex (followers), `poll` for writability (a sender facing a full
//! socket buffer) and PI locks. `rt-tests/bound.rs` counts allocations on this path.
//!
//! *Not guaranteed:* which follower is promoted among equal keys beyond the documented order,
//! and whether a reply is read by its own waiter or handed off (that depends on timing).
//!
//! # Examples
//! ```no_run
//! use lfrt::bound::{BoundConfig, BoundPool};
//! use std::net::TcpStream;
//! use std::time::{Duration, Instant};
//!
//! let conn = TcpStream::connect("127.0.0.1:7100")?;
//! let pool = BoundPool::new(conn, BoundConfig::default())?;
//! let threads: Vec<_> = (0..4)
//!     .map(|_| {
//!         let pool = pool.clone();
//!         std::thread::spawn(move || {
//!             let mut w = pool.waiter().expect("a free waiter slot"); // once per thread
//!             for _ in 0..1000 {
//!                 let deadline = Some(Instant::now() + Duration::from_secs(1));
//!                 let reply = pool.call(&mut w, b"balance?", deadline).expect("reply");
//!                 assert!(!reply.is_empty());
//!             }
//!         })
//!     })
//!     .collect();
//! for t in threads {
//!     t.join().unwrap();
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod frame;
pub(crate) mod lane;
mod table;

pub use crate::engine::follower_queue::Promotion;
pub use crate::observe::metrics::BoundStats;
pub use frame::{decode_header, encode_header, HEADER_LEN};

use crate::engine::handle_set::{Token, Wait};
use crate::engine::handler::{self, Context, Dispatched, Event, Handles, Registry};
use crate::engine::slot::ThreadSlot;
use crate::engine::word::Word;
use crate::error::Error;
use crate::sync::pi_mutex::{PiMutex, PiMutexGuard};
use crate::sys::{self, epoll, errno, net};
use frame::{Next, Receiver};

/// The leader's receive buffer, for the fuzz targets in `fuzz/` only: it exists when built with
/// `--cfg fuzzing` (as `cargo fuzz` builds) and is never part of the public API.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    use super::frame::{Next, Receiver};

    /// What [`read`] delivered.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Outcome {
        /// Complete frames, in order: request id and body.
        pub frames: Vec<(u64, Vec<u8>)>,
        /// The body length of the oversized header that stopped the reading, if one did.
        pub oversized: Option<u32>,
        /// Bytes buffered at the end (a partial frame).
        pub buffered: usize,
    }

    /// Feeds `chunks` to a receive buffer of `max_body` as the leader's reads do: each read
    /// takes what fits the free space (the rest of the chunk is read next), then every complete
    /// frame is delivered and consumed, as `drain` does.
    pub fn read(max_body: usize, chunks: &[&[u8]]) -> Outcome {
        let mut rd = Receiver::new(max_body).frames;
        let mut out = Outcome {
            frames: Vec::new(),
            oversized: None,
            buffered: 0,
        };
        for chunk in chunks {
            let mut chunk = *chunk;
            while !chunk.is_empty() {
                let space = rd.space();
                let n = space.len().min(chunk.len());
                space[..n].copy_from_slice(&chunk[..n]);
                rd.commit(n);
                chunk = &chunk[n..];
                loop {
                    match rd.next() {
                        Next::Frame { tag: id, body } => {
                            out.frames.push((id, rd.slice(body.clone()).to_vec()));
                            rd.consume(body.end);
                        }
                        Next::Incomplete => break,
                        Next::Oversized(len) => {
                            out.oversized = Some(len);
                            out.buffered = rd.buffered();
                            return out;
                        }
                    }
                }
            }
        }
        out.buffered = rd.buffered();
        out
    }
}
use std::cell::Cell;
use std::fmt;
use std::io::{self, IoSlice};
use std::marker::PhantomData;
use std::net::{Shutdown, TcpStream};
use std::ops::Deref;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;
use table::{Ready, Step, Table, Target, Turn};

/// The most waiters (slots) one pool may have: a request id names its slot in 16 bits.
pub const MAX_WAITERS: usize = 1 << table::SLOT_BITS;

/// The largest `max_body` a pool accepts (16 MiB; the header's length field is 32 bits).
pub const MAX_BODY: usize = 16 << 20;

thread_local! {
    /// How many unbound handlers this thread is running, nested inside each other (a handler's
    /// `join` may run another handler inline). `const`, no destructor: reading never allocates.
    static NESTING: Cell<u32> = const { Cell::new(0) };
}

fn nesting() -> u32 {
    NESTING.with(Cell::get)
}

thread_local! {
    /// `(lane index, thread index, priority)` of a runtime bound lane's thread; `None` on
    /// other threads. `const`, no destructor.
    static RUNTIME_THREAD: Cell<Option<(u16, u16, u8)>> = const { Cell::new(None) };
}

thread_local! {
    /// A runtime bound lane's thread: its lane, and its index there, so that its outermost
    /// dispatch is stamped in its `ThreadSlot` (`begin_dispatch`, `end_dispatch`) as a
    /// Leader/Followers thread's is, and a shutdown can name a handler that does not return.
    /// Set once at the thread's set-up (one `Arc` clone, off the dispatch path).
    static RUNTIME_SLOT: std::cell::OnceCell<(Arc<crate::engine::lane::LanePool>, usize)> =
        const { std::cell::OnceCell::new() };
}

/// Marks the calling thread as thread `thread` (at `priority`) of the runtime's bound lane
/// `lane`: every handler it runs, also inline inside a handler's `join` (where the handler's
/// own waiter's [`Context`] is used), is told that lane, thread and priority, and its
/// outermost dispatch is stamped in its slot of `lane`.
pub(crate) fn set_runtime_thread(
    lane: &Arc<crate::engine::lane::LanePool>,
    thread: u16,
    priority: u8,
) {
    RUNTIME_THREAD.with(|c| c.set(Some((lane.index, thread, priority))));
    RUNTIME_SLOT.with(|c| {
        let _ = c.set((lane.clone(), usize::from(thread)));
    });
}

/// Runs `f` on the calling runtime thread's lane and slot ([`set_runtime_thread`]); nothing
/// on other threads.
fn with_runtime_slot(f: impl FnOnce(&crate::engine::lane::LanePool, &ThreadSlot)) {
    RUNTIME_SLOT.with(|c| {
        if let Some((g, i)) = c.get() {
            f(g, &g.threads[*i]);
        }
    });
}

/// Sizes and policies of a [`BoundPool`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundConfig {
    /// Waiter slots: one per thread that calls or serves, plus one per handler that calls the
    /// back-end. 1..=[`MAX_WAITERS`].
    pub max_waiters: usize,
    /// Largest reply body (bytes); each slot preallocates a buffer this big. A longer reply
    /// closes the connection. 1..=[`MAX_BODY`].
    pub max_body: usize,
    /// Which waiting thread leads next when the leader leaves.
    pub promotion: Promotion,
    /// Capacity of the unbound handle table (hybrid associations); 0 for a purely bound pool.
    pub max_handles: usize,
    /// Size of each waiter's handler buffers ([`Context::buffer`] and `scratch`), used when its
    /// thread runs an unbound handler.
    pub buffer_bytes: usize,
    /// How deeply unbound handlers may nest on one thread (a handler's `join` running another
    /// handler inline); at least 1. See the module docs.
    pub max_nesting: u32,
}

impl Default for BoundConfig {
    /// 64 waiters, 4 KiB replies, FIFO promotion, 64 handles, 4 KiB handler buffers, nesting 2.
    fn default() -> BoundConfig {
        BoundConfig {
            max_waiters: 64,
            max_body: 4096,
            promotion: Promotion::Fifo,
            max_handles: 64,
            buffer_bytes: 4096,
            max_nesting: 2,
        }
    }
}

impl BoundConfig {
    fn validate(&self) -> Result<(), Error> {
        match self.invalid() {
            Some((field, message)) => Err(Error::config(format!("bound.{field}"), message)),
            None => Ok(()),
        }
    }

    /// The first out-of-range setting: `(field, why)`. The one range check of both
    /// [`BoundPool::new`] and the configuration of a bound lane.
    pub(crate) fn invalid(&self) -> Option<(&'static str, String)> {
        if self.max_waiters == 0 || self.max_waiters > MAX_WAITERS {
            return Some((
                "max_waiters",
                format!("{} is not in 1..={MAX_WAITERS}", self.max_waiters),
            ));
        }
        if self.max_body == 0 || self.max_body > MAX_BODY {
            return Some((
                "max_body",
                format!("{} is not in 1..={MAX_BODY}", self.max_body),
            ));
        }
        if self.max_nesting == 0 {
            return Some(("max_nesting", "must be at least 1".into()));
        }
        if self.promotion == Promotion::Concurrent {
            return Some((
                "promotion",
                "\"concurrent\" does not apply to a bound pool: its threads share one \
                 connection, which only the leader reads; use \"fifo\", \"lifo\" or \
                 \"priority\""
                    .into(),
            ));
        }
        None
    }

    /// Bytes [`BoundPool::new`] allocates: a reply buffer per waiter slot and the receive
    /// buffer (the handle table is counted with the lane's, waiters' handler buffers with
    /// their threads).
    pub(crate) fn allocated_bytes(&self) -> u64 {
        (self.max_waiters as u64)
            .saturating_mul(self.max_body as u64)
            .saturating_add(Receiver::allocated_bytes(self.max_body) as u64)
    }
}

/// Why a bound call did not produce a reply. `Copy`, never allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BoundError {
    /// The deadline passed before the reply arrived. The request stays registered as expired:
    /// if its reply still comes it is dropped (and counted as late).
    Timeout,
    /// The back-end closed the connection (at a frame boundary).
    Closed,
    /// The back-end closed the connection in the middle of a frame (`have` bytes of it
    /// arrived): a truncated header or body.
    Truncated {
        /// Bytes of the incomplete frame that arrived.
        have: usize,
    },
    /// A reply frame announced a body longer than the pool's `max_body`. The connection was
    /// closed: the stream cannot be re-synchronised.
    Oversized {
        /// The announced length.
        len: u32,
        /// The pool's `max_body`.
        max: usize,
    },
    /// Reading or writing the connection failed with this `errno`.
    Broken {
        /// The OS error code.
        errno: i32,
    },
    /// A send timed out after part of a frame was written; the stream can no longer be framed,
    /// so the connection was closed.
    Stalled,
    /// The pool was shut down.
    Shutdown,
    /// `join` without a registered request (`expecting_response` was not called, or the reply
    /// was already collected).
    NotExpecting,
    /// The waiter already has a request registered (`expecting_response` twice, or `serve`
    /// with a request pending).
    Busy,
    /// The waiter belongs to another pool.
    WrongPool,
    /// Every waiter slot is in use (`max_waiters`).
    NoWaiter,
    /// A request body longer than `u32::MAX` bytes.
    TooLarge,
}

impl fmt::Display for BoundError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BoundError::Timeout => f.write_str("no reply before the deadline"),
            BoundError::Closed => f.write_str("the back-end closed the connection"),
            BoundError::Truncated { have } => {
                write!(f, "the back-end closed the connection in the middle of a frame ({have} bytes of it arrived)")
            }
            BoundError::Oversized { len, max } => {
                write!(
                    f,
                    "malformed reply: body length {len} exceeds max_body {max}; connection closed"
                )
            }
            BoundError::Broken { errno } => write!(
                f,
                "connection error: {}",
                io::Error::from_raw_os_error(errno)
            ),
            BoundError::Stalled => {
                f.write_str("send timed out in the middle of a frame; connection closed")
            }
            BoundError::Shutdown => f.write_str("the bound pool was shut down"),
            BoundError::NotExpecting => {
                f.write_str("join without a registered request (call expecting_response first)")
            }
            BoundError::Busy => f.write_str("the waiter already has a request registered"),
            BoundError::WrongPool => f.write_str("the waiter belongs to another bound pool"),
            BoundError::NoWaiter => f.write_str("all waiter slots are in use (raise max_waiters)"),
            BoundError::TooLarge => f.write_str("request body longer than u32::MAX bytes"),
        }
    }
}

impl std::error::Error for BoundError {}

struct Inner {
    cfg: BoundConfig,
    conn: TcpStream,
    table: Table,
    /// The receive buffer; held by the leader for as long as it leads.
    reader: PiMutex<Receiver>,
    /// One reply buffer per slot (`max_body` bytes).
    bufs: Box<[PiMutex<Box<[u8]>>]>,
    /// Serialises writers so frames never interleave.
    send_lock: PiMutex<()>,
    handles: Arc<Handles>,
    /// [`BoundStats::dispatched`] and [`BoundStats::panics`], counted outside the lock.
    dispatched: AtomicU64,
    panics: AtomicU64,
}

/// A lane of threads sharing one multiplexed connection (and, optionally, a set of unbound
/// handles). Cheap to clone: clones share the pool.
///
/// See the [module docs](self) for the protocol and its invariants.
#[derive(Clone)]
pub struct BoundPool {
    inner: Arc<Inner>,
}

impl fmt::Debug for BoundPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("BoundPool { .. }")
    }
}

/// One waiter's identity in a pool: a slot with a preallocated reply buffer, a parker, and the
/// buffers handed to unbound handlers it runs. Obtain it once per thread (or per handler that
/// calls the back-end) with [`BoundPool::waiter`]; dropping it frees the slot.
pub struct Waiter {
    pool: Arc<Inner>,
    slot: u16,
    priority: u8,
    ctx: Context,
}

impl fmt::Debug for Waiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("slot", &self.slot)
            .field("priority", &self.priority)
            .finish()
    }
}

impl Waiter {
    /// The slot index (the low 16 bits of every request id this waiter registers).
    pub fn slot(&self) -> usize {
        self.slot as usize
    }

    /// The priority that orders this waiter among followers ([`Promotion::Priority`]).
    pub fn priority(&self) -> u8 {
        self.priority
    }

    /// Sets the priority that orders this waiter among followers (typically its thread's
    /// SCHED_FIFO priority).
    pub fn set_priority(&mut self, priority: u8) {
        self.priority = priority;
        self.ctx.priority = priority;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.pool.table.release(self.slot);
    }
}

/// A reply body, borrowed from the waiter's preallocated buffer until dropped.
///
/// Not `Send`: it holds the buffer's priority-inheritance lock, which only the locking thread
/// may release.
pub struct Reply<'a> {
    buf: PiMutexGuard<'a, Box<[u8]>>,
    len: usize,
    _not_send: PhantomData<*const ()>,
}

impl Deref for Reply<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl fmt::Debug for Reply<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reply").field("len", &self.len).finish()
    }
}

/// `CLOCK_MONOTONIC` ns of an `Instant` (std's `Instant` uses the same clock on Linux; the
/// difference is taken against "now" so only the distance matters).
fn instant_ns(d: Instant) -> u64 {
    let (now_i, now) = (Instant::now(), sys::now_ns());
    match d.checked_duration_since(now_i) {
        Some(left) => now.saturating_add(left.as_nanos().min(u128::from(u64::MAX)) as u64),
        None => now.saturating_sub((now_i - d).as_nanos().min(u128::from(u64::MAX)) as u64),
    }
}

/// Milliseconds until `deadline` for epoll/poll, rounded up (a truncated sub-millisecond rest
/// would become a busy zero timeout); -1 without a deadline.
fn ms_until(deadline: Option<u64>) -> i32 {
    match deadline {
        None => -1,
        Some(d) => {
            let now = sys::now_ns();
            if d <= now {
                0
            } else {
                (d - now).div_ceil(1_000_000).min(i32::MAX as u64) as i32
            }
        }
    }
}

impl BoundPool {
    /// A pool over the connected stream `conn` (made nonblocking, Nagle off). Allocates every
    /// buffer the pool will use.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration; [`Error::Io`] if the socket cannot be
    /// configured or the epoll instance cannot be created.
    pub fn new(conn: TcpStream, cfg: BoundConfig) -> Result<BoundPool, Error> {
        cfg.validate()?;
        conn.set_nonblocking(true).map_err(|e| Error::Io {
            context: "making the bound connection nonblocking",
            source: e,
        })?;
        conn.set_nodelay(true).map_err(|e| Error::Io {
            context: "disabling Nagle on the bound connection",
            source: e,
        })?;
        let handles = Handles::new(cfg.max_handles).map_err(|e| Error::Io {
            context: "creating the bound pool's epoll instance",
            source: e,
        })?;
        handles
            .watch(
                conn.as_raw_fd(),
                epoll::IN | epoll::RDHUP,
                Word::BoundConnection,
            )
            .map_err(|e| Error::Io {
                context: "adding the bound connection to epoll",
                source: e,
            })?;
        let bufs = (0..cfg.max_waiters)
            .map(|_| {
                let mut b = vec![0u8; cfg.max_body].into_boxed_slice();
                sys::mem::prefault(&mut b);
                PiMutex::new(b)
            })
            .collect();
        let inner = Inner {
            table: Table::new(cfg.max_waiters, cfg.max_handles.max(1), cfg.promotion),
            reader: PiMutex::new(Receiver::new(cfg.max_body)),
            bufs,
            send_lock: PiMutex::new(()),
            handles: Arc::new(handles),
            dispatched: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            conn,
            cfg,
        };
        Ok(BoundPool {
            inner: Arc::new(inner),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &BoundConfig {
        &self.inner.cfg
    }

    /// The registry of the pool's unbound handles (hybrid associations): handlers registered
    /// here run on threads in [`serve`](Self::serve) or inline in [`join`](Self::join).
    pub fn registry(&self) -> Registry {
        Registry {
            set: self.inner.handles.clone(),
        }
    }

    /// Leases a waiter slot, with priority 0. Allocates and pre-faults its handler
    /// [`Context`] (`(DATAGRAM_BATCH + 2) × buffer_bytes`, see [`crate::DATAGRAM_BATCH`]): call
    /// it at set-up (per thread) or at connection accept (per handler), not per request.
    ///
    /// # Errors
    /// [`BoundError::NoWaiter`] when all `max_waiters` slots are leased.
    pub fn waiter(&self) -> Result<Waiter, BoundError> {
        let slot = self.inner.table.acquire().ok_or(BoundError::NoWaiter)?;
        let n = self.inner.cfg.buffer_bytes;
        let ctx = Context::new(n, 0, slot, 0, 0, self.registry());
        Ok(Waiter {
            pool: self.inner.clone(),
            slot,
            priority: 0,
            ctx,
        })
    }

    fn check(&self, w: &Waiter) -> Result<(), BoundError> {
        if Arc::ptr_eq(&self.inner, &w.pool) {
            Ok(())
        } else {
            Err(BoundError::WrongPool)
        }
    }

    /// Registers the next request of `w` and returns its id, to be sent in the request's
    /// header. Must be called *before* sending, so that the reply always finds its waiter.
    ///
    /// # Errors
    /// [`BoundError::Busy`] if `w` already has a request registered; the connection's failure
    /// (e.g. [`BoundError::Closed`]) once it failed.
    pub fn expecting_response(&self, w: &mut Waiter) -> Result<u64, BoundError> {
        self.check(w)?;
        self.inner.table.expect(w.slot)
    }

    /// Abandons the registered request of `w` (e.g. its send failed). A reply that still
    /// arrives is dropped as late.
    pub fn cancel(&self, w: &mut Waiter) {
        if self.check(w).is_ok() {
            self.inner.table.cancel(w.slot);
        }
    }

    /// Sends one request frame (`id`, `body`) on the shared connection. Concurrent senders are
    /// serialised (priority-inheritance lock). Waits for socket buffer space until `deadline`.
    ///
    /// # Errors
    /// [`BoundError::Timeout`] if nothing could be written before the deadline (the connection
    /// stays usable); [`BoundError::Stalled`] if the deadline passed in the middle of the frame
    /// (the connection is closed); the connection's failure if it failed; [`BoundError::TooLarge`]
    /// for a body beyond `u32::MAX`.
    ///
    /// # Real-time safety
    /// No allocation: one gathering `sendmsg(MSG_NOSIGNAL | MSG_DONTWAIT)` per attempt.
    pub fn send(&self, id: u64, body: &[u8], deadline: Option<Instant>) -> Result<(), BoundError> {
        let len = u32::try_from(body.len()).map_err(|_| BoundError::TooLarge)?;
        if let Some(f) = self.inner.table.failure() {
            return Err(f);
        }
        let header = encode_header(id, len);
        let deadline = deadline.map(instant_ns);
        let fd = self.inner.conn.as_fd();
        let total = HEADER_LEN + body.len();
        let _g = self.inner.send_lock.lock();
        let mut slices = [IoSlice::new(&header), IoSlice::new(body)];
        let mut rest: &mut [IoSlice<'_>] = &mut slices;
        let mut sent = 0;
        while sent < total {
            match net::send_vectored(fd, rest) {
                Ok(n) => {
                    sent += n;
                    IoSlice::advance_slices(&mut rest, n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match net::poll_one(fd, net::POLL_OUT, ms_until(deadline)) {
                        Ok(0) if deadline.is_some_and(|d| sys::now_ns() >= d) => {
                            if sent == 0 {
                                return Err(BoundError::Timeout);
                            }
                            return Err(self.fail(BoundError::Stalled));
                        }
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(self.fail(BoundError::Broken { errno: errno(&e) })),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(BoundError::Broken { errno: errno(&e) })),
            }
        }
        Ok(())
    }

    /// Waits until the reply to the request registered on `w` has arrived, as a follower or as
    /// the leader (see the module docs), and returns its body. While waiting, the thread may
    /// run unbound handlers inline (hybrid associations).
    ///
    /// # Errors
    /// [`BoundError::Timeout`] when `deadline` passes first (a reply being copied at that
    /// moment is still returned); the connection's failure ([`BoundError::Closed`],
    /// [`BoundError::Oversized`], …); [`BoundError::NotExpecting`] without a registered
    /// request; [`BoundError::WrongPool`].
    ///
    /// # Real-time safety
    /// No allocation, no formatting. Blocks in `epoll_wait` (leader), the waiter's futex
    /// (follower) or PI locks, and runs unbound handlers if any are registered.
    pub fn join<'w>(
        &self,
        w: &'w mut Waiter,
        deadline: Option<Instant>,
    ) -> Result<Reply<'w>, BoundError> {
        self.check(w)?;
        let t = self.turn(w, true, deadline);
        match self.run(&t, &mut w.ctx) {
            Step::Replied(len) => {
                let w: &'w Waiter = w;
                Ok(Reply {
                    buf: w.pool.bufs[w.slot as usize].lock(),
                    len,
                    _not_send: PhantomData,
                })
            }
            Step::Failed(e) => Err(e),
            Step::TimedOut => Err(BoundError::Timeout),
            s => unreachable!("join ended with {s:?}"),
        }
    }

    /// [`expecting_response`](Self::expecting_response), [`send`](Self::send) and
    /// [`join`](Self::join) in one: a two-way call to the back-end.
    ///
    /// # Errors
    /// Those of the three steps; a failed send cancels the registration.
    pub fn call<'w>(
        &self,
        w: &'w mut Waiter,
        body: &[u8],
        deadline: Option<Instant>,
    ) -> Result<Reply<'w>, BoundError> {
        let id = self.expecting_response(w)?;
        if let Err(e) = self.send(id, body, deadline) {
            self.cancel(w);
            return Err(e);
        }
        self.join(w, deadline)
    }

    /// Takes part in the pool without a request of its own: leads (reading the connection and
    /// handing off replies, detecting unbound events) or follows, and runs unbound handlers,
    /// until [`shutdown`](Self::shutdown) (`Ok`) or `deadline` (`Err(Timeout)`).
    ///
    /// # Errors
    /// [`BoundError::Timeout`], [`BoundError::Busy`] if `w` has a request registered,
    /// [`BoundError::WrongPool`].
    pub fn serve(&self, w: &mut Waiter, deadline: Option<Instant>) -> Result<(), BoundError> {
        self.check(w)?;
        if !self.inner.table.is_idle(w.slot) {
            return Err(BoundError::Busy);
        }
        let t = self.turn(w, false, deadline);
        match self.run(&t, &mut w.ctx) {
            Step::Shutdown => Ok(()),
            Step::TimedOut => Err(BoundError::Timeout),
            Step::Failed(e) => Err(e),
            s => unreachable!("serve ended with {s:?}"),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> BoundStats {
        BoundStats {
            dispatched: self.inner.dispatched.load(Relaxed),
            panics: self.inner.panics.load(Relaxed),
            ..self.inner.table.stats()
        }
    }

    /// The handle set of the unbound handles, which a bound lane of the runtime shares.
    pub(crate) fn handles(&self) -> &Arc<Handles> {
        &self.inner.handles
    }

    /// The connection's failure, if it failed (or the pool was shut down).
    pub fn failure(&self) -> Option<BoundError> {
        self.inner.table.failure()
    }

    /// `(a thread leads, threads parked as followers, deferred unbound events)`: a racy
    /// snapshot for tests and metrics.
    pub fn snapshot(&self) -> (bool, usize, usize) {
        self.inner.table.snapshot()
    }

    /// Stops the pool: pending and future calls fail with [`BoundError::Shutdown`], every
    /// waiting thread wakes, `serve` returns `Ok`, and the connection is shut down. Does not
    /// wait. Idempotent.
    pub fn shutdown(&self) {
        self.inner.table.shutdown();
        self.inner.handles.wake_for_shutdown();
        let _ = self.inner.conn.shutdown(Shutdown::Both);
    }

    /// [`shutdown`](Self::shutdown), then removes every unbound handle and drops its handler
    /// (waiting for a handler that is running) after its [`EventHandler::on_close`](crate::EventHandler::on_close). Handlers often hold a clone of the pool and a
    /// waiter; dropping them breaks that reference cycle. Call it after the threads serving the
    /// pool returned, never from inside a handler.
    pub fn close(&self) {
        self.shutdown();
        crate::engine::handler::close_all(&self.inner.handles);
    }

    /// Records a connection failure (the first reason sticks) and shuts the socket down, which
    /// wakes a leader blocked in epoll. Returns the failure in effect.
    fn fail(&self, reason: BoundError) -> BoundError {
        self.inner.table.fail(reason);
        let _ = self.inner.conn.shutdown(Shutdown::Both);
        self.inner.table.failure().unwrap_or(reason)
    }

    /// The thread's loop: wait/lead until done, running unbound handlers on the way.
    /// `w`'s turn in the pool: waiting for its own reply (`bound`, `join`) or serving only.
    fn turn(&self, w: &Waiter, bound: bool, deadline: Option<Instant>) -> Turn {
        Turn {
            slot: w.slot,
            priority: w.priority,
            bound,
            eligible: nesting() < self.inner.cfg.max_nesting,
            deadline: deadline.map(instant_ns),
        }
    }

    fn run(&self, t: &Turn, ctx: &mut Context) -> Step {
        loop {
            let step = match self.inner.table.next_step(t) {
                Step::Lead => self.lead(t),
                s => s,
            };
            match step {
                Step::Process(ev) => self.dispatch(ev, ctx),
                s => return s,
            }
        }
    }

    /// The leader's loop (steps (a)–(c) of the pattern's bound `join`): deliver complete frames,
    /// check whether to leave, wait on the connection and the unbound handles.
    fn lead(&self, t: &Turn) -> Step {
        let inner = &*self.inner;
        let mut rd = inner
            .reader
            .try_lock()
            .expect("inconsistent bound pool: two leaders (the receive buffer is held)");
        loop {
            self.drain(&mut rd, t.slot);
            let failed;
            (rd, failed) = match inner.table.lead_settle(t, rd) {
                Ok(step) => return step,
                Err(x) => x,
            };
            if failed && rd.watched {
                // A failed connection stays readable (EOF) forever: stop waiting on it.
                let _ = inner.handles.unwatch(inner.conn.as_raw_fd());
                rd.watched = false;
                rd.frames.clear();
            }
            match inner.handles.wait_timeout(ms_until(t.deadline)) {
                Ok(Wait::BoundConnection) => self.fill(&mut rd),
                Ok(Wait::Event { token, readiness }) => {
                    let ev = Ready {
                        token: token.raw(),
                        readiness,
                        woke_ns: sys::now_ns(),
                    };
                    if t.eligible {
                        return inner.table.lead_process(t, ev, rd);
                    }
                    inner.table.defer(ev);
                }
                Ok(Wait::Shutdown) => inner.table.shutdown(),
                // Validation refuses borrowing for bound lanes: no link is ever in this set.
                Ok(Wait::Link { .. }) => unreachable!("a bound pool's set has no borrowing link"),
                Ok(Wait::Interrupted) => {}
                Err(e) => {
                    // The epoll instance itself failed: nothing can be waited on any more.
                    self.fail(BoundError::Broken { errno: errno(&e) });
                    inner.table.shutdown();
                }
            }
        }
    }

    /// Delivers every complete frame in the receive buffer.
    fn drain(&self, rd: &mut Receiver, me: u16) {
        let inner = &*self.inner;
        let rd = &mut rd.frames;
        loop {
            match rd.next() {
                Next::Frame { tag: id, body } => {
                    if let Target::Slot(s) = inner.table.deliver_begin(id) {
                        let len = body.len();
                        inner.bufs[s as usize].lock()[..len]
                            .copy_from_slice(rd.slice(body.clone()));
                        inner.table.deliver_end(s, len, me);
                    }
                    rd.consume(body.end);
                }
                Next::Incomplete => return,
                Next::Oversized(len) => {
                    self.fail(BoundError::Oversized {
                        len,
                        max: inner.cfg.max_body,
                    });
                    rd.clear();
                    return;
                }
            }
        }
    }

    /// Reads what the connection has into the receive buffer.
    fn fill(&self, rd: &mut Receiver) {
        if !rd.watched {
            return;
        }
        let rd = &mut rd.frames;
        match net::recv_nonblocking(self.inner.conn.as_fd(), rd.space()) {
            Ok(0) => {
                let have = rd.buffered();
                self.fail(if have == 0 {
                    BoundError::Closed
                } else {
                    BoundError::Truncated { have }
                });
            }
            Ok(n) => rd.commit(n),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => {
                self.fail(BoundError::Broken { errno: errno(&e) });
            }
        }
    }

    /// Runs the handler of an unbound event on this thread (the thread is not the leader).
    fn dispatch(&self, ev: Ready, ctx: &mut Context) {
        ctx.tid = sys::gettid();
        if let Some((lane, thread, priority)) = RUNTIME_THREAD.with(Cell::get) {
            (ctx.lane, ctx.thread, ctx.priority) = (lane, u32::from(thread), priority);
        }
        ctx.origin_ns = 0;
        ctx.missed_periods = 0;
        let event = Event {
            token: Token::from_raw(ev.token),
            readiness: ev.readiness,
            woke_ns: ev.woke_ns,
        };
        // Only the outermost dispatch is stamped: a nested one (inside a `join`) ends while
        // the outer handler still runs.
        let outermost = nesting() == 0;
        if outermost {
            with_runtime_slot(|_, slot| slot.begin_dispatch(ev.token, sys::now_ns().max(1)));
        }
        NESTING.with(|n| n.set(n.get() + 1));
        // No second run in place: a report that came meanwhile is re-checked by the kernel.
        let outcome = handler::dispatch(&self.inner.handles, &event, ctx, false);
        NESTING.with(|n| n.set(n.get() - 1));
        if outermost {
            with_runtime_slot(|g, slot| slot.end_dispatch(&g.counters, &g.spec.name));
        }
        match outcome {
            Dispatched::Stale => {}
            Dispatched::Panicked => {
                self.inner.dispatched.fetch_add(1, Relaxed);
                self.inner.panics.fetch_add(1, Relaxed);
            }
            Dispatched::Handled { .. } | Dispatched::Closed => {
                self.inner.dispatched.fetch_add(1, Relaxed);
            }
        }
    }
}
