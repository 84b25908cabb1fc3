//! A subscriber and its listener, behind a gate, as one lane handle.
//!
//! Invariants:
//! * the gate (a private epoll set, the handle's source) holds the listener's socket and the
//!   resume bell, level-triggered: it is readable exactly when one of them is;
//! * only this handle rings its bell: when `open` finds samples waiting, and after a turn that
//!   stopped at `samples_per_turn` with samples left (progress: a turn rings only after
//!   delivering that many). `rung` says so, and the next turn reads the bell back;
//! * every sample a notifying publisher (this crate's) sends the subscriber is announced: the
//!   listener exists before the subscriber, and `open` rings the bell if samples wait after
//!   its own read of the listener;
//! * the subscriber owns no notifier on the event service (its resume is the bell), so
//!   iceoryx2's dead-notifier event there is always about another process's notifier: with
//!   this crate, a publisher's.

use crate::{
    event_service, iceoryx, pubsub_service, Error, Node, Service, CREATED_EVENT, DATA_EVENT,
    DEAD_EVENT, DROPPED_EVENT, MAX_BUFFER, SUBSCRIBER_BUFFER,
};
use iceoryx2::port::listener::Listener;
use iceoryx2::port::subscriber::{Subscriber, SubscriberCreateError};
use iceoryx2::prelude::{FileDescriptorBased, PortFactory as _, ZeroCopySend};
use lfrt::{Context, Disposition, Event, EventHandler, Registry, Token};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Turns in a row that fail to read what the handle waits on (the listener, or the resume bell
/// it rang) and deliver no sample, after which the handle is closed: a gate that stays readable
/// because it cannot be read must not spin a FIFO thread. Failed `receive` calls never count:
/// a turn that had them read its gate, and it rings itself again only after delivering
/// `samples_per_turn` samples.
pub const MAX_FAILED_TURNS: u32 = 3;

/// Failed `receive` calls after which a turn stops receiving (each failed call either lost one
/// sample of a broken connection, which iceoryx2 stops reading once the service's
/// `subscriber_max_borrowed_samples` of them are lost, or found nothing deliverable). Until
/// then the turn goes on and delivers what the other publishers sent.
pub const MAX_RECEIVE_ERRORS_PER_TURN: u32 = 16;

/// `samples_per_turn` when not given.
pub(crate) const DEFAULT_SAMPLES_PER_TURN: usize = 16;

/// How a [`LaneSubscriber`] receives: the code form of a `[[subscriber]]` table's keys.
///
/// # Examples
/// ```
/// use lfrt_iceoryx2::SubscriberOptions;
/// let o = SubscriberOptions { buffer: Some(64), ..SubscriberOptions::default() };
/// assert_eq!((o.samples_per_turn, o.buffer, o.create), (16, Some(64), false));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscriberOptions {
    /// Most samples one turn hands to the handler before the handle is re-armed (at least 1;
    /// default 16).
    pub samples_per_turn: usize,
    /// Samples the subscriber's buffer holds (1 to [`MAX_BUFFER`]); a lane that falls further
    /// behind loses the oldest (iceoryx2 overwrites them, counted in [`Totals::overwritten`]).
    /// `None` (the default): [`SUBSCRIBER_BUFFER`], or what the service allows if that is less.
    /// iceoryx2 fixes the most a service allows when the service is created: asking for more is
    /// [`Error::BufferTooLarge`].
    pub buffer: Option<usize>,
    /// Create the service if it does not exist (default false: a missing service is an error).
    /// It is created with safe overflow and room for `buffer` samples per subscriber, and at
    /// least [`SUBSCRIBER_BUFFER`].
    pub create: bool,
}

impl Default for SubscriberOptions {
    fn default() -> Self {
        SubscriberOptions {
            samples_per_turn: DEFAULT_SAMPLES_PER_TURN,
            buffer: None,
            create: false,
        }
    }
}

/// The counters of one [`LaneSubscriber`] (they only grow). Shared: read them from any thread
/// while the lane runs ([`SubscriberStats::totals`]).
#[derive(Debug, Default)]
pub struct SubscriberStats {
    turns: AtomicU64,
    notifications: AtomicU64,
    notifications_at_open: AtomicU64,
    coalesced: AtomicU64,
    samples: AtomicU64,
    overwritten: AtomicU64,
    turns_at_bound: AtomicU64,
    connections_updated: AtomicU64,
    publishers_dead: AtomicU64,
    receive_errors: AtomicU64,
    listener_errors: AtomicU64,
    resume_errors: AtomicU64,
    closed_on_errors: AtomicU64,
}

/// A snapshot of [`SubscriberStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Dispatches of the handle (turns).
    pub turns: u64,
    /// Data notifications read (one per published sample), `notifications_at_open` included.
    pub notifications: u64,
    /// Data notifications [`LaneSubscriber::open`] read: sent while the subscriber was being
    /// created, mostly for samples sent before it existed, so `overwritten` leaves them out.
    pub notifications_at_open: u64,
    /// Notifications read together with an earlier one (`notifications` minus the reads that
    /// found any).
    pub coalesced: u64,
    /// Samples handed to the handler.
    pub samples: u64,
    /// Samples announced to this subscriber that never reached the handler: iceoryx2
    /// overwrote them when the backlog exceeded `buffer` (safe overflow), or they were lost
    /// with a connection whose `receive` failed (`receive_errors`). Counted when a turn finds
    /// the buffer empty, as `notifications − notifications_at_open − samples` (the count never
    /// decreases). Exact for publishers that notify once per sample, after sending it, as
    /// [`Publisher`](crate::Publisher) does; a publish that overlaps the end of `open` may be
    /// miscounted by one.
    pub overwritten: u64,
    /// Turns that stopped at `samples_per_turn` with samples left (and rang again).
    pub turns_at_bound: u64,
    /// Changes of the service's set of publishers read by turns: a publisher created, dropped
    /// or found dead (iceoryx2's notifier created, dropped and dead events). Each makes the
    /// turn's `receive` set up or tear down that publisher's connection on the lane thread
    /// (shared memory opened and mapped, allocation): the one allocation a turn makes.
    pub connections_updated: u64,
    /// Dead publisher processes, reported by iceoryx2 once their resources are cleaned up
    /// (one per dead process that owned a notifier on the service's event service; a
    /// subscriber owns none).
    pub publishers_dead: u64,
    /// Failed `receive` calls (a connection to one publisher failed). The turn goes on.
    pub receive_errors: u64,
    /// Failed reads of the listener (`try_wait`).
    pub listener_errors: u64,
    /// Failed rings or reads of the resume bell.
    pub resume_errors: u64,
    /// 1 if the handle was closed after [`MAX_FAILED_TURNS`] failed turns in a row.
    pub closed_on_errors: u64,
}

impl SubscriberStats {
    /// The counters now.
    pub fn totals(&self) -> Totals {
        Totals {
            turns: self.turns.load(Relaxed),
            notifications: self.notifications.load(Relaxed),
            notifications_at_open: self.notifications_at_open.load(Relaxed),
            coalesced: self.coalesced.load(Relaxed),
            samples: self.samples.load(Relaxed),
            overwritten: self.overwritten.load(Relaxed),
            turns_at_bound: self.turns_at_bound.load(Relaxed),
            connections_updated: self.connections_updated.load(Relaxed),
            publishers_dead: self.publishers_dead.load(Relaxed),
            receive_errors: self.receive_errors.load(Relaxed),
            listener_errors: self.listener_errors.load(Relaxed),
            resume_errors: self.resume_errors.load(Relaxed),
            closed_on_errors: self.closed_on_errors.load(Relaxed),
        }
    }
}

/// An iceoryx2 subscriber of payload `T` with its listener, as an lfrt [`EventHandler`]. Its
/// [`source`](EventHandler::source) is a *gate*: a private epoll set that holds the listener's
/// socket and a resume bell (an eventfd), so it waits in the lane's own handle set. Each turn
/// reads the listener (counting notifications), hands at most `samples_per_turn` samples to
/// `handler` as `&T` borrowed from shared memory, and rings its own bell if samples are left,
/// so the re-armed handle fires again instead of the rest waiting for the next publish.
///
/// # Examples
/// ```no_run
/// use lfrt::{LaneConfig, Policy, Runtime, RuntimeConfig};
/// use lfrt_iceoryx2::{LaneSubscriber, SubscriberOptions};
///
/// let mut rt = Runtime::new(RuntimeConfig::default())?;
/// let control = rt.add_lane(LaneConfig::new("control", Policy::Fifo, 80))?;
/// let node = lfrt_iceoryx2::node()?;
/// let options = SubscriberOptions { buffer: Some(64), ..SubscriberOptions::default() };
/// let (sub, stats) = LaneSubscriber::open(&node, "sensor/imu", options, |v: &u64, _ctx| {
///     let _ = *v; // borrowed from shared memory: no copy
/// })?;
/// sub.register(&control.registry())?;
/// rt.start()?;
/// # let _ = stats;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LaneSubscriber<T, H>
where
    T: fmt::Debug + ZeroCopySend + 'static,
{
    port: IoxPort<T>,
    handler: H,
    state: TurnState,
    stats: Arc<SubscriberStats>,
}

/// The iceoryx2 ports one turn reads, and the gate the lane waits on.
struct IoxPort<T>
where
    T: fmt::Debug + ZeroCopySend + 'static,
{
    subscriber: Subscriber<Service, T, ()>,
    listener: Listener<Service>,
    /// Rung by this handle only (see the module's invariants); a member of `gate`.
    bell: lfrt::Notifier,
    /// `bell` was rung and not read back yet.
    rung: bool,
    /// What the lane waits on: `listener`'s socket and `bell`.
    gate: OwnedFd,
    /// The subscriber's buffer (samples).
    buffer: usize,
}

/// What a turn carries to the next.
#[derive(Debug)]
struct TurnState {
    samples_per_turn: usize,
    /// Turns in a row that failed to read the gate and delivered nothing.
    failed_turns: u32,
    /// Data notifications read by turns (not by `open`).
    announced: u64,
    /// Samples handed to the handler.
    received: u64,
    /// `Totals::overwritten` so far: `announced − received` at the last turn that found the
    /// buffer empty, never decreasing.
    overwritten: u64,
}

impl TurnState {
    fn new(samples_per_turn: usize) -> TurnState {
        TurnState {
            samples_per_turn,
            failed_turns: 0,
            announced: 0,
            received: 0,
            overwritten: 0,
        }
    }
}

impl<T, H> fmt::Debug for LaneSubscriber<T, H>
where
    T: fmt::Debug + ZeroCopySend + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaneSubscriber")
            .field("gate", &self.port.gate)
            .field("samples_per_turn", &self.state.samples_per_turn)
            .field("buffer", &self.port.buffer)
            .finish_non_exhaustive()
    }
}

/// Which port [`LaneSubscriber::open`] has just created (what its test hook is told).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Created {
    Listener,
    Subscriber,
}

impl<T, H> LaneSubscriber<T, H>
where
    T: fmt::Debug + ZeroCopySend + Send + 'static,
    H: FnMut(&T, &mut Context) + Send + 'static,
{
    /// Opens the publish-subscribe service `service` for payload `T` (creating it if
    /// `options.create`) and its event service, and builds the listener, then the subscriber
    /// (so that every sample it receives is announced), its resume bell and the gate the lane
    /// will wait on. Nothing is registered yet: [`register`](Self::register).
    ///
    /// It reads the listener once: the notifications it finds are counted
    /// (`notifications_at_open`), and if samples wait, the bell is rung, so the first turn
    /// after registration takes them.
    ///
    /// # Errors
    /// [`Error::ServiceMissing`] if the service does not exist and `create` is false;
    /// [`Error::Incompatible`] if it carries another payload type, size or alignment (iceoryx2
    /// compares the type's name, size and alignment) or its event service has other settings;
    /// [`Error::BufferTooLarge`] if `buffer` is more than the service allows;
    /// [`Error::Config`] for a `samples_per_turn` of 0 or a `buffer` out of 1 to
    /// [`MAX_BUFFER`]; [`Error::Io`] if the gate or bell cannot be made; [`Error::Iceoryx`] for
    /// iceoryx2's other failures.
    pub fn open(
        node: &Node,
        service: &str,
        options: SubscriberOptions,
        handler: H,
    ) -> Result<(Self, Arc<SubscriberStats>), Error> {
        Self::open_observed(node, service, options, handler, &mut |_| {})
    }

    /// [`open`](Self::open), telling `created` when each port exists (tests publish there).
    fn open_observed(
        node: &Node,
        service: &str,
        options: SubscriberOptions,
        handler: H,
        created: &mut dyn FnMut(Created),
    ) -> Result<(Self, Arc<SubscriberStats>), Error> {
        let SubscriberOptions {
            samples_per_turn,
            buffer,
            create,
        } = options;
        let invalid = |field: &str, message: String| Error::Config {
            file: None,
            line: None,
            field: field.into(),
            message,
        };
        if samples_per_turn == 0 {
            return Err(invalid("samples_per_turn", "must be at least 1".into()));
        }
        if let Some(b) = buffer.filter(|b| !(1..=MAX_BUFFER).contains(b)) {
            return Err(invalid(
                "buffer",
                format!("must be 1 to {MAX_BUFFER}, not {b}"),
            ));
        }
        let room = buffer.unwrap_or(0).max(SUBSCRIBER_BUFFER);
        let pubsub = pubsub_service::<T>(node, service, create.then_some(room))?;
        let allowed = pubsub.static_config().subscriber_max_buffer_size();
        let too_large = |requested| Error::BufferTooLarge {
            service: service.to_owned(),
            requested,
            allowed,
        };
        let buffer = match buffer {
            None => SUBSCRIBER_BUFFER.min(allowed),
            Some(b) if b <= allowed => b,
            Some(b) => return Err(too_large(b)),
        };
        let events = event_service(node, service)?;
        // The listener first: from the moment the subscriber exists, every sample sent to it
        // is also announced to the listener.
        let listener = events
            .listener_builder()
            .create()
            .map_err(|e| iceoryx("creating a listener", service, e))?;
        created(Created::Listener);
        let subscriber = pubsub
            .subscriber_builder()
            .buffer_size(buffer)
            .create()
            .map_err(|e| match e {
                SubscriberCreateError::BufferSizeExceedsMaxSupportedBufferSizeOfService => {
                    too_large(buffer)
                }
                e => iceoryx("creating a subscriber", service, e),
            })?;
        created(Created::Subscriber);
        let stats = Arc::new(SubscriberStats::default());
        // What was announced while the subscriber was being created: counted, but its samples
        // were mostly sent before the subscriber existed, so `overwritten` leaves it out. (This
        // first read also makes iceoryx2 set the socket nonblocking.)
        let (mut data, mut dead) = (0u64, 0u64);
        listener
            .try_wait(|a| match a.id.as_value() {
                DATA_EVENT => data += a.count,
                DEAD_EVENT => dead += a.count,
                _ => {}
            })
            .map_err(|e| iceoryx("reading the listener", service, e))?;
        if data > 0 {
            stats.notifications.store(data, Relaxed);
            stats.notifications_at_open.store(data, Relaxed);
            stats.coalesced.store(data - 1, Relaxed);
        }
        stats.publishers_dead.store(dead, Relaxed);
        let io = |what| {
            move |source| Error::Io {
                what,
                service: service.to_owned(),
                source,
            }
        };
        let bell = lfrt::Notifier::new().map_err(io("creating the resume bell (eventfd)"))?;
        // SAFETY: the fd belongs to `listener`, which outlives this borrow; it is only added to
        // the gate (epoll holds no reference to the number: when the listener closes its
        // socket, the kernel removes it from the gate).
        let socket = unsafe { BorrowedFd::borrow_raw(listener.file_descriptor().native_handle()) };
        let gate = gate([socket, bell.as_fd()]).map_err(io("creating the gate (epoll)"))?;
        let mut port = IoxPort {
            subscriber,
            listener,
            bell,
            rung: false,
            gate,
            buffer,
        };
        // A sample whose notification the read above took would wait for the next publish.
        if port.has_samples() {
            port.bell.notify(1).map_err(io("ringing the resume bell"))?;
            port.rung = true;
        }
        let this = LaneSubscriber {
            port,
            handler,
            state: TurnState::new(samples_per_turn),
            stats: stats.clone(),
        };
        Ok((this, stats))
    }

    /// Registers this subscriber in a lane (its registry): from now on the lane's threads serve
    /// it. Returns the handle's token.
    ///
    /// # Errors
    /// [`Error::Lane`] if the lane refuses the handle (table full, epoll error).
    pub fn register(self, lane: &Registry) -> Result<Token, Error> {
        Ok(lane.register(Box::new(self))?)
    }
}

/// A gate: a new epoll set (nonblocking, as lfrt requires of a source) holding `members` for
/// readability, level-triggered, so it is readable exactly when one of them is.
fn gate(members: [BorrowedFd<'_>; 2]) -> io::Result<OwnedFd> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    let flags = OFlag::from_bits_retain(fcntl(&epoll.0, FcntlArg::F_GETFL)?);
    fcntl(&epoll.0, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    for (i, member) in members.into_iter().enumerate() {
        epoll.add(member, EpollEvent::new(EpollFlags::EPOLLIN, i as u64))?;
    }
    Ok(epoll.0)
}

/// What a turn reads and receives: the iceoryx2 ports ([`IoxPort`]), or a test's stand-in.
trait Port {
    /// The sample's payload.
    type Payload: ?Sized;
    /// Reads the resume bell back if it was rung (clearing its readiness); false if that
    /// failed (it stays rung).
    fn take_ring(&mut self) -> bool;
    /// Reads the listener (clearing its socket's readiness), draining its event counters into
    /// `on(event id, count)`; false if that failed.
    fn wait(&mut self, on: impl FnMut(usize, u64)) -> bool;
    /// Receives one sample and hands it to `deliver`: `Ok(false)` if there was none.
    fn receive(&mut self, deliver: impl FnOnce(&Self::Payload)) -> Result<bool, ()>;
    /// True if samples are waiting.
    fn has_samples(&mut self) -> bool;
    /// Rings the resume bell, which keeps the gate readable until `take_ring`; false if that
    /// failed.
    fn ring(&mut self) -> bool;
}

impl<T> Port for IoxPort<T>
where
    T: fmt::Debug + ZeroCopySend + 'static,
{
    type Payload = T;

    fn take_ring(&mut self) -> bool {
        if self.rung {
            self.rung = self.bell.take().is_err();
        }
        !self.rung
    }

    fn wait(&mut self, mut on: impl FnMut(usize, u64)) -> bool {
        self.listener
            .try_wait(|a| on(a.id.as_value(), a.count))
            .is_ok()
    }

    fn receive(&mut self, deliver: impl FnOnce(&T)) -> Result<bool, ()> {
        match self.subscriber.receive() {
            Ok(Some(sample)) => {
                // Borrowed from shared memory; released when `sample` drops.
                deliver(sample.payload());
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(_) => Err(()),
        }
    }

    fn has_samples(&mut self) -> bool {
        matches!(self.subscriber.has_samples(), Ok(true))
    }

    fn ring(&mut self) -> bool {
        let rang = self.bell.notify(1).is_ok();
        self.rung |= rang;
        rang
    }
}

/// One turn: reads the bell and the listener (counting what they announce), receives at most
/// `samples_per_turn` samples into `deliver` (going on past failed receives, at most
/// [`MAX_RECEIVE_ERRORS_PER_TURN`] of them), counts what was overwritten once the buffer is
/// empty, and rings the bell if the bound left samples waiting.
fn turn<P: Port>(
    port: &mut P,
    st: &mut TurnState,
    s: &SubscriberStats,
    mut deliver: impl FnMut(&P::Payload),
) -> Disposition {
    s.turns.fetch_add(1, Relaxed);
    let mut unread = false;
    if !port.take_ring() {
        s.resume_errors.fetch_add(1, Relaxed);
        unread = true;
    }
    let (mut data, mut dead, mut changed) = (0u64, 0u64, 0u64);
    let waited = port.wait(|id, count| match id {
        DATA_EVENT => data += count,
        DEAD_EVENT => dead += count,
        CREATED_EVENT | DROPPED_EVENT => changed += count,
        _ => {}
    });
    if !waited {
        s.listener_errors.fetch_add(1, Relaxed);
        unread = true;
    }
    if data > 0 {
        st.announced += data;
        s.notifications.fetch_add(data, Relaxed);
        s.coalesced.fetch_add(data - 1, Relaxed);
    }
    if dead > 0 {
        s.publishers_dead.fetch_add(dead, Relaxed);
    }
    if changed + dead > 0 {
        s.connections_updated.fetch_add(changed + dead, Relaxed);
    }
    let (mut delivered, mut errors, mut drained) = (0usize, 0u32, false);
    while delivered < st.samples_per_turn {
        match port.receive(&mut deliver) {
            Ok(true) => delivered += 1,
            Ok(false) => {
                drained = true;
                break;
            }
            Err(()) => {
                s.receive_errors.fetch_add(1, Relaxed);
                errors += 1;
                if errors == MAX_RECEIVE_ERRORS_PER_TURN {
                    break;
                }
            }
        }
    }
    st.received += delivered as u64;
    if drained {
        // The buffer was empty: every sample announced so far was received or lost (a
        // publisher sends before it notifies, so a notification not read yet can only make
        // this smaller).
        let lost = st.announced.saturating_sub(st.received);
        if lost > st.overwritten {
            s.overwritten.fetch_add(lost - st.overwritten, Relaxed);
            st.overwritten = lost;
        }
    }
    s.samples.fetch_add(delivered as u64, Relaxed);
    if delivered == st.samples_per_turn && port.has_samples() {
        s.turns_at_bound.fetch_add(1, Relaxed);
        if !port.ring() {
            s.resume_errors.fetch_add(1, Relaxed);
        }
    }
    if unread && delivered == 0 {
        st.failed_turns += 1;
        if st.failed_turns >= MAX_FAILED_TURNS {
            s.closed_on_errors.fetch_add(1, Relaxed);
            return Disposition::Close;
        }
    } else {
        st.failed_turns = 0;
    }
    Disposition::Rearm
}

impl<T, H> EventHandler for LaneSubscriber<T, H>
where
    T: fmt::Debug + ZeroCopySend + Send + 'static,
    H: FnMut(&T, &mut Context) + Send + 'static,
{
    fn source(&self) -> BorrowedFd<'_> {
        self.port.gate.as_fd()
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        let handler = &mut self.handler;
        turn(&mut self.port, &mut self.state, &self.stats, |v| {
            handler(v, ctx)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Publisher;
    use lfrt::{LaneConfig, Policy, RtMode, Runtime, RuntimeConfig};
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicU64;
    use std::time::{Duration, Instant};

    /// A scripted [`Port`]: what each turn's listener read finds, and the buffer, in which an
    /// `Err` is a `receive` call that fails (a broken connection) and is used up by it.
    #[derive(Default)]
    struct Script {
        /// Per turn; `None`: the listener read fails.
        waits: VecDeque<Option<Vec<(usize, u64)>>>,
        buffer: VecDeque<Result<u64, ()>>,
        receive_calls: u64,
        rings: u64,
    }

    impl Port for Script {
        type Payload = u64;
        fn take_ring(&mut self) -> bool {
            true
        }
        fn wait(&mut self, mut on: impl FnMut(usize, u64)) -> bool {
            match self.waits.pop_front() {
                Some(Some(events)) => {
                    events.into_iter().for_each(|(id, n)| on(id, n));
                    true
                }
                Some(None) => false,
                None => true,
            }
        }
        fn receive(&mut self, deliver: impl FnOnce(&u64)) -> Result<bool, ()> {
            self.receive_calls += 1;
            match self.buffer.pop_front() {
                None => Ok(false),
                Some(Ok(v)) => {
                    deliver(&v);
                    Ok(true)
                }
                Some(Err(())) => Err(()),
            }
        }
        fn has_samples(&mut self) -> bool {
            !self.buffer.is_empty()
        }
        fn ring(&mut self) -> bool {
            self.rings += 1;
            true
        }
    }

    fn state(samples_per_turn: usize) -> TurnState {
        TurnState::new(samples_per_turn)
    }

    /// One turn in which the listener read finds `data` notifications and the buffer gains
    /// `arrived`; returns what the turn delivered and its disposition.
    fn step(
        port: &mut Script,
        st: &mut TurnState,
        s: &SubscriberStats,
        data: u64,
        arrived: &[Result<u64, ()>],
    ) -> (Vec<u64>, Disposition) {
        if data > 0 {
            port.waits.push_back(Some(vec![(DATA_EVENT, data)]));
        }
        port.buffer.extend(arrived.iter().copied());
        let mut got = Vec::new();
        let d = turn(port, st, s, |v| got.push(*v));
        (got, d)
    }

    /// One notification read per turn, with samples ahead of their notifications (a publisher
    /// sends, then notifies): a turn that reads a notification whose sample an earlier turn
    /// already took counts nothing; a notification whose sample never arrives counts one.
    #[test]
    fn overwritten_is_exact_when_notifications_are_read_one_at_a_time() {
        let (mut port, mut st, s) = (Script::default(), state(16), SubscriberStats::default());
        // Sample 1 arrived before its notification: this turn takes both samples.
        assert_eq!(step(&mut port, &mut st, &s, 1, &[Ok(0), Ok(1)]).0, [0, 1]);
        // Sample 1's notification: nothing was lost.
        assert_eq!(step(&mut port, &mut st, &s, 1, &[]).0, [0u64; 0]);
        assert_eq!(s.totals().overwritten, 0, "{:?}", s.totals());
        // Sample 2 was announced and overwritten before any turn took it.
        let _ = step(&mut port, &mut st, &s, 1, &[]);
        assert_eq!(step(&mut port, &mut st, &s, 1, &[Ok(3)]).0, [3]);
        let t = s.totals();
        assert_eq!(
            (t.notifications, t.coalesced, t.samples, t.overwritten),
            (4, 0, 3, 1),
            "{t:?}"
        );
    }

    /// Ten notifications read at once for a buffer of four: the six samples iceoryx2
    /// overwrote are counted once the buffer is drained, not while the bounded turns still
    /// have samples to take.
    #[test]
    fn overwritten_counts_a_coalesced_overflow_once_the_buffer_is_drained() {
        let (mut port, mut st, s) = (Script::default(), state(3), SubscriberStats::default());
        let buffer = [Ok(6), Ok(7), Ok(8), Ok(9)];
        let (got, d) = step(&mut port, &mut st, &s, 10, &buffer);
        assert_eq!((got.as_slice(), d), (&[6, 7, 8][..], Disposition::Rearm));
        assert_eq!(
            s.totals().overwritten,
            0,
            "not drained yet: {:?}",
            s.totals()
        );
        assert_eq!(port.rings, 1, "a bounded turn rings");
        assert_eq!(step(&mut port, &mut st, &s, 0, &[]).0, [9]);
        let t = s.totals();
        assert_eq!(
            (
                t.notifications,
                t.coalesced,
                t.samples,
                t.overwritten,
                t.turns_at_bound
            ),
            (10, 9, 4, 6, 1),
            "{t:?}"
        );
    }

    /// A connection whose `receive` fails (the first in iceoryx2's order, so it is tried
    /// first every time) neither stops the turn nor, turn after turn, closes the handle: the
    /// other publishers' samples are delivered in the same turn.
    #[test]
    fn a_failing_connection_neither_stops_the_turn_nor_closes_the_handle() {
        let (mut port, mut st, s) = (Script::default(), state(4), SubscriberStats::default());
        for i in 0..(2 * MAX_FAILED_TURNS as u64) {
            let (got, d) = step(
                &mut port,
                &mut st,
                &s,
                2,
                &[Err(()), Ok(2 * i), Ok(2 * i + 1)],
            );
            assert_eq!(
                (got.as_slice(), d),
                (&[2 * i, 2 * i + 1][..], Disposition::Rearm),
                "turn {i}: {:?}",
                s.totals()
            );
        }
        let t = s.totals();
        assert_eq!(
            (t.receive_errors, t.samples, t.closed_on_errors),
            (6, 12, 0),
            "{t:?}"
        );
    }

    /// Receive errors alone never close the handle; a listener that fails in
    /// `MAX_FAILED_TURNS` turns in a row that deliver nothing does.
    #[test]
    fn only_a_failing_listener_closes_the_handle() {
        let (mut port, mut st, s) = (Script::default(), state(4), SubscriberStats::default());
        for _ in 0..10 {
            let (_, d) = step(&mut port, &mut st, &s, 1, &[Err(())]);
            assert_eq!(d, Disposition::Rearm, "{:?}", s.totals());
        }
        // A failed listener read in a turn that delivers is not a failed turn.
        port.waits.push_back(None);
        assert_eq!(
            step(&mut port, &mut st, &s, 0, &[Ok(1)]).1,
            Disposition::Rearm
        );
        for turn_no in 1..=MAX_FAILED_TURNS {
            port.waits.push_back(None);
            let (_, d) = step(&mut port, &mut st, &s, 0, &[]);
            let want = if turn_no == MAX_FAILED_TURNS {
                Disposition::Close
            } else {
                Disposition::Rearm
            };
            assert_eq!(d, want, "failed turn {turn_no}");
        }
        let t = s.totals();
        assert_eq!(
            (t.receive_errors, t.listener_errors, t.closed_on_errors),
            (10, 1 + MAX_FAILED_TURNS as u64, 1),
            "{t:?}"
        );
    }

    /// A turn whose every `receive` fails stops after `MAX_RECEIVE_ERRORS_PER_TURN` calls and
    /// does not ring itself: its time is bounded and it cannot turn into a loop.
    #[test]
    fn failed_receive_calls_are_bounded_per_turn() {
        let (mut port, mut st, s) = (Script::default(), state(4), SubscriberStats::default());
        let errors = vec![Err(()); 1000];
        let (got, d) = step(&mut port, &mut st, &s, 1, &errors);
        assert!(got.is_empty());
        assert_eq!(d, Disposition::Rearm);
        assert!(
            port.receive_calls <= u64::from(MAX_RECEIVE_ERRORS_PER_TURN),
            "{} receive calls",
            port.receive_calls
        );
        assert_eq!(port.rings, 0);
    }

    /// A service name no other test or process uses.
    fn unique(test: &str) -> String {
        format!("lfrt-test/unit/{test}/{}", std::process::id())
    }

    /// Polls `cond` every millisecond for up to `secs` seconds (a liveness bound; the
    /// condition is the check).
    fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        cond()
    }

    /// Opens a subscriber of `service` with `hook` told of each port `open` creates, serves it
    /// on a time-shared lane (no real-time privilege needed), and returns the lane, the
    /// counters and how many samples the handler got.
    fn open_and_serve(
        node: &Node,
        service: &str,
        hook: &mut dyn FnMut(Created),
    ) -> (Runtime, Arc<SubscriberStats>, Arc<AtomicU64>) {
        let got = Arc::new(AtomicU64::new(0));
        let g = got.clone();
        let (sub, stats) = LaneSubscriber::open_observed(
            node,
            service,
            SubscriberOptions::default(),
            move |_: &u64, _| {
                g.fetch_add(1, Relaxed);
            },
            hook,
        )
        .unwrap();
        let mut rt = Runtime::new(RuntimeConfig {
            rt: RtMode::BestEffort,
            lanes: vec![LaneConfig::new("lane", Policy::Other, 0)],
            ..RuntimeConfig::default()
        })
        .unwrap();
        sub.register(&rt.lane("lane").unwrap().registry()).unwrap();
        rt.start().unwrap();
        (rt, stats, got)
    }

    /// A sample published as soon as the subscriber exists, before `open` returns and long
    /// before the handle is registered, is delivered without a second publish.
    #[test]
    fn a_sample_published_while_open_runs_is_delivered_without_another_publish() {
        let service = unique("during-open");
        let node = crate::node().unwrap();
        let publisher = Publisher::<u64>::create(&node, &service).unwrap();
        let (mut rt, stats, got) = open_and_serve(&node, &service, &mut |c| {
            if c == Created::Subscriber {
                assert_eq!(
                    publisher.publish(7).unwrap(),
                    1,
                    "the subscriber is connected"
                );
            }
        });
        let delivered = wait_until(5, || got.load(Relaxed) == 1);
        let _ = rt.shutdown().unwrap();
        assert!(
            delivered,
            "the sample published during open was not delivered: {:?}",
            stats.totals()
        );
    }

    /// A notification that `open` reads (published once both the subscriber and its listener
    /// exist) is counted in `notifications` (and `notifications_at_open`), not lost.
    #[test]
    fn notifications_read_by_open_are_counted() {
        let service = unique("read-by-open");
        let node = crate::node().unwrap();
        let publisher = Publisher::<u64>::create(&node, &service).unwrap();
        let mut ports = 0;
        let (mut rt, stats, got) = open_and_serve(&node, &service, &mut |_| {
            ports += 1;
            if ports == 2 {
                assert_eq!(
                    publisher.publish(7).unwrap(),
                    1,
                    "the subscriber is connected"
                );
            }
        });
        let delivered = wait_until(5, || got.load(Relaxed) == 1);
        let _ = rt.shutdown().unwrap();
        let t = stats.totals();
        assert!(delivered, "{t:?}");
        assert_eq!(
            (
                t.notifications,
                t.notifications_at_open,
                t.samples,
                t.overwritten
            ),
            (1, 1, 1, 0),
            "{t:?}"
        );
    }
}
