//! # lfrt-zenoh — Zenoh samples in lfrt lanes, by priority
//!
//! [Zenoh] carries samples between hosts, each with one of 7 priorities (`RealTime` …
//! `Background`). It offers no file descriptor: its subscriber callbacks run on its own
//! receive threads. So the bridge is a hand-off, in both directions, that never blocks either
//! side, and each priority range keeps a path of its own from the sender's outbox to the lane:
//!
//! ```text
//!  Zenoh rx thread (SCHED_OTHER, or FIFO rx_priority)  lane "control" (SCHED_FIFO 80)
//!  ──────────────────────────────────────────────────  ──────────────────────────────
//!  callback(sample) ── priority → route ──┐
//!    take a free slot (none: `full`)      │  copy key+payload into the slot
//!    post(slot) to the lane's inbox ──────┴────────▶ handler(&Received{key, priority, payload})
//!                                                    slot back to the free list
//!
//!  lane handler: outbox.put(key, bytes) ── the key's priority: slot ──▶ its publisher thread
//!    (that priority's queue full: refused, counted)                     put + sequence number
//! ```
//!
//! * **Links per priority range.** Endpoints with `?prio=1-3` / `?prio=4-7` metadata are TCP
//!   connections of their own (Zenoh's `transport_multilink`, `max_links` on both sides), so a
//!   flood's bytes never queue ahead of a `RealTime` frame in a socket. [`Bridge::wait_for_peers`]
//!   names a `prio=` endpoint without a connection, [`links()`] counts them.
//! * **Routes** map priorities to lanes from TOML (`[[route]] lane = "control", priorities =
//!   ["real-time"]`). Each route is an [`lfrt::inbox`] of `capacity` preallocated slots of
//!   `max_payload` bytes registered in its lane; a route of several priorities delivers the
//!   highest first.
//! * **Never a stall.** The callback takes a slot and posts it with lock-free operations; a
//!   route with no free slot drops the sample and counts it per priority (`full`), an
//!   oversized sample is counted (`oversize`), a priority with no route is counted
//!   (`unrouted`). Zenoh's thread never waits for a lane.
//! * **Publishing from lanes** goes through the [`Outbox`]: a lock-free copy into a
//!   preallocated slot of the key's priority and a wake of that priority's publisher thread,
//!   which calls Zenoh's `put` (which may allocate and block). A full queue refuses the put and
//!   counts it; a blocked `Background` put never delays a `RealTime` one.
//! * **Every loss counted.** Outbox puts carry a sequence number; the receiving bridge counts
//!   the holes as `gaps` per priority ([`Totals::gaps`]).
//! * **Zenoh's threads** are configured from `[threads]` (Zenoh's `ZENOH_RUNTIME`; `rx_priority`
//!   puts the receive workers at `SCHED_FIFO` below every lane) and reported: [`Threads`],
//!   [`zenoh_threads`] (the live ones, with their policy) and the `lfrt-zenoh doctor CONFIG
//!   [--pid PID]` command.
//! * **Peers** are watched by the watcher thread: [`Totals`] has the connected peers and
//!   counts joins and losses; [`Bridge::wait_for_peers`] gives a clear error when none comes.
//!
//! # Real-time contract (lane side)
//! A lane's delivery reads a slot and calls the handler: no allocation, no lock; a turn reads
//! the route's eventfd once and writes it once more if samples remain. [`Outbox::put`] is a
//! copy, two lock-free queue operations and at most one futex wake. Tests prove both with
//! lfrt's allocation counters. Zenoh's own path allocates (about 3 times per received sample);
//! that happens on Zenoh's threads, never on a lane.
//!
//! The configuration keys are in `docs/zenoh.md`.
//!
//! [Zenoh]: https://zenoh.io

#![deny(missing_docs, missing_debug_implementations, unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod bridge;
mod config;
mod doctor;
mod links;
mod outbox;
mod slots;
mod threads;

pub use bridge::{Bridge, Received, Totals};
pub use config::{
    priority_name, Config, Mode, OutboxConfig, PublishConfig, RouteConfig, SessionConfig, Threads,
};
pub use doctor::{doctor, Doctor};
pub use links::{links, Link};
pub use outbox::{Outbox, PublishKey, Refused, SEQUENCE_BYTES};
pub use threads::{zenoh_threads, zenoh_threads_of, ZenohThread};
pub use zenoh;

use std::fmt;
use zenoh::qos::Priority;

/// Zenoh's priorities, highest first (index `p as usize - 1`).
pub const PRIORITIES: [Priority; 7] = [
    Priority::RealTime,
    Priority::InteractiveHigh,
    Priority::InteractiveLow,
    Priority::DataHigh,
    Priority::Data,
    Priority::DataLow,
    Priority::Background,
];

/// Longest key expression a routed sample may carry, in bytes; a longer one is counted as
/// `oversize`.
pub const MAX_KEY_BYTES: usize = 256;

/// Why configuring, opening or running a bridge failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A configuration file is invalid.
    Config {
        /// The file, if the text came from one.
        file: Option<std::path::PathBuf>,
        /// 1-based line, if known.
        line: Option<usize>,
        /// The field, as a path (`route[1].priorities`).
        field: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// Zenoh refused or failed (opening the session, declaring, closing).
    Zenoh {
        /// What was attempted.
        what: &'static str,
        /// Zenoh's error.
        detail: String,
    },
    /// Zenoh's runtimes are configured once per process, and `ZENOH_RUNTIME` already says
    /// something else than `[threads]`.
    Threads {
        /// What the environment says.
        env: String,
        /// What the configuration asks for.
        config: String,
    },
    /// The kernel refused a real-time policy the configuration asks for.
    Privilege {
        /// What was to run at which policy.
        what: String,
        /// What is missing (capability, rlimit) or the kernel's error.
        detail: String,
    },
    /// Peers connected, but some `prio=` endpoints have no TCP connection: their priorities
    /// would share another link.
    MissingLinks {
        /// The endpoints without a connection.
        missing: Vec<String>,
        /// How long it waited.
        waited_ms: u64,
    },
    /// No peer (or router) connected within the time given.
    NoPeer {
        /// The endpoints the session connects to.
        connect: Vec<String>,
        /// How long it waited.
        waited_ms: u64,
    },
    /// A route is missing its handler, or a handler names no route.
    Route(String),
    /// The lane could not take the inbox (unknown lane, handle table full, epoll).
    Lane(lfrt::Error),
    /// An inbox or the publisher thread could not be created.
    Io(std::io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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
            Error::Zenoh { what, detail } => write!(f, "zenoh: {what} failed: {detail}"),
            Error::Threads { env, config } => write!(
                f,
                "ZENOH_RUNTIME is `{env}` but [threads] asks for `{config}`: Zenoh configures its runtimes once per process; unset the variable or make them agree"
            ),
            Error::Privilege { what, detail } => {
                write!(f, "cannot run {what}: {detail}")
            }
            Error::MissingLinks { missing, waited_ms } => write!(
                f,
                "no TCP connection on {missing:?} within {waited_ms} ms: their priorities would share another link; the peer must connect to every `prio=` endpoint, with max_links at least the number of them on both sides"
            ),
            Error::NoPeer { connect, waited_ms } => write!(
                f,
                "no Zenoh peer or router connected within {waited_ms} ms (connect = {connect:?})"
            ),
            Error::Route(m) => write!(f, "{m}"),
            Error::Lane(e) => write!(f, "{e}"),
            Error::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Lane(e) => Some(e),
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<lfrt::Error> for Error {
    fn from(e: lfrt::Error) -> Self {
        Error::Lane(e)
    }
}

fn zenoh_error(what: &'static str, e: impl fmt::Display) -> Error {
    Error::Zenoh {
        what,
        detail: e.to_string(),
    }
}
