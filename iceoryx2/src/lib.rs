//! # lfrt-iceoryx2 — iceoryx2 subscribers served in lfrt lanes
//!
//! [iceoryx2] moves samples between processes on one host through shared memory, without a
//! copy. Its [`Listener`](iceoryx2::port::listener::Listener) is a file descriptor (a Unix
//! datagram socket), so a subscriber and its listener register in a lane's handle set: the
//! lane's leader waits on the subscriber's *gate*, a private epoll set holding the listener's
//! socket and the subscriber's own resume bell (an eventfd), exactly as on a socket, and the
//! thread that takes the event runs the handler at the lane's priority.
//!
//! ```text
//!  sensor process                         this process, lane "control" (SCHED_FIFO 80)
//!  ──────────────                         ─────────────────────────────────────────────
//!  Publisher::publish(v)                  leader: epoll_wait ── gate readable
//!    loan → write → send ─▶ [ shm ] ─┐      promote a follower, then on this thread:
//!    notify (event id 0) ─▶ [ uds ] ─┴──▶   try_wait (count notifications and events)
//!                                           receive ≤ samples_per_turn, handler(&sample)
//!                                           samples left? ring own bell (eventfd)
//!                                           re-arm
//! ```
//!
//! # Real-time contract
//! * **Receive path: no allocation, with one exception.** A dispatch reads the listener's
//!   socket, drains the event counters, receives at most `samples_per_turn` samples and hands
//!   each to the handler as a borrowed `&T` into shared memory (no copy); the sample is
//!   released when the handler returns. Proven by `tests/receive.rs` with lfrt's allocation
//!   counters (`pool_allocations` is 0 after warm-up, also when turns hit the
//!   `samples_per_turn` bound and ring themselves). **The exception:** when the service's set
//!   of publishers changes (one is created, dropped or found dead), iceoryx2 sets up or tears
//!   down that publisher's connection inside the next `receive`, on the lane thread: it opens
//!   and maps the publisher's shared memory and allocates. Each change is counted
//!   (`connections_updated`); keep publishers long-lived, and start them before the lane's
//!   deadlines matter.
//! * **No WaitSet.** iceoryx2's `WaitSet` allocates a `Vec` on every wait; lfrt's epoll set is
//!   the wait, so it is never used.
//! * **No background thread.** iceoryx2 starts none; nothing here starts one either.
//! * **Locks.** Ports of iceoryx2's `ipc_threadsafe` service (needed because a lane's handler
//!   may run on any of its threads) sit behind an iceoryx2 mutex. Only the handler touches its
//!   subscriber and listener, and lfrt runs one handler on one thread at a time, so that mutex
//!   is never contended on the receive path.
//! * **Publish path: one allocation per publish** (measured: `tests/receive.rs`,
//!   `a_publish_allocates_once`): iceoryx2's loan creates the sample's shared state behind an
//!   `Arc`. [`Publisher::publish`] is meant for a sensor process or a non-real-time thread;
//!   see `docs/iceoryx2.md` for publishing from a lane.
//!
//! # Failures (each a clear error or a counted event)
//! Counters are [`Totals`] fields.
//!
//! | case | what happens |
//! |---|---|
//! | the service does not exist at start | [`Error::ServiceMissing`] naming it (or `create` creates it) |
//! | the service carries another payload type or size | [`Error::Incompatible`] with iceoryx2's reason |
//! | `buffer` is more than the service allows (iceoryx2 fixes it when the service is created) | [`Error::BufferTooLarge`] naming the service and both numbers |
//! | the lane falls more than `buffer` samples behind | iceoryx2 overwrites the oldest (safe overflow, which this crate creates its services with): `overwritten` counts them once a turn finds the buffer empty (see [`Totals::overwritten`] for when it is exact) |
//! | a sample is published while [`LaneSubscriber::open`] runs, or before the handle is registered | delivered by the first turn without another publish; notifications `open` read are counted (`notifications_at_open`) |
//! | a publisher appears or leaves | its connection is set up or torn down on the lane thread in the next turn (the one allocation there): `connections_updated` |
//! | a publisher dies | `publishers_dead` counts it once its resources are cleaned up: by [`sweep_dead_nodes`], or by any process that starts a node (a restarted publisher does); a dead *subscriber* is not counted |
//! | the publisher restarts | its samples arrive on the same handle; the dead one is counted as above, and both changes in `connections_updated` |
//! | receiving from one publisher's connection fails | `receive_errors`; the turn goes on (at most [`MAX_RECEIVE_ERRORS_PER_TURN`] failed calls) and delivers what the other publishers sent; the handle stays open |
//! | reading the listener (or the resume bell) fails | `listener_errors` (`resume_errors`); after [`MAX_FAILED_TURNS`] turns in a row that failed so and delivered nothing the handle is closed (`closed_on_errors`), so a gate that stays readable can never spin a FIFO thread |
//!
//! # Configuration
//! In code ([`LaneSubscriber::open`] with [`SubscriberOptions`]) or from TOML ([`Config`]):
//! `[[subscriber]]` tables with `service`, `lane`, `samples_per_turn`, `buffer` and `create`;
//! errors name the file, line and field. The keys are in `docs/iceoryx2.md`.

#![deny(missing_docs, missing_debug_implementations, unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod config;
mod publisher;
mod subscriber;

pub use config::{Config, SubscriberConfig};
pub use iceoryx2;
pub use publisher::Publisher;
pub use subscriber::{
    LaneSubscriber, SubscriberOptions, SubscriberStats, Totals, MAX_FAILED_TURNS,
    MAX_RECEIVE_ERRORS_PER_TURN,
};

use iceoryx2::node::{Node as IoxNode, NodeBuilder};
use iceoryx2::prelude::{EventId, SignalHandlingMode, ZeroCopySend};
use iceoryx2::service::builder::event::EventOpenOrCreateError;
use iceoryx2::service::builder::publish_subscribe::{
    PublishSubscribeOpenError, PublishSubscribeOpenOrCreateError,
};
use iceoryx2::service::port_factory::event::PortFactory as EventFactory;
use iceoryx2::service::port_factory::publish_subscribe::PortFactory as PubSubFactory;
use iceoryx2::service::service_name::ServiceName;
use std::fmt;

/// The iceoryx2 service flavour every port here uses: inter-process, with thread-safe ports
/// (a lane's handler may run on any thread of the lane).
pub type Service = iceoryx2::service::ipc_threadsafe::Service;

/// An iceoryx2 node of [`Service`] (one per process is enough).
pub type Node = IoxNode<Service>;

/// Event id a publisher notifies with after each sample.
pub const DATA_EVENT: usize = 0;
/// Event id iceoryx2 emits when a notifier is created on the service's event service: a
/// [`Publisher`] of this crate appeared (it creates its notifier after its publisher port).
pub const CREATED_EVENT: usize = 1;
/// Event id iceoryx2 emits when the resources of a dead notifier are cleaned up: a publisher
/// process died. (A [`LaneSubscriber`] owns no notifier: it rings itself through its own
/// eventfd, so a dead subscriber emits nothing.)
pub const DEAD_EVENT: usize = 2;
/// Event id iceoryx2 emits when a notifier is dropped: a [`Publisher`] of this crate left (it
/// drops its notifier after its publisher port).
pub const DROPPED_EVENT: usize = 3;
const MAX_EVENT: usize = 3;

/// The default `buffer` of a subscriber (samples), and the least a publish-subscribe service
/// this crate creates allows per subscriber ([`Publisher::create`], a subscriber with
/// `create`). iceoryx2's own default is 2, with which a lane that fell 3 samples behind lost
/// the oldest; 16 is `samples_per_turn`'s default, so one turn can take a full buffer. A
/// subscriber of a service made elsewhere that allows fewer gets what the service allows.
pub const SUBSCRIBER_BUFFER: usize = 16;

/// The largest `buffer` (samples). The publisher's shared memory holds `buffer` samples for
/// each subscriber the service allows, fixed when the service is created.
pub const MAX_BUFFER: usize = 4096;

/// Why opening, registering or publishing failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The publish-subscribe service does not exist (and `create` was not asked for).
    ServiceMissing {
        /// The service name.
        service: String,
    },
    /// The service exists with another payload type, size or alignment, or other settings.
    Incompatible {
        /// The service name.
        service: String,
        /// iceoryx2's reason and what this side asked for.
        detail: String,
    },
    /// A subscriber asked for a larger buffer than the service allows. iceoryx2 fixes the
    /// most a service allows per subscriber (`subscriber_max_buffer_size`) when the service is
    /// created.
    BufferTooLarge {
        /// The service name.
        service: String,
        /// The `buffer` asked for.
        requested: usize,
        /// The most the service allows.
        allowed: usize,
    },
    /// Another iceoryx2 call failed.
    Iceoryx {
        /// What was attempted.
        what: &'static str,
        /// The service name ("" for a node).
        service: String,
        /// iceoryx2's error.
        detail: String,
    },
    /// A system call for a subscriber's gate or resume bell failed (epoll, eventfd).
    Io {
        /// What was attempted.
        what: &'static str,
        /// The service name.
        service: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The lane could not take the handle (unknown lane, handle table full, epoll refused).
    Lane(lfrt::Error),
    /// A configuration file is invalid.
    Config {
        /// The file, if the text came from one.
        file: Option<std::path::PathBuf>,
        /// 1-based line, if known.
        line: Option<usize>,
        /// The field, as a path (`subscriber[1].lane`).
        field: String,
        /// What is wrong and what is allowed.
        message: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ServiceMissing { service } => write!(
                f,
                "iceoryx2 service `{service}` does not exist: start its publisher first, or set `create = true`"
            ),
            Error::Incompatible { service, detail } => {
                write!(f, "iceoryx2 service `{service}` is incompatible: {detail}")
            }
            Error::BufferTooLarge {
                service,
                requested,
                allowed,
            } => write!(
                f,
                "iceoryx2 service `{service}`: a subscriber buffer of {requested} samples was asked for, but the service allows at most {allowed} (its `subscriber_max_buffer_size`, fixed when it was created)"
            ),
            Error::Iceoryx {
                what,
                service,
                detail,
            } if service.is_empty() => write!(f, "iceoryx2: {what} failed: {detail}"),
            Error::Iceoryx {
                what,
                service,
                detail,
            } => write!(f, "iceoryx2 service `{service}`: {what} failed: {detail}"),
            Error::Io {
                what,
                service,
                source,
            } => write!(f, "iceoryx2 service `{service}`: {what} failed: {source}"),
            Error::Lane(e) => write!(f, "{e}"),
            Error::Config {
                file,
                line,
                field,
                message,
            } => {
                if let Some(file) = file {
                    write!(f, "{}:", file.display())?;
                }
                if let Some(line) = line {
                    write!(f, "{line}:")?;
                }
                if file.is_some() || line.is_some() {
                    write!(f, " ")?;
                }
                write!(f, "{field}: {message}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Lane(e) => Some(e),
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<lfrt::Error> for Error {
    fn from(e: lfrt::Error) -> Self {
        Error::Lane(e)
    }
}

fn iceoryx(what: &'static str, service: &str, e: impl fmt::Debug) -> Error {
    Error::Iceoryx {
        what,
        service: service.to_owned(),
        detail: format!("{e:?}"),
    }
}

/// Creates this process's iceoryx2 node, with iceoryx2's own SIGINT/SIGTERM handling off (the
/// service decides how it stops, e.g. with lfrt's termination signals), and iceoryx2's log
/// level at `Error` unless `IOX2_LOG_LEVEL` says otherwise (its default level warns on stderr
/// that no config file was loaded).
///
/// # Errors
/// [`Error::Iceoryx`] if iceoryx2 cannot create the node (e.g. `/dev/shm` or `/tmp/iceoryx2`
/// not writable).
///
/// # Examples
/// ```no_run
/// let node = lfrt_iceoryx2::node()?;
/// # Ok::<(), lfrt_iceoryx2::Error>(())
/// ```
pub fn node() -> Result<Node, Error> {
    iceoryx2::prelude::set_log_level_from_env_or(iceoryx2::prelude::LogLevel::Error);
    NodeBuilder::new()
        .signal_handling_mode(SignalHandlingMode::Disabled)
        .create::<Service>()
        .map_err(|e| iceoryx("creating a node", "", e))
}

/// Cleans up the resources of dead iceoryx2 nodes (crashed processes), which makes iceoryx2
/// send [`DEAD_EVENT`] to the listeners of the event services where they owned a notifier: a
/// [`LaneSubscriber`] whose publisher died counts it in `publishers_dead` (a dead subscriber
/// owned none). Returns how many dead nodes were cleaned up.
///
/// Call it from a non-real-time thread (it lists nodes and allocates), e.g. a supervisor every
/// second. A restarted publisher does the same when it creates its node.
///
/// # Examples
/// ```no_run
/// let node = lfrt_iceoryx2::node()?;
/// let cleaned = lfrt_iceoryx2::sweep_dead_nodes(&node);
/// # let _ = cleaned;
/// # Ok::<(), lfrt_iceoryx2::Error>(())
/// ```
pub fn sweep_dead_nodes(node: &Node) -> u64 {
    node.try_cleanup_dead_nodes().cleanups
}

fn service_name(service: &str) -> Result<ServiceName, Error> {
    ServiceName::new(service).map_err(|e| Error::Incompatible {
        service: service.to_owned(),
        detail: format!("not a valid service name ({e:?})"),
    })
}

/// Opens `service` for payload `T`, or, if it does not exist and `create` is `Some(max)`,
/// creates it with safe overflow (a full subscriber buffer overwrites its oldest sample) and
/// room for `max` samples per subscriber. An existing service is opened as it is (its payload
/// type must match): what it allows is checked by the caller.
fn pubsub_service<T>(
    node: &Node,
    service: &str,
    create: Option<usize>,
) -> Result<PubSubFactory<Service, T, ()>, Error>
where
    T: fmt::Debug + ZeroCopySend + 'static,
{
    let name = service_name(service)?;
    let builder = || node.service_builder(&name).publish_subscribe::<T>();
    let max = match (builder().open(), create) {
        (Ok(factory), _) => return Ok(factory),
        (Err(PublishSubscribeOpenError::DoesNotExist), Some(max)) => max,
        (Err(e), _) => return Err(open_error::<T>(service, e)),
    };
    match builder()
        .subscriber_max_buffer_size(max)
        .enable_safe_overflow(true)
        .open_or_create()
    {
        Ok(factory) => Ok(factory),
        // Created by another process since, with less room or without safe overflow: take it
        // as it is, like any service made elsewhere.
        Err(PublishSubscribeOpenOrCreateError::PublishSubscribeOpenError(
            PublishSubscribeOpenError::DoesNotSupportRequestedMinBufferSize
            | PublishSubscribeOpenError::IncompatibleOverflowBehavior,
        )) => builder().open().map_err(|e| open_error::<T>(service, e)),
        Err(PublishSubscribeOpenOrCreateError::PublishSubscribeOpenError(e)) => {
            Err(open_error::<T>(service, e))
        }
        Err(e) => Err(iceoryx("creating the service", service, e)),
    }
}

/// The error for a publish-subscribe service that could not be opened for payload `T`.
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

/// Opens (or creates) the event service that carries `service`'s notifications, with the
/// event ids this crate uses: data from publishers, and iceoryx2's own events when a notifier
/// is created, dropped or found dead. Only publishers own notifiers there, so those events
/// track the service's publishers. Publishers and subscribers of this crate open it the same
/// way, so either side may create it.
fn event_service(node: &Node, service: &str) -> Result<EventFactory<Service>, Error> {
    node.service_builder(&service_name(service)?)
        .event()
        .event_id_max_value(MAX_EVENT)
        .notifier_created_event(EventId::new(CREATED_EVENT))
        .notifier_dropped_event(EventId::new(DROPPED_EVENT))
        .notifier_dead_event(EventId::new(DEAD_EVENT))
        .open_or_create()
        .map_err(|e| match e {
            EventOpenOrCreateError::EventOpenError(o) => Error::Incompatible {
                service: service.to_owned(),
                detail: format!(
                    "its event service was created with other settings ({o:?}); lfrt-iceoryx2 needs event ids up to {MAX_EVENT}: notifier created {CREATED_EVENT}, dead {DEAD_EVENT}, dropped {DROPPED_EVENT}"
                ),
            },
            e => iceoryx("opening the event service", service, e),
        })
}
