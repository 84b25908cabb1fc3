//! A subscriber and its listener as one lane handle.

use crate::{
    event_service, iceoryx, service_name, Error, Node, Service, DATA_EVENT, DEAD_EVENT,
    RESUME_EVENT,
};
use iceoryx2::port::listener::Listener;
use iceoryx2::port::notifier::{ListenerKey, Notifier};
use iceoryx2::port::subscriber::Subscriber;
use iceoryx2::prelude::{CallbackProgression, EventId, FileDescriptorBased, ZeroCopySend};
use iceoryx2::service::builder::publish_subscribe::{
    PublishSubscribeOpenError, PublishSubscribeOpenOrCreateError,
};
use lfrt::{Context, Disposition, Event, EventHandler, Registry, Token};
use std::fmt;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Turns in a row that may fail (the listener or receiving errs) without delivering a sample
/// before the handle is closed: a listener fd that stays readable must not spin a FIFO thread.
pub const MAX_FAILED_TURNS: u32 = 3;

/// The counters of one [`LaneSubscriber`] (they only grow). Shared: read them from any thread
/// while the lane runs ([`SubscriberStats::totals`]).
#[derive(Debug, Default)]
pub struct SubscriberStats {
    turns: AtomicU64,
    notifications: AtomicU64,
    coalesced: AtomicU64,
    samples: AtomicU64,
    turns_at_bound: AtomicU64,
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
    /// Data notifications read (one per published sample).
    pub notifications: u64,
    /// Notifications that arrived while an earlier one was still pending and were read in the
    /// same turn (`notifications` minus the turns that read any).
    pub coalesced: u64,
    /// Samples handed to the handler.
    pub samples: u64,
    /// Turns that stopped at `samples_per_turn` with samples left (and rang again).
    pub turns_at_bound: u64,
    /// Dead publishers (notifiers) reported by iceoryx2 after their cleanup.
    pub publishers_dead: u64,
    /// Failed `receive` calls.
    pub receive_errors: u64,
    /// Failed `try_wait` calls on the listener.
    pub listener_errors: u64,
    /// Failed rings of the own listener after a bounded turn.
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
            coalesced: self.coalesced.load(Relaxed),
            samples: self.samples.load(Relaxed),
            turns_at_bound: self.turns_at_bound.load(Relaxed),
            publishers_dead: self.publishers_dead.load(Relaxed),
            receive_errors: self.receive_errors.load(Relaxed),
            listener_errors: self.listener_errors.load(Relaxed),
            resume_errors: self.resume_errors.load(Relaxed),
            closed_on_errors: self.closed_on_errors.load(Relaxed),
        }
    }
}

/// An iceoryx2 subscriber of payload `T` with its listener, as an lfrt [`EventHandler`]:
/// its [`source`](EventHandler::source) is the listener's fd, so it waits in the lane's own
/// handle set. Each turn reads the listener (counting notifications), hands at most
/// `samples_per_turn` samples to `handler` as `&T` borrowed from shared memory, and rings its
/// own listener if samples are left, so the re-armed handle fires again instead of the rest
/// waiting for the next publish.
///
/// # Examples
/// ```no_run
/// use lfrt::{GroupConfig, Policy, Runtime, RuntimeConfig};
/// use lfrt_iceoryx2::LaneSubscriber;
///
/// let mut rt = Runtime::new(RuntimeConfig::default())?;
/// let control = rt.add_group(GroupConfig::new("control", Policy::Fifo, 80))?;
/// let node = lfrt_iceoryx2::node()?;
/// let (sub, stats) = LaneSubscriber::open(&node, "sensor/imu", 16, false, |v: &u64, _ctx| {
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
    subscriber: Subscriber<Service, T, ()>,
    listener: Listener<Service>,
    /// Rings `listener` (and only it) after a turn that stopped at the bound.
    resume: Notifier<Service>,
    own_key: ListenerKey,
    fd: RawFd,
    handler: H,
    samples_per_turn: usize,
    failed_turns: u32,
    stats: Arc<SubscriberStats>,
}

impl<T, H> fmt::Debug for LaneSubscriber<T, H>
where
    T: fmt::Debug + ZeroCopySend + 'static,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaneSubscriber")
            .field("fd", &self.fd)
            .field("samples_per_turn", &self.samples_per_turn)
            .finish_non_exhaustive()
    }
}

impl<T, H> LaneSubscriber<T, H>
where
    T: fmt::Debug + ZeroCopySend + Send + 'static,
    H: FnMut(&T, &mut Context) + Send + 'static,
{
    /// Opens the publish-subscribe service `service` for payload `T` (creating it if `create`),
    /// and its event service, and builds the subscriber, its listener and the notifier that
    /// rings that listener. Nothing is registered yet: [`register`](Self::register).
    ///
    /// # Errors
    /// [`Error::ServiceMissing`] if the service does not exist and `create` is false;
    /// [`Error::Incompatible`] if it carries another payload type, size or alignment (iceoryx2
    /// compares the type's name, size and alignment) or its event service has other settings;
    /// [`Error::Iceoryx`] for iceoryx2's other failures; a `samples_per_turn` of 0 is
    /// [`Error::Config`].
    pub fn open(
        node: &Node,
        service: &str,
        samples_per_turn: usize,
        create: bool,
        handler: H,
    ) -> Result<(Self, Arc<SubscriberStats>), Error> {
        if samples_per_turn == 0 {
            return Err(Error::Config {
                file: None,
                line: None,
                field: "samples_per_turn".into(),
                message: "must be at least 1".into(),
            });
        }
        let name = service_name(service)?;
        let builder = node.service_builder(&name).publish_subscribe::<T>();
        let pubsub = if create {
            builder
                .subscriber_max_buffer_size(crate::SUBSCRIBER_BUFFER)
                .open_or_create()
                .map_err(|e| match e {
                    PublishSubscribeOpenOrCreateError::PublishSubscribeOpenError(o) => {
                        open_error::<T>(service, o)
                    }
                    e => iceoryx("creating the service", service, e),
                })?
        } else {
            builder.open().map_err(|e| open_error::<T>(service, e))?
        };
        let events = event_service(node, service)?;
        let subscriber = pubsub
            .subscriber_builder()
            .create()
            .map_err(|e| iceoryx("creating a subscriber", service, e))?;
        let listener = events
            .listener_builder()
            .create()
            .map_err(|e| iceoryx("creating a listener", service, e))?;
        let resume = events
            .notifier_builder()
            .default_event_id(EventId::new(RESUME_EVENT))
            .create()
            .map_err(|e| iceoryx("creating the resume notifier", service, e))?;
        let own_id = listener.id();
        let mut own_key = None;
        resume.for_each_listener(|monofier, details| {
            if details.listener_id == own_id {
                own_key = Some(monofier.listener_key());
                return CallbackProgression::Stop;
            }
            CallbackProgression::Continue
        });
        let own_key = own_key.ok_or_else(|| {
            iceoryx(
                "finding the own listener",
                service,
                "not among the event service's listeners",
            )
        })?;
        let stats = Arc::new(SubscriberStats::default());
        // iceoryx2 makes the listener's socket nonblocking on its first nonblocking read (lfrt
        // refuses blocking fds): read it once now. A notification this consumes is put back by
        // ringing, so the first turn after registration sees it.
        let mut pending = 0u64;
        listener
            .try_wait(|a| pending += a.count)
            .map_err(|e| iceoryx("reading the listener", service, e))?;
        // SAFETY: the fd belongs to `listener`, which lives as long as this handler; it is only
        // read as a number here and borrowed in `source` while `self` is alive.
        let fd = unsafe { listener.file_descriptor().native_handle() };
        let this = LaneSubscriber {
            subscriber,
            listener,
            resume,
            own_key,
            fd,
            handler,
            samples_per_turn,
            failed_turns: 0,
            stats: stats.clone(),
        };
        if pending > 0 {
            this.ring_self()
                .map_err(|e| iceoryx("ringing the own listener", service, e))?;
        }
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

    fn ring_self(&self) -> Result<(), iceoryx2::port::notifier::NotifierNotifyError> {
        self.resume
            .notify_single_listener_with_custom_event_id(&self.own_key, EventId::new(RESUME_EVENT))
    }
}

fn open_error<T>(service: &str, e: PublishSubscribeOpenError) -> Error {
    match e {
        PublishSubscribeOpenError::DoesNotExist => Error::ServiceMissing {
            service: service.to_owned(),
        },
        PublishSubscribeOpenError::IncompatibleTypes => Error::Incompatible {
            service: service.to_owned(),
            detail: format!(
                "its payload type differs from `{}` ({} bytes, alignment {}): iceoryx2 compares type name, size and alignment",
                std::any::type_name::<T>(),
                std::mem::size_of::<T>(),
                std::mem::align_of::<T>()
            ),
        },
        e @ (PublishSubscribeOpenError::IncompatibleMessagingPattern
        | PublishSubscribeOpenError::IncompatibleAttributes
        | PublishSubscribeOpenError::IncompatibleOverflowBehavior
        | PublishSubscribeOpenError::VersionMismatch) => Error::Incompatible {
            service: service.to_owned(),
            detail: format!("{e:?}"),
        },
        e => iceoryx("opening the service", service, e),
    }
}

impl<T, H> EventHandler for LaneSubscriber<T, H>
where
    T: fmt::Debug + ZeroCopySend + Send + 'static,
    H: FnMut(&T, &mut Context) + Send + 'static,
{
    fn source(&self) -> BorrowedFd<'_> {
        // SAFETY: `fd` is the listener's socket, owned by `self.listener`, which outlives the
        // borrow (it is dropped with `self`).
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }

    fn handle(&mut self, _event: &Event, ctx: &mut Context) -> Disposition {
        let s = &*self.stats;
        s.turns.fetch_add(1, Relaxed);
        let mut failed = false;
        let (mut data, mut dead) = (0u64, 0u64);
        // Reads the socket (clearing the fd's readiness) and drains the event counters.
        let waited = self.listener.try_wait(|a| match a.id.as_value() {
            DATA_EVENT => data += a.count,
            DEAD_EVENT => dead += a.count,
            _ => {} // RESUME_EVENT: our own ring
        });
        if waited.is_err() {
            s.listener_errors.fetch_add(1, Relaxed);
            failed = true;
        }
        if data > 0 {
            s.notifications.fetch_add(data, Relaxed);
            s.coalesced.fetch_add(data - 1, Relaxed);
        }
        if dead > 0 {
            s.publishers_dead.fetch_add(dead, Relaxed);
        }
        let mut delivered = 0usize;
        let mut left = false;
        while delivered < self.samples_per_turn {
            match self.subscriber.receive() {
                Ok(Some(sample)) => {
                    // Borrowed from shared memory; released when `sample` drops.
                    (self.handler)(sample.payload(), ctx);
                    delivered += 1;
                }
                Ok(None) => break,
                Err(_) => {
                    s.receive_errors.fetch_add(1, Relaxed);
                    failed = true;
                    break;
                }
            }
        }
        s.samples.fetch_add(delivered as u64, Relaxed);
        if delivered == self.samples_per_turn {
            left = matches!(self.subscriber.has_samples(), Ok(true));
        }
        if left {
            s.turns_at_bound.fetch_add(1, Relaxed);
            if self.ring_self().is_err() {
                s.resume_errors.fetch_add(1, Relaxed);
                failed = true;
            }
        }
        if failed && delivered == 0 {
            self.failed_turns += 1;
            if self.failed_turns >= MAX_FAILED_TURNS {
                s.closed_on_errors.fetch_add(1, Relaxed);
                return Disposition::Close;
            }
        } else {
            self.failed_turns = 0;
        }
        Disposition::Rearm
    }
}
