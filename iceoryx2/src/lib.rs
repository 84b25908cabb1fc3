//! # lfrt-iceoryx2 — iceoryx2 subscribers served in lfrt lanes
//!
//! [iceoryx2] moves samples between processes on one host through shared memory, without a
//! copy. Its [`Listener`](iceoryx2::port::listener::Listener) is a file descriptor (a Unix
//! datagram socket), so a subscriber and its listener register **directly** in a lane's handle
//! set: the lane's leader waits on the listener's fd with `EPOLLONESHOT`, exactly as on a
//! socket, and the thread that takes the event runs the handler at the lane's priority.
//!
//! ```text
//!  sensor process                         this process, lane "control" (SCHED_FIFO 80)
//!  ──────────────                         ─────────────────────────────────────────────
//!  Publisher::publish(v)                  leader: epoll_wait ── listener fd readable
//!    loan → write → send ─▶ [ shm ] ─┐      promote a follower, then on this thread:
//!    notify (event id 0) ─▶ [ uds ] ─┴──▶   try_wait (count notifications)
//!                                           receive ≤ samples_per_turn, handler(&sample)
//!                                           samples left? ring own listener (event id 1)
//!                                           re-arm (EPOLL_CTL_MOD | ONESHOT)
//! ```
//!
//! # Real-time contract
//! * **Receive path: no allocation.** A dispatch reads the listener's socket, drains the event
//!   counters, receives at most `samples_per_turn` samples and hands each to the handler as a
//!   borrowed `&T` into shared memory (no copy); the sample is released when the handler
//!   returns. Proven by `tests/receive.rs` with lfrt's allocation counters (`pool_allocations`
//!   is 0 after warm-up, also when turns hit the `samples_per_turn` bound and ring themselves).
//! * **No WaitSet.** iceoryx2's `WaitSet` allocates a `Vec` on every wait; lfrt's epoll set is
//!   the wait, so it is never used.
//! * **No background thread.** iceoryx2 starts none; nothing here starts one either.
//! * **Locks.** Ports of iceoryx2's `ipc_threadsafe` service (needed because a lane's handler
//!   may run on any of its threads) sit behind an iceoryx2 mutex. Only the handler touches its
//!   subscriber and listener, and `EPOLLONESHOT` lets one thread at a time run it, so that
//!   mutex is never contended on the receive path.
//! * **Publish path: one allocation per publish** (measured: `tests/receive.rs`,
//!   `a_publish_allocates_once`): iceoryx2's loan creates the sample's shared state behind an
//!   `Arc`. [`Publisher::publish`] is meant for a sensor process or a non-real-time thread;
//!   see `docs/iceoryx2.md` for publishing from a lane.
//!
//! # Failures (each a clear error or a counted event)
//! | case | what happens |
//! |---|---|
//! | the service does not exist at start | [`Error::ServiceMissing`] naming it (or `create = true` creates it) |
//! | the service carries another payload type or size | [`Error::Incompatible`] with iceoryx2's reason |
//! | the publisher dies | `publishers_dead` counts it once its resources are cleaned up: by [`sweep_dead_nodes`], or by any process that starts a node (a restarted publisher does) |
//! | the publisher restarts | its samples arrive on the same handle; the dead one is counted as above |
//! | receiving or the listener fails | `receive_errors` / `listener_errors`; after [`MAX_FAILED_TURNS`] turns in a row that failed and moved nothing the handle is closed (`closed_on_errors`), so a listener fd that stays readable can never spin a FIFO thread |
//!
//! # Configuration
//! In code ([`LaneSubscriber::open`]) or from TOML ([`Config`]): `[[subscriber]]` tables with
//! `service`, `lane`, `samples_per_turn` and `create`; errors name the file, line and field.
//! The keys are in `docs/iceoryx2.md`.

#![deny(missing_docs, missing_debug_implementations, unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod config;
mod publisher;
mod subscriber;

pub use config::{Config, SubscriberConfig};
pub use iceoryx2;
pub use publisher::Publisher;
pub use subscriber::{LaneSubscriber, SubscriberStats, Totals, MAX_FAILED_TURNS};

use iceoryx2::node::{Node as IoxNode, NodeBuilder};
use iceoryx2::prelude::{EventId, SignalHandlingMode};
use iceoryx2::service::builder::event::EventOpenOrCreateError;
use iceoryx2::service::port_factory::event::PortFactory as EventFactory;
use iceoryx2::service::service_name::ServiceName;
use std::fmt;

/// The iceoryx2 service flavour every port here uses: inter-process, with thread-safe ports
/// (a lane's handler may run on any thread of the lane).
pub type Service = iceoryx2::service::ipc_threadsafe::Service;

/// An iceoryx2 node of [`Service`] (one per process is enough).
pub type Node = IoxNode<Service>;

/// Event id a publisher notifies with after each sample.
pub const DATA_EVENT: usize = 0;
/// Event id a subscriber rings its own listener with when a turn stopped at
/// `samples_per_turn` with samples left.
pub const RESUME_EVENT: usize = 1;
/// Event id iceoryx2 emits when the resources of a dead notifier (a crashed publisher) are
/// cleaned up.
pub const DEAD_EVENT: usize = 2;
const MAX_EVENT: usize = 3;

/// Samples each subscriber's buffer holds in a publish-subscribe service this crate creates
/// (`Publisher::create`, a subscriber with `create = true`); a subscriber of a service made
/// elsewhere gets that service's size. iceoryx2's own default is 2, with which a lane that fell
/// 3 samples behind lost the oldest; 16 is `samples_per_turn`'s default, so one turn can take a
/// full buffer.
pub const SUBSCRIBER_BUFFER: usize = 16;

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
    /// Another iceoryx2 call failed.
    Iceoryx {
        /// What was attempted.
        what: &'static str,
        /// The service name ("" for a node).
        service: String,
        /// iceoryx2's error.
        detail: String,
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
/// send [`DEAD_EVENT`] to the listeners of their services: a [`LaneSubscriber`] whose publisher
/// died counts it in `publishers_dead`. Returns how many dead nodes were cleaned up.
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

/// Opens (or creates) the event service that carries `service`'s notifications, with the
/// event ids this crate uses. Publishers and subscribers of this crate open it the same way,
/// so either side may create it.
fn event_service(node: &Node, service: &str) -> Result<EventFactory<Service>, Error> {
    node.service_builder(&service_name(service)?)
        .event()
        .event_id_max_value(MAX_EVENT)
        .disable_notifier_created_event()
        .disable_notifier_dropped_event()
        .notifier_dead_event(EventId::new(DEAD_EVENT))
        .open_or_create()
        .map_err(|e| match e {
            EventOpenOrCreateError::EventOpenError(o) => Error::Incompatible {
                service: service.to_owned(),
                detail: format!(
                    "its event service was created with other settings ({o:?}); lfrt-iceoryx2 needs event ids up to {MAX_EVENT}, dead-notifier event {DEAD_EVENT}, no created/dropped events"
                ),
            },
            e => iceoryx("opening the event service", service, e),
        })
}
