//! The event handler interface and what a handler sees: the event and its thread's context.

pub use crate::engine::datagram::{Datagram, DatagramBatch};
use crate::engine::handle_set::{HandleSet, Next, Ran, Token};
use crate::error::Error;
use crate::observe::metrics::Incident;
use crate::sys::{epoll, mem};
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

/// Which readiness a handle is registered for.
///
/// # Examples
/// A handler that waits for both directions:
/// ```
/// use lfrt::{Context, Disposition, Event, EventHandler, Interest};
/// use std::net::TcpStream;
/// use std::os::fd::{AsFd, BorrowedFd};
/// struct Conn(TcpStream);
/// impl EventHandler for Conn {
///     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
///     fn interest(&self) -> Interest { Interest::READABLE.add(Interest::WRITABLE) }
///     fn handle(&mut self, _: &Event, _: &mut Context) -> Disposition { Disposition::Rearm }
/// }
/// assert_ne!(Interest::READABLE, Interest::READABLE.add(Interest::WRITABLE));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interest(u32);

impl Interest {
    /// Readable (`EPOLLIN`), plus peer hang-up.
    pub const READABLE: Interest = Interest(epoll::IN | epoll::RDHUP);
    /// Writable (`EPOLLOUT`).
    pub const WRITABLE: Interest = Interest(epoll::OUT);

    /// Both interests.
    pub const fn add(self, other: Interest) -> Interest {
        Interest(self.0 | other.0)
    }

    pub(crate) fn bits(self) -> u32 {
        self.0
    }
}

/// One event, as the leader detected it.
///
/// # Examples
/// ```
/// use lfrt::{Context, Disposition, Event, EventHandler};
/// use std::net::TcpStream;
/// use std::os::fd::{AsFd, BorrowedFd};
/// struct Conn(TcpStream);
/// impl EventHandler for Conn {
///     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
///     fn handle(&mut self, ev: &Event, _: &mut Context) -> Disposition {
///         if ev.is_closed() || ev.is_error() {
///             return Disposition::Close; // drops the stream, closing the fd
///         }
///         if ev.is_readable() { /* read until WouldBlock */ }
///         Disposition::Rearm
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub(crate) token: Token,
    pub(crate) readiness: u32,
    pub(crate) woke_ns: u64,
}

impl Event {
    /// The handle this event belongs to.
    pub fn token(&self) -> Token {
        self.token
    }
    /// Data (or a connection, or a timer expiry) can be read without blocking.
    pub fn is_readable(&self) -> bool {
        self.readiness & epoll::IN != 0
    }
    /// Can be written without blocking.
    pub fn is_writable(&self) -> bool {
        self.readiness & epoll::OUT != 0
    }
    /// The peer closed (hang-up or read half closed).
    pub fn is_closed(&self) -> bool {
        self.readiness & (epoll::HUP | epoll::RDHUP) != 0
    }
    /// An error is pending on the handle.
    pub fn is_error(&self) -> bool {
        self.readiness & epoll::ERR != 0
    }
    /// When the leader's wait returned with this event (`CLOCK_MONOTONIC` ns).
    pub fn woke_ns(&self) -> u64 {
        self.woke_ns
    }
}

/// What happens to the handle after its handler returns.
///
/// # Examples
/// ```
/// use lfrt::{Context, Disposition, Event, EventHandler};
/// use std::io::Read;
/// use std::net::TcpStream;
/// use std::os::fd::{AsFd, BorrowedFd};
/// struct Sink(TcpStream);
/// impl EventHandler for Sink {
///     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
///     fn handle(&mut self, _: &Event, ctx: &mut Context) -> Disposition {
///         loop {
///             match self.0.read(ctx.buffer()) {
///                 Ok(0) => return Disposition::Close, // the peer closed
///                 Ok(_) => continue,
///                 Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
///                     return Disposition::Rearm // wait for more
///                 }
///                 Err(_) => return Disposition::Close,
///             }
///         }
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Disposition {
    /// Keep the handle for its next event. It stays registered (edge-triggered): it is
    /// reported again when new readiness arrives. If the handler said it read its source until
    /// it would block ([`Context::set_drained`]; the runtime's datagram batches say it
    /// themselves), that costs no system call; otherwise the kernel checks the source once
    /// more (`epoll_ctl`), and reports it again at once if input is left.
    Rearm,
    /// Remove the handle from the lane and drop its handler (closing its fd).
    Close,
}

/// Application code run for each event of one handle (the pattern's concrete event handler).
///
/// Exactly one thread at a time runs a given handler (the thread that claimed the handle's
/// report; a report that arrives while it runs gives it one more run afterwards), so it needs
/// no locking for its own state.
///
/// # Runs with nothing to read
/// Handles are edge-triggered: the kernel reports a handle when new readiness arrives, and a
/// report can reach a thread after an earlier run of the same handler has already read what it
/// was for. The handler then runs and finds nothing (`WouldBlock`, an empty timerfd or
/// eventfd): treat that as nothing to do. Each readiness the kernel reports causes at most one
/// such run; a handler never runs for another handle's event.
///
/// # Real-time safety
/// `handle` runs on a pool thread at its lane's SCHED_FIFO priority. It should be short and
/// bounded, must not block (sockets are nonblocking: read until `WouldBlock`), and should use
/// the [`Context`] buffers instead of allocating. lfrt counts allocations and page faults on
/// pool threads and reports them (`pool_allocations`, `pool_minor_faults`).
///
/// # Examples
/// A handler on a [`Notifier`](crate::Notifier), registered with a lane:
/// ```
/// use lfrt::{Context, Disposition, Event, EventHandler, LaneConfig, Notifier, Policy};
/// use lfrt::{Runtime, RuntimeConfig};
/// use std::os::fd::{AsFd, BorrowedFd};
/// struct Wakeups(Notifier, u64);
/// impl EventHandler for Wakeups {
///     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
///     fn handle(&mut self, _: &Event, _: &mut Context) -> Disposition {
///         self.1 += self.0.take().unwrap_or(0);
///         Disposition::Rearm
///     }
/// }
/// let mut rt = Runtime::new(RuntimeConfig::default())?;
/// let lane = rt.add_lane(LaneConfig::new("work", Policy::Fifo, 50))?;
/// lane.registry().register(Box::new(Wakeups(Notifier::new()?, 0)))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait EventHandler: Send + 'static {
    /// The fd to wait on. Must stay the same for the handler's lifetime.
    fn source(&self) -> BorrowedFd<'_>;

    /// The readiness to wait for; readable by default.
    fn interest(&self) -> Interest {
        Interest::READABLE
    }

    /// The hook method: process one event.
    fn handle(&mut self, event: &Event, ctx: &mut Context) -> Disposition;

    /// Called after `handle` panicked (the panic is caught and counted). Default: re-arm.
    fn after_panic(&mut self) -> Disposition {
        Disposition::Rearm
    }

    /// Called once when the runtime shuts down ([`Runtime::shutdown_within`]) with this handle
    /// still registered: after every pool thread returned, just before the handler is dropped.
    /// Not called for a handle removed earlier (by [`Disposition::Close`] or
    /// [`Registry::deregister`]). A panic in it is caught and counted. Default: nothing.
    ///
    /// [`Runtime::shutdown_within`]: crate::Runtime::shutdown_within
    ///
    /// # Examples
    /// ```
    /// use lfrt::{Context, Disposition, Event, EventHandler, Notifier};
    /// use std::os::fd::{AsFd, BorrowedFd};
    /// struct Flusher(Notifier, Vec<u8>);
    /// impl EventHandler for Flusher {
    ///     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
    ///     fn handle(&mut self, _: &Event, _: &mut Context) -> Disposition { Disposition::Rearm }
    ///     fn on_close(&mut self) {
    ///         self.1.clear(); // e.g. flush what is pending
    ///     }
    /// }
    /// ```
    fn on_close(&mut self) {}
}

/// Drops every handler of `handles` after its [`EventHandler::on_close`] (a panic in it is
/// caught and counted in `drop_panics`). Called after every thread serving `handles` returned.
pub(crate) fn close_all(handles: &Handles) {
    handles.close_all(|h| {
        if catch_unwind(AssertUnwindSafe(|| h.on_close())).is_err() {
            handles
                .drop_panics
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
}

/// Slots in each pool thread's [`DatagramBatch`]: the most datagrams one event handles.
///
/// Every slot is `buffer_bytes` long, so a thread's storage is `buffer_bytes ×
/// (DATAGRAM_BATCH + 2)` (1.1 MiB at the 64 KiB default; lower `buffer_bytes` to the largest
/// datagram a service expects to shrink it).
///
/// Example: [`DatagramBatch`].
pub const DATAGRAM_BATCH: usize = 16;

/// A pool thread's own storage (thread-specific storage), created and pre-faulted before the
/// thread first joins its lane, and handed to every handler it runs.
///
/// # Real-time safety
/// Nothing here allocates after construction.
///
/// # Examples
/// ```
/// use lfrt::{Context, Disposition, Event, EventHandler, Incident};
/// use std::net::UdpSocket;
/// use std::os::fd::{AsFd, BorrowedFd};
/// struct Relay(UdpSocket);
/// impl EventHandler for Relay {
///     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
///     fn handle(&mut self, ev: &Event, ctx: &mut Context) -> Disposition {
///         ctx.set_origin_ns(ev.woke_ns()); // latency measured from the wake-up
///         let (input, reply) = ctx.buffers(); // this thread's own, pre-faulted storage
///         let mut truncated = 0;
///         while let Ok((n, from)) = self.0.recv_from(input) {
///             if n == input.len() {
///                 truncated += 1; // may have been longer than the buffer
///                 continue;
///             }
///             reply[..n].copy_from_slice(&input[..n]);
///             let _ = self.0.send_to(&reply[..n], from);
///         }
///         ctx.count(Incident::DatagramTruncated, truncated); // in the lane's metrics
///         Disposition::Rearm
///     }
/// }
/// ```
#[derive(Debug)]
pub struct Context {
    buffer: Box<[u8]>,
    scratch: Box<[u8]>,
    datagrams: DatagramBatch,
    pub(crate) lane: u16,
    pub(crate) thread: u32,
    pub(crate) priority: u8,
    pub(crate) tid: i32,
    pub(crate) registry: Registry,
    pub(crate) origin_ns: u64,
    pub(crate) missed_periods: u64,
    /// The handler said it read its source until it would block ([`Context::set_drained`]).
    drained: bool,
    /// The pool thread's dispatch stamp (`ThreadSlot::busy_since`), which the overrun watchdog
    /// reads; `None` outside a pool thread (tests, bound lanes).
    pub(crate) dispatch_stamp: Option<Arc<AtomicU64>>,
    /// Work the handler left for the end of its dispatch ([`Context::run_after`]).
    after: Option<After>,
}

/// What [`Context::run_after`] left: the work and its argument.
struct After(Arc<dyn AfterDispatch>, u64);

impl fmt::Debug for After {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("After")
            .field(&self.1)
            .finish_non_exhaustive()
    }
}

/// Work a handler leaves for the end of its dispatch, after its handle was let go (the slot
/// lock released) and still inside the dispatch the overrun watchdog times: the task layer's
/// same-lane fast path (a task woken by its socket's handler is polled there, with no trip
/// through the lane's doorbell and epoll).
pub(crate) trait AfterDispatch: Send + Sync {
    /// Runs the work; `arg` is what the handler passed to [`Context::run_after`].
    fn run(&self, arg: u64);
}

impl Context {
    /// Allocates the thread's storage for `buffer_bytes`-sized buffers and pre-faults it, so
    /// that no page of it faults on the dispatch path.
    pub(crate) fn new(
        buffer_bytes: usize,
        lane: u16,
        thread: u16,
        priority: u8,
        tid: i32,
        registry: Registry,
    ) -> Context {
        let mut buffer = vec![0u8; buffer_bytes].into_boxed_slice();
        let mut scratch = vec![0u8; buffer_bytes].into_boxed_slice();
        let mut datagrams = DatagramBatch::new(DATAGRAM_BATCH, buffer_bytes);
        mem::prefault(&mut buffer);
        mem::prefault(&mut scratch);
        mem::prefault(datagrams.storage_mut());
        Context {
            buffer,
            scratch,
            datagrams,
            lane,
            thread: u32::from(thread),
            priority,
            tid,
            registry,
            origin_ns: 0,
            missed_periods: 0,
            drained: false,
            dispatch_stamp: None,
            after: None,
        }
    }

    /// Leaves `work` for the end of this dispatch ([`AfterDispatch`]): the dispatch runs it
    /// once the handle is let go. One per dispatch: `Err` hands `work` back if one is left
    /// already (the caller then does the work its usual way).
    pub(crate) fn run_after(
        &mut self,
        work: Arc<dyn AfterDispatch>,
        arg: u64,
    ) -> Result<(), Arc<dyn AfterDispatch>> {
        if self.after.is_some() {
            return Err(work);
        }
        self.after = Some(After(work, arg));
        Ok(())
    }

    /// The overrun watchdog sees the running dispatch as begun at `since_ns` (earlier than
    /// it began): for a handler whose work continues across dispatches, so that the whole
    /// stretch counts toward the lane's `budget_us` like one long handler (the task
    /// executor's turns while its ready set never empties). Only ever moves the stamp back, and
    /// only during a dispatch; a no-op outside a pool thread. The thread clears the stamp when
    /// the handler returns, as after any dispatch, so demotion and restore are unchanged.
    pub(crate) fn backdate_dispatch(&self, since_ns: u64) {
        if let Some(stamp) = &self.dispatch_stamp {
            // Written only by this thread (the dispatch loop and here); the watchdog reads.
            let now = stamp.load(SeqCst);
            if now != 0 && since_ns != 0 && since_ns < now {
                stamp.store(since_ns, SeqCst);
            }
        }
    }

    /// Bytes [`new`](Self::new) allocates for `buffer_bytes`-sized buffers: the buffer, the
    /// scratch buffer and the datagram batch. Kept next to `new` so the two stay in step.
    pub(crate) fn allocated_bytes(buffer_bytes: usize) -> u64 {
        (buffer_bytes as u64)
            .saturating_mul(2)
            .saturating_add(DatagramBatch::allocated_bytes(DATAGRAM_BATCH, buffer_bytes))
    }

    /// The thread's receive buffer (`buffer_bytes` long).
    pub fn buffer(&mut self) -> &mut [u8] {
        &mut self.buffer
    }
    /// A second buffer of the same size for handler scratch work.
    pub fn scratch(&mut self) -> &mut [u8] {
        &mut self.scratch
    }
    /// Both buffers at once (e.g. read into one, build a reply in the other).
    pub fn buffers(&mut self) -> (&mut [u8], &mut [u8]) {
        (&mut self.buffer, &mut self.scratch)
    }
    /// The thread's datagram batch: [`DATAGRAM_BATCH`] slots of `buffer_bytes` each, for
    /// receiving and answering many datagrams with one system call each way.
    pub fn datagrams(&mut self) -> &mut DatagramBatch {
        &mut self.datagrams
    }
    /// Index of the lane this thread serves, in configuration order.
    pub fn lane(&self) -> usize {
        self.lane as usize
    }
    /// Index of this thread within its lane (`lf-<lane>-<n>`), below
    /// [`MAX_LANE_THREADS`](crate::MAX_LANE_THREADS).
    ///
    /// While the thread is lent to a higher lane (`borrow_from`), [`lane`](Self::lane) names
    /// that lane and this index is `MAX_LANE_THREADS × (1 + own lane index) + own thread
    /// index`: past every index of the lane's own threads, and distinct for every lent thread,
    /// so per-thread state a handler keeps by this index is never shared with another thread.
    pub fn thread_index(&self) -> usize {
        self.thread as usize
    }
    /// The thread's configured priority.
    pub fn priority(&self) -> u8 {
        self.priority
    }
    /// The thread's kernel id.
    pub fn tid(&self) -> i32 {
        self.tid
    }
    /// The lane's handle registry: add or remove handles from inside a handler.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
    /// Records when this event was *due* (e.g. a timer's expected expiry, `CLOCK_MONOTONIC`
    /// ns), so telemetry measures latency from that instant rather than from the leader's
    /// wake-up.
    pub fn set_origin_ns(&mut self, ns: u64) {
        self.origin_ns = ns;
    }
    /// Adds `n` to the counter of `what` in the metrics of the lane whose handle set this
    /// thread serves, and returns the counter's new total. (A handler registered with a
    /// [bound pool](crate::bound) counts into the pool's handle set, which does not report
    /// these counters.)
    ///
    /// # Real-time safety
    /// One relaxed atomic add: no allocation, no lock, no system call.
    pub fn count(&self, what: Incident, n: u64) -> u64 {
        self.registry.set.incidents.add(what, n)
    }
    /// Records `n` missed periods of a timer for this event.
    pub fn add_missed_periods(&mut self, n: u64) {
        self.missed_periods += n;
    }

    /// Tells the runtime that this handler read its source until it would block (or read a
    /// timerfd or an eventfd, which one read empties), so that the handle, returned with
    /// [`Disposition::Rearm`], is kept with no system call: handles are edge-triggered, and it
    /// is reported again when new input arrives. Without it, the kernel checks the source once
    /// more after the handler (one `epoll_ctl`), which is always correct.
    ///
    /// Say it only when it is true: input left unread after it is reported only when more
    /// arrives. [`DatagramBatch::recv`] says it itself when it finds its socket empty.
    ///
    /// # Examples
    /// ```
    /// use lfrt::{Context, Disposition, Event, EventHandler, Notifier};
    /// use std::os::fd::{AsFd, BorrowedFd};
    /// struct Bell(Notifier, u64);
    /// impl EventHandler for Bell {
    ///     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
    ///     fn handle(&mut self, _: &Event, ctx: &mut Context) -> Disposition {
    ///         self.1 += self.0.take().unwrap_or(0); // one read empties an eventfd
    ///         ctx.set_drained();
    ///         Disposition::Rearm
    ///     }
    /// }
    /// ```
    pub fn set_drained(&mut self) {
        self.drained = true;
    }

    /// Whether the handler that just ran said it drained its source, and forget it.
    fn take_drained(&mut self) -> bool {
        let batch = self.datagrams.take_drained();
        std::mem::take(&mut self.drained) || batch
    }
}

/// A lane's (or a bound pool's) handle set, holding event handlers.
pub(crate) type Handles = HandleSet<Held>;

/// A handler lent by a preallocated pool (a built-in listener's connection table,
/// `sources::accept`): when its handle is removed it goes back to its pool instead of being
/// freed, so the next connection takes it again and registering allocates nothing.
pub(crate) trait Pooled: EventHandler {
    /// Ends what it holds (closing its connection) and returns it to its pool; freed if the
    /// pool is gone.
    fn release(self: Box<Self>);
}

/// A registered handler, as the handle set holds it.
///
/// Dropping it is how the set lets a handler go (on removal, a failed registration or at
/// shutdown): an owned handler is dropped, a pooled one is [released](Pooled::release) to its
/// pool, so no path of the set can free a pool's box by mistake.
pub(crate) enum Held {
    /// Boxed by whoever registered it ([`Registry::register`]); freed when removed.
    Owned(Box<dyn EventHandler>),
    /// Lent by a pool ([`Registry::register_pooled`]); taken out only by `drop`.
    Pooled(ManuallyDrop<Box<dyn Pooled>>),
}

impl Deref for Held {
    type Target = dyn EventHandler;
    fn deref(&self) -> &(dyn EventHandler + 'static) {
        match self {
            Held::Owned(h) => &**h,
            Held::Pooled(h) => &***h,
        }
    }
}

impl DerefMut for Held {
    fn deref_mut(&mut self) -> &mut (dyn EventHandler + 'static) {
        match self {
            Held::Owned(h) => &mut **h,
            Held::Pooled(h) => &mut ***h,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Held::Pooled(h) = self {
            // SAFETY: the box is taken out here only, once, and `self` is not used after its
            // `drop` (the `ManuallyDrop` field itself is never dropped).
            let h = unsafe { ManuallyDrop::take(h) };
            h.release();
        }
    }
}

/// What dispatching one event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dispatched {
    /// The handler ran and its handle was kept. `again`: it was reported while it ran, and
    /// the caller, which still owns it, dispatches it once more (one more event).
    Handled {
        again: bool,
    },
    Closed,
    Panicked,
    Stale,
}

/// Runs the handler of `event`'s handle on this thread: `handle`, then `interest` for the next
/// arming. A panic in either (or in `after_panic`) is caught, so a handler cannot take its pool
/// thread down; the handle is then kept if `after_panic` says so and `interest` answered (with
/// a readiness re-check), else removed. `may_run_again`: the caller dispatches the handle once
/// more if a report came while the handler ran (`Dispatched::Handled { again: true }`).
pub(crate) fn dispatch(
    handles: &Handles,
    event: &Event,
    ctx: &mut Context,
    may_run_again: bool,
) -> Dispatched {
    let ran = handles.dispatch(event.token, may_run_again, |handler| {
        let _ = ctx.take_drained();
        ctx.after = None;
        let (disposition, mut panicked) =
            match catch_unwind(AssertUnwindSafe(|| handler.handle(event, ctx))) {
                Ok(d) => (d, false),
                Err(_) => (
                    catch_unwind(AssertUnwindSafe(|| handler.after_panic()))
                        .unwrap_or(Disposition::Close),
                    true,
                ),
            };
        let drained = ctx.take_drained() && !panicked;
        // Interest is read again so a handler may switch it (e.g. to writable while it has
        // unsent bytes).
        let next = match catch_unwind(AssertUnwindSafe(|| handler.interest())) {
            Ok(interest) if disposition == Disposition::Rearm => Next::Rearm {
                events: interest.bits(),
                drained,
            },
            Ok(_) => Next::Close,
            Err(_) => {
                panicked = true;
                Next::Close
            }
        };
        ((disposition, panicked), next)
    });
    // The handle is let go (its slot lock released): what the handler left for now runs with
    // no slot lock held, so it may register, deregister or dispatch as any code between
    // dispatches may. It catches its own panics (a task's poll does); one that escaped would
    // be a bug of the work's, and is caught here so the pool thread lives on.
    if let Some(After(work, arg)) = ctx.after.take() {
        let _ = catch_unwind(AssertUnwindSafe(|| work.run(arg)));
    }
    match ran {
        Ran::Stale => Dispatched::Stale,
        Ran::Ran {
            value: (_, true), ..
        } => Dispatched::Panicked,
        Ran::Ran {
            rearmed: true,
            again,
            ..
        } => Dispatched::Handled { again },
        // Removed because the handler deregistered itself while asking to stay: not a close
        // by the handler.
        Ran::Ran {
            value: (Disposition::Rearm, false),
            deregistered: true,
            ..
        } => Dispatched::Handled { again: false },
        Ran::Ran { .. } => Dispatched::Closed,
    }
}

/// A cloneable handle to one lane's handle set: register and deregister handles from any
/// thread, also while the lane runs and from inside handlers.
///
/// # Examples
/// ```
/// use lfrt::{Context, Disposition, Event, EventHandler, LaneConfig, Notifier, Policy};
/// use lfrt::{Runtime, RuntimeConfig};
/// use std::os::fd::{AsFd, BorrowedFd};
/// struct Bell(Notifier);
/// impl EventHandler for Bell {
///     fn source(&self) -> BorrowedFd<'_> { self.0.as_fd() }
///     fn handle(&mut self, _: &Event, _: &mut Context) -> Disposition { Disposition::Rearm }
/// }
/// let mut rt = Runtime::new(RuntimeConfig::default())?;
/// let registry = rt.add_lane(LaneConfig::new("g", Policy::Fifo, 10))?.registry();
/// let token = registry.register(Box::new(Bell(Notifier::new()?)))?;
/// assert_eq!(registry.len(), 1);
/// assert!(registry.deregister(token)); // drops the handler, closing its eventfd
/// assert!(registry.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Registry {
    pub(crate) set: Arc<Handles>,
}

impl Registry {
    /// Adds a handler; its [`EventHandler::source`] is armed at once.
    ///
    /// # Errors
    /// [`Error::Blocking`] if the fd is in blocking mode (a read could hang a pool thread);
    /// [`Error::TooManyHandles`] when all `max_handles` slots are used; [`Error::Io`] if epoll
    /// rejects the fd.
    ///
    /// # Real-time safety
    /// Takes the lane's free-list lock (priority-inheriting) and calls `epoll_ctl`; the
    /// `Box` is the caller's allocation.
    ///
    /// Example: [`Registry`].
    pub fn register(&self, handler: Box<dyn EventHandler>) -> Result<Token, Error> {
        self.add(Held::Owned(handler))
    }

    /// [`register`](Self::register) for a handler lent by a pool: when its handle is removed
    /// (or the registration fails) it is [released](Pooled::release) to its pool, not freed.
    /// Registering one allocates nothing.
    pub(crate) fn register_pooled(&self, handler: Box<dyn Pooled>) -> Result<Token, Error> {
        self.add(Held::Pooled(ManuallyDrop::new(handler)))
    }

    /// Checks the handler's fd and stores it in the set; on an error `handler` is dropped (a
    /// pooled one released).
    fn add(&self, handler: Held) -> Result<Token, Error> {
        let fd = handler.source().as_raw_fd();
        match crate::sys::fd::is_nonblocking(fd) {
            Ok(true) => {}
            Ok(false) => return Err(Error::Blocking { fd }),
            Err(e) => {
                return Err(Error::Io {
                    context: "fcntl(F_GETFL) of a new handle",
                    source: e,
                })
            }
        }
        let events = handler.interest().bits();
        self.set.register(handler, fd, events)
    }

    /// Removes a handle and drops its handler (closing its fd). If the handler is running on
    /// another thread this waits until it returns. Returns false if already removed.
    ///
    /// A handler may deregister its own handle (the token of the event it is handling): the
    /// call returns true at once and the removal is deferred until the handler returns; the
    /// handle is then removed and the handler dropped whatever [`Disposition`] it returned,
    /// as if it had returned [`Disposition::Close`] (but counted as a deregistration, not in
    /// `handles_closed_by_handler`). Calling it again before returning gives false.
    ///
    /// Two handlers that deregister each other's handles at the same moment wait for each
    /// other: the process aborts (see [`PiMutex`](crate::PiMutex)). Return
    /// [`Disposition::Close`] or coordinate through your own state instead.
    ///
    /// Example: [`Registry`].
    pub fn deregister(&self, token: Token) -> bool {
        self.set.deregister(token)
    }

    /// Suspends a handle from any thread: no event of it is dispatched until
    /// [`resume`](Self::resume); input that arrives meanwhile waits in the fd. If its handler
    /// is running on another thread this waits until it returns; called from that handler, it
    /// takes effect when the handler returns (the handle is not re-armed). Returns false if the
    /// token is stale (the handle was removed, even if its slot was reused) or the handle is
    /// already suspended.
    ///
    /// # Examples
    /// ```no_run
    /// # use lfrt::{Registry, Token};
    /// # fn f(lane: Registry, token: Token) {
    /// assert!(lane.suspend(token)); // e.g. back-pressure: stop reading this connection
    /// // ...
    /// assert!(lane.resume(token)); // what arrived meanwhile is dispatched now
    /// # }
    /// ```
    pub fn suspend(&self, token: Token) -> bool {
        self.set.suspend(token)
    }

    /// Re-arms a suspended handle (for the interest it was last armed for); pending input is
    /// dispatched. Returns false if the token is stale or the handle is not suspended.
    /// Example: [`suspend`](Self::suspend).
    pub fn resume(&self, token: Token) -> bool {
        self.set.resume(token)
    }

    /// Number of registered handles.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// True if no handle is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Registry { .. }")
    }
}
