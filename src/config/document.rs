//! The document: the configuration's serde types, their defaults and the few facts derived
//! from them alone. Nothing here probes the machine or binds a socket; that is `check/`.

use super::BandConfig;
use crate::engine::follower_queue::Promotion;
pub use crate::engine::lane::{OnOverrun, RtMode};
pub use crate::observe::recorder::TraceConfig;
use serde::Deserialize;
use std::net::SocketAddr;

/// Scheduling policy of a lane's threads (`policy = "fifo" | "rr" | "other"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// `SCHED_FIFO`: run until blocking or preempted by a higher priority.
    #[default]
    Fifo,
    /// `SCHED_RR`: like FIFO, with a time slice among equal priorities.
    Rr,
    /// `SCHED_OTHER`: the normal time-sharing policy (`priority` then only orders followers).
    Other,
    /// `SCHED_DEADLINE` with the lane's [`Deadline`] parameters: guaranteed CPU bandwidth for
    /// periodic work, and a runaway handler is throttled by the kernel. Deadline threads run
    /// ahead of every FIFO/RR thread; `priority` (1..=99) then only ranks the lane in the plan
    /// and orders its followers.
    Deadline,
}

/// A deadline lane's reservation (`deadline = { runtime_us = 200, deadline_us = 1000,
/// period_us = 1000 }`): each thread may run `runtime_us` in every `period_us`, within
/// `deadline_us` of the period's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deadline {
    /// CPU time per period (µs), at least 1.
    pub runtime_us: u64,
    /// Relative deadline (µs), `runtime_us ≤ deadline_us ≤ period_us`.
    pub deadline_us: u64,
    /// Period (µs).
    pub period_us: u64,
}

/// A built-in handler, so that a configuration file alone runs a service
/// (`[[lane.handler]]` with `kind = "udp-echo" | "tcp-echo" | "timer"`).
///
/// The echoes answer each event at once. `work_us`, the busy work a benchmark adds per event
/// to stand in for handler cost, is a key of the `lfrt` command's configuration, not of this
/// one: the command's loader takes it out of the file and hands it to the runtime it builds
/// (`Runtime::with_echo_work`, feature `tools`), and `lfrt::load_config` refuses it, saying
/// so.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum HandlerConfig {
    /// Echo each datagram verbatim to its sender.
    UdpEcho {
        /// Address to bind.
        #[serde(deserialize_with = "named::bind")]
        bind: SocketAddr,
    },
    /// Accept TCP connections and echo each stream's bytes back.
    TcpEcho {
        /// Address to listen on.
        #[serde(deserialize_with = "named::bind")]
        bind: SocketAddr,
        /// Connections served at once: the listener preallocates a table of this many, each
        /// with a buffer of the lane's `buffer_bytes` for the echo its peer has not taken
        /// yet. A connection beyond it is closed unserved (`connections_refused`). Default 64.
        #[serde(
            default = "named::sixty_four",
            deserialize_with = "named::max_connections"
        )]
        max_connections: usize,
    },
    /// Periodic timers (absolute timerfd) that record their wake-up latency.
    Timer {
        /// Period (µs).
        #[serde(deserialize_with = "named::interval_us")]
        interval_us: u64,
        /// How many timers.
        #[serde(default = "named::one", deserialize_with = "named::count")]
        count: usize,
        /// Each further timer's period is this much longer (µs), as cyclictest's `-d`.
        #[serde(default, deserialize_with = "named::distance_us")]
        distance_us: u64,
    },
}

/// Readers for the fields of [`HandlerConfig`].
///
/// serde reads an internally tagged enum (`kind = "timer"`) through a buffer that forgets where
/// each value was written, so an error in one of its values would neither carry a position nor
/// say which field holds it (`invalid type: string "x", expected u64`). Each handler field is
/// read through one of these, which put the field's name in front of the message
/// (`` `interval_us`: invalid type: … ``); [`split_named`] takes it apart again.
pub(crate) mod named {
    use serde::de::{Deserialize, Deserializer, Error};
    use std::net::SocketAddr;

    macro_rules! fields {
        ($($name:ident: $ty:ty),* $(,)?) => {$(
            pub(super) fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                <$ty>::deserialize(d)
                    .map_err(|e| D::Error::custom(format_args!("`{}`: {e}", stringify!($name))))
            }
        )*};
    }
    fields!(
        interval_us: u64,
        count: usize,
        distance_us: u64,
        max_connections: usize,
    );

    /// An address written as text, `"127.0.0.1:7000"` or `"[::1]:7000"`.
    pub(crate) fn bind<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        let text =
            String::deserialize(d).map_err(|e| D::Error::custom(format_args!("`bind`: {e}")))?;
        text.parse().map_err(|_| {
            D::Error::custom(format_args!(
                "`bind`: `{text}` is not an address like \"127.0.0.1:7000\""
            ))
        })
    }

    /// `[lane.bound] connect`, an address written as text like a handler's `bind`.
    pub(crate) fn connect<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(|_| {
            D::Error::custom(format_args!(
                "`{text}` is not an address like \"127.0.0.1:7100\""
            ))
        })
    }

    pub(super) fn one() -> usize {
        1
    }

    pub(super) fn sixty_four() -> usize {
        64
    }
}

/// Splits a message that [`named`] prefixed into the field and the rest:
/// `` `bind`: `x` is not an address `` → `("bind", "`x` is not an address")`.
#[cfg_attr(not(feature = "toml"), allow(dead_code))]
pub(crate) fn split_named(message: &str) -> Option<(&str, &str)> {
    let (field, rest) = message.strip_prefix('`')?.split_once("`: ")?;
    field
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b == b'_')
        .then_some((field, rest))
}

/// One Leader/Followers lane: a pool of threads at one priority sharing one handle set
/// (a `[[lane]]` table; every key but `name` may be left out).
///
/// # Examples
/// ```
/// use lfrt::{LaneConfig, Policy, Promotion};
/// let mut feed = LaneConfig::new("feed", Policy::Fifo, 60);
/// feed.threads = 2;
/// feed.cpus = Some(vec![0]);
/// feed.promotion = Promotion::Lifo;
/// let admin = LaneConfig::new("admin", Policy::Other, 0); // time-shared, priority 0
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaneConfig {
    /// Name, used in thread names (`lf-<name>-<n>`) and reports.
    pub name: String,
    /// Real-time priority 1..=99 (distinct across RT lanes); 0 with `Policy::Other`.
    #[serde(default)]
    pub priority: u8,
    /// Scheduling policy.
    #[serde(default)]
    pub policy: Policy,
    /// The reservation of a `policy = "deadline"` lane (required then, refused otherwise).
    #[serde(default)]
    pub deadline: Option<Deadline>,
    /// Number of pool threads (1..=64).
    #[serde(default = "LaneConfig::default_threads")]
    pub threads: usize,
    /// CPUs the threads may run on; `None` = all CPUs of the process.
    #[serde(default)]
    pub cpus: Option<Vec<usize>>,
    /// Follower promotion order.
    #[serde(default)]
    pub promotion: Promotion,
    /// Deferred promotion (µs; `promotion = "priority" | "lifo" | "fifo"`): a leader whose
    /// wait took everything that was ready (fewer events than it asked for) keeps its role,
    /// and wakes no follower, while it processes them, if their handlers ran for less than
    /// this in all in their recent runs; otherwise (or for a handle that has not run yet, or a
    /// wait that filled its batch) it promotes a follower at once. Nothing is armed per event.
    /// A handler that runs far longer than before is caught by the watchdog, which hands a
    /// role kept this long to a follower at its next look (every millisecond): an event that
    /// arrives meanwhile waits at most this long plus one look, or until the leader is back if
    /// that is sooner. 0 promotes before processing, as the pattern's classic form (a wake-up
    /// per event). 0..=1000000, default 50.
    #[serde(default = "LaneConfig::default_promote_after_us")]
    pub promote_after_us: u64,
    /// Per-thread priorities (one per thread, each ≤ `priority` and above every lower lane's).
    #[serde(default)]
    pub thread_priorities: Option<Vec<u8>>,
    /// Size of each thread's preallocated receive buffer, scratch buffer and datagram slots.
    #[serde(default = "LaneConfig::default_buffer_bytes")]
    pub buffer_bytes: usize,
    /// Capacity of the lane's handle table.
    #[serde(default = "LaneConfig::default_max_handles")]
    pub max_handles: usize,
    /// Stack size of each pool thread; all of it is pre-faulted.
    #[serde(default = "LaneConfig::default_stack_bytes")]
    pub stack_bytes: usize,
    /// Handler time budget (µs) for the overrun watchdog; `None` = no watchdog.
    #[serde(default)]
    pub budget_us: Option<u64>,
    /// What the watchdog does on an overrun.
    #[serde(default)]
    pub on_overrun: OnOverrun,
    /// Built-in handlers registered at start (`[[lane.handler]]`).
    #[serde(default, rename = "handler")]
    pub handlers: Vec<HandlerConfig>,
    /// Lane borrowing: lower lanes (by name) whose idle threads this lane may borrow when all
    /// of its own threads are busy; each lent thread runs at this lane's priority for one
    /// event. Empty (the default): no borrowing.
    #[serde(default)]
    pub borrow_from: Vec<String>,
    /// The most threads borrowed at once, over all `borrow_from` lanes (default 1 when
    /// `borrow_from` is set; refused without it).
    #[serde(default)]
    pub max_borrowed: Option<usize>,
    /// The lane's kind: `None` for a Leader/Followers lane over its handle set; `Some` for a
    /// **bound** lane (`[lane.bound]`), whose threads serve a [`BoundPool`](crate::bound::BoundPool)
    /// over one connection to a back-end. See [`BoundLane`].
    #[serde(default)]
    pub bound: Option<BoundLane>,
    /// Task slots of the lane's async executor ([`Lane::spawn`](crate::Lane::spawn)); 0 (the
    /// default): the lane runs no tasks and has no executor handles. 0..=65536.
    #[serde(default)]
    pub max_tasks: usize,
    /// Bytes of one task slot: the largest future (or output) a task may have. Alignment is
    /// 64. 64..=1048576, default 512.
    #[serde(default = "LaneConfig::default_task_bytes")]
    pub task_bytes: usize,
    /// Flight-recorder trigger (µs): a dispatch whose latency (due or wake-up → handler entry)
    /// exceeds this makes the recorder write the window around it ([`TraceConfig`]); `None`
    /// (the default): no latency trigger. 1..=10000000.
    #[serde(default)]
    pub trace_over_us: Option<u64>,
}

/// A bound lane (`[lane.bound]`, [`LaneConfig::bound`]): the runtime connects to `connect`
/// in [`Runtime::new`](crate::Runtime::new) and runs a
/// [`BoundPool`](crate::bound::BoundPool) over that one connection. Its `threads` are spawned
/// and set up like any lane's (policy, priority, CPUs, pre-faulted stack) and `serve` the
/// pool: they lead (reading replies and handing each to its waiter) or follow, and run the
/// handlers registered on the lane's registry (the pool's unbound handles). Calls to the
/// back-end are made with waiters of [`Lane::bound_pool`](crate::Lane::bound_pool), by
/// those handlers or by any other thread.
///
/// The pool takes the lane's `promotion` (not `"concurrent"`), `max_handles` and
/// `buffer_bytes`; the other sizes are here. A connection that fails (the back-end closes it,
/// a malformed frame) is not re-established: calls fail with its error while the threads go on
/// serving the lane's handlers, until the runtime is shut down. The overrun watchdog does not
/// watch a bound lane (`budget_us` is refused), and the post-warm-up allocation and fault
/// counts are not measured on its threads.
///
/// ```toml
/// [[lane]]
/// name = "front"
/// policy = "fifo"
/// priority = 20
/// threads = 4
/// [lane.bound]
/// connect = "127.0.0.1:7100"
/// max_waiters = 64
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundLane {
    /// The back-end's address (`"127.0.0.1:7100"`): an explicit address and port.
    #[serde(deserialize_with = "named::connect")]
    pub connect: SocketAddr,
    /// Waiter slots: at least one per thread of the lane (the runtime leases those), plus one
    /// per handler or outside thread that calls the back-end. 1..=[`MAX_WAITERS`](crate::bound::MAX_WAITERS).
    #[serde(default = "BoundLane::default_max_waiters")]
    pub max_waiters: usize,
    /// Largest reply body (bytes); each waiter slot preallocates one.
    /// 1..=[`MAX_BODY`](crate::bound::MAX_BODY).
    #[serde(default = "BoundLane::default_max_body")]
    pub max_body: usize,
    /// How deeply unbound handlers may nest on one thread (at least 1).
    #[serde(default = "BoundLane::default_max_nesting")]
    pub max_nesting: u32,
}

impl BoundLane {
    /// A bound lane's settings for the back-end at `connect`, with the defaults of
    /// [`BoundConfig`](crate::bound::BoundConfig): 64 waiters, 4 KiB replies, nesting 2.
    pub fn new(connect: SocketAddr) -> BoundLane {
        BoundLane {
            connect,
            max_waiters: Self::default_max_waiters(),
            max_body: Self::default_max_body(),
            max_nesting: Self::default_max_nesting(),
        }
    }
    fn default_max_waiters() -> usize {
        crate::bound::BoundConfig::default().max_waiters
    }
    fn default_max_body() -> usize {
        crate::bound::BoundConfig::default().max_body
    }
    fn default_max_nesting() -> u32 {
        crate::bound::BoundConfig::default().max_nesting
    }

    /// The pool of a bound lane `g` whose [`LaneConfig::bound`] is `self`: the sizes of
    /// `self`, the lane's promotion, handle table and buffer size.
    pub(crate) fn pool_config(&self, g: &LaneConfig) -> crate::bound::BoundConfig {
        crate::bound::BoundConfig {
            max_waiters: self.max_waiters,
            max_body: self.max_body,
            promotion: g.promotion,
            max_handles: g.max_handles,
            buffer_bytes: g.buffer_bytes,
            max_nesting: self.max_nesting,
        }
    }
}

/// Default size of a task slot (`task_bytes`).
const DEFAULT_TASK_BYTES: usize = 512;
/// Default deferred promotion (`promote_after_us`).
pub(crate) const DEFAULT_PROMOTE_AFTER_US: u64 = 50;
/// Default number of pool threads per lane.
const DEFAULT_THREADS: usize = 2;
/// Default per-thread buffer size.
pub(crate) const DEFAULT_BUFFER_BYTES: usize = 64 * 1024;
/// Default handle table size.
pub(crate) const DEFAULT_MAX_HANDLES: usize = 1024;
/// Default pool thread stack size.
pub(crate) const DEFAULT_STACK_BYTES: usize = 256 * 1024;

impl LaneConfig {
    /// A lane of the given scheduling `policy` and `priority`, with defaults for the rest:
    /// 2 threads, all CPUs, priority promotion, 64 KiB buffers, 1024 handles, 256 KiB stacks,
    /// no watchdog, no built-in handlers.
    ///
    /// `priority` is 1..=99 for [`Policy::Fifo`], [`Policy::Rr`] and [`Policy::Deadline`], and
    /// must be 0 for [`Policy::Other`]. A [`Policy::Deadline`] lane also needs
    /// [`deadline`](Self::deadline) set before the configuration is validated.
    ///
    /// ```
    /// use lfrt::{LaneConfig, Policy};
    /// let control = LaneConfig::new("control", Policy::Fifo, 80);
    /// let batch = LaneConfig::new("batch", Policy::Other, 0);
    /// assert_eq!((control.policy, batch.priority), (Policy::Fifo, 0));
    /// ```
    pub fn new(name: impl Into<String>, policy: Policy, priority: u8) -> LaneConfig {
        LaneConfig {
            name: name.into(),
            priority,
            policy,
            deadline: None,
            threads: DEFAULT_THREADS,
            cpus: None,
            promotion: Promotion::Priority,
            promote_after_us: DEFAULT_PROMOTE_AFTER_US,
            thread_priorities: None,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            max_handles: DEFAULT_MAX_HANDLES,
            stack_bytes: DEFAULT_STACK_BYTES,
            budget_us: None,
            on_overrun: OnOverrun::Report,
            handlers: Vec::new(),
            bound: None,
            borrow_from: Vec::new(),
            max_borrowed: None,
            max_tasks: 0,
            task_bytes: DEFAULT_TASK_BYTES,
            trace_over_us: None,
        }
    }

    fn default_task_bytes() -> usize {
        DEFAULT_TASK_BYTES
    }
    fn default_promote_after_us() -> u64 {
        DEFAULT_PROMOTE_AFTER_US
    }

    // serde's `default = "…"` takes a function, not a constant.
    fn default_threads() -> usize {
        DEFAULT_THREADS
    }
    fn default_buffer_bytes() -> usize {
        DEFAULT_BUFFER_BYTES
    }
    fn default_max_handles() -> usize {
        DEFAULT_MAX_HANDLES
    }
    fn default_stack_bytes() -> usize {
        DEFAULT_STACK_BYTES
    }

    /// Priority of thread `i` of the lane.
    pub fn thread_priority(&self, i: usize) -> u8 {
        self.thread_priorities
            .as_ref()
            .and_then(|p| p.get(i).copied())
            .unwrap_or(self.priority)
    }

    /// Whether the lane asks for a real-time policy.
    pub fn is_rt(&self) -> bool {
        self.policy != Policy::Other
    }

    /// Handles the lane's built-in handlers register (one per timer of a `timer` handler).
    pub(crate) fn configured_handles(&self) -> usize {
        self.handlers
            .iter()
            .map(|h| {
                if let HandlerConfig::Timer { count, .. } = h {
                    *count
                } else {
                    1
                }
            })
            .sum::<usize>()
            + if self.max_tasks > 0 { 2 } else { 0 }
    }

    /// Timer expiries per second that the lane's built-in timers deliver, all together.
    pub fn timer_events_per_sec(&self) -> f64 {
        self.handlers
            .iter()
            .map(|h| match *h {
                HandlerConfig::Timer {
                    interval_us,
                    count,
                    distance_us,
                } => (0..count as u64)
                    .map(|k| {
                        let period = interval_us.saturating_add(k.saturating_mul(distance_us));
                        1e6 / period.max(1) as f64
                    })
                    .sum(),
                _ => 0.0,
            })
            .sum()
    }
}

/// The whole runtime: global settings and its lanes.
///
/// In a file the global settings sit in a `[runtime]` table and the lanes in `[[lane]]`
/// tables; both may be left out (and then validation asks for a lane).
///
/// # Examples
/// ```
/// use lfrt::{LaneConfig, Policy, RtMode, RuntimeConfig};
/// let cfg = RuntimeConfig {
///     rt: RtMode::Required, // refuse to run without SCHED_FIFO
///     lock_memory: true,
///     lanes: vec![LaneConfig::new("control", Policy::Fifo, 80)],
///     bands: Vec::new(), // [[band]]: priority bands on one port
///     trace: Default::default(), // [trace]: the flight recorder, on with its defaults
/// };
/// # let _ = cfg;
/// ```
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(from = "Document")]
pub struct RuntimeConfig {
    /// Real-time mode.
    pub rt: RtMode,
    /// `mlockall(MCL_CURRENT | MCL_FUTURE)` before the pool starts.
    pub lock_memory: bool,
    /// The lanes, highest priority first or in any order.
    pub lanes: Vec<LaneConfig>,
    /// Priority bands on shared ports (`[[band]]`), served by the lanes they name.
    pub bands: Vec<BandConfig>,
    /// The flight recorder (`[trace]`): on by default, writing only when a trigger fires.
    pub trace: TraceConfig,
}

/// The layout of a configuration file, which nests [`RuntimeConfig`]'s global settings in a
/// `[runtime]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    runtime: Settings,
    #[serde(default)]
    lane: Vec<LaneConfig>,
    #[serde(default)]
    band: Vec<BandConfig>,
    #[serde(default)]
    trace: TraceConfig,
}

/// The `[runtime]` table.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Settings {
    #[serde(default)]
    rt: RtMode,
    #[serde(default)]
    lock_memory: bool,
}

impl From<Document> for RuntimeConfig {
    fn from(d: Document) -> RuntimeConfig {
        RuntimeConfig {
            rt: d.runtime.rt,
            lock_memory: d.runtime.lock_memory,
            lanes: d.lane,
            bands: d.band,
            trace: d.trace,
        }
    }
}
