//! Runtime configuration: the types a TOML file or code fills in, and their validation.
//!
//! The types are `serde::Deserialize` under the names a configuration file uses (unknown keys
//! are refused), so any serde format can fill them; with the `toml` feature, [`load`] reads a
//! TOML file. [`RuntimeConfig::validate`] is the single place where configurations are checked:
//! the loader calls it and only adds the file name and line to the errors.
//!
//! The memory a configuration preallocates is counted here too ([`GroupConfig::memory`]), from
//! the same sizes the runtime allocates, so `lfrt check` shows what `lfrt run` will take and
//! validation can refuse what the machine cannot hold.

mod band;
#[cfg(feature = "toml")]
mod file;

pub use band::{BandClassify, BandConfig, BandHandler, BandPlan};

#[cfg(feature = "toml")]
pub use file::{load, load_with_overrides, parse, Override, OverrideSource, Provenance};

use crate::engine::follower_queue::{Promotion, MAX_GROUP_THREADS};
use crate::engine::handler::Context;
use crate::engine::handler::Handles;
use crate::observe::telemetry;
use crate::sys::{mem, sched};
use crate::Error;
use serde::Deserialize;
use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// What to do when real-time scheduling cannot be had (`rt = "best-effort" | "required"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RtMode {
    /// Warn and run at normal priority.
    #[default]
    BestEffort,
    /// Refuse to start, naming the missing capability or rlimit.
    Required,
}

/// Scheduling policy of a group's threads (`policy = "fifo" | "rr" | "other"`).
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
    /// `SCHED_DEADLINE` with the group's [`Deadline`] parameters: guaranteed CPU bandwidth for
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

/// What the overrun watchdog does when a handler exceeds its group's `budget_us`
/// (`on_overrun = "report" | "demote"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOverrun {
    /// Report it (tracing warning and the `budget_overruns` metric).
    #[default]
    Report,
    /// Report it and drop the thread to `SCHED_OTHER` until the handler returns.
    Demote,
}

/// A built-in handler, so that a configuration file alone runs a service
/// (`[[group.handler]]` with `kind = "udp-echo" | "tcp-echo" | "timer"`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum HandlerConfig {
    /// Echo each datagram verbatim to its sender.
    UdpEcho {
        /// Address to bind.
        #[serde(deserialize_with = "named::bind")]
        bind: SocketAddr,
        /// Thread CPU time burnt per datagram, standing in for handler cost (µs).
        #[serde(default, deserialize_with = "named::work_us")]
        work_us: u64,
    },
    /// Accept TCP connections and echo each stream's bytes back.
    TcpEcho {
        /// Address to listen on.
        #[serde(deserialize_with = "named::bind")]
        bind: SocketAddr,
        /// Thread CPU time burnt per read, standing in for handler cost (µs).
        #[serde(default, deserialize_with = "named::work_us")]
        work_us: u64,
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
mod named {
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
    fields!(work_us: u64, interval_us: u64, count: usize, distance_us: u64);

    /// An address written as text, `"127.0.0.1:7000"` or `"[::1]:7000"`.
    pub(super) fn bind<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        let text =
            String::deserialize(d).map_err(|e| D::Error::custom(format_args!("`bind`: {e}")))?;
        text.parse().map_err(|_| {
            D::Error::custom(format_args!(
                "`bind`: `{text}` is not an address like \"127.0.0.1:7000\""
            ))
        })
    }

    /// `[group.bound] connect`, an address written as text like a handler's `bind`.
    pub(super) fn connect<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(|_| {
            D::Error::custom(format_args!(
                "`{text}` is not an address like \"127.0.0.1:7100\""
            ))
        })
    }

    /// `[runtime] metrics`, an address written as text like a handler's `bind`.
    pub(super) fn metrics<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map(Some).map_err(|_| {
            D::Error::custom(format_args!(
                "`{text}` is not an address like \"127.0.0.1:9464\""
            ))
        })
    }

    pub(super) fn one() -> usize {
        1
    }
}

/// Splits a message that [`named`] prefixed into the field and the rest:
/// `` `bind`: `x` is not an address `` → `("bind", "`x` is not an address")`.
#[cfg_attr(not(feature = "toml"), allow(dead_code))]
fn split_named(message: &str) -> Option<(&str, &str)> {
    let (field, rest) = message.strip_prefix('`')?.split_once("`: ")?;
    field
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b == b'_')
        .then_some((field, rest))
}

/// One Leader/Followers group: a pool of threads at one priority sharing one handle set
/// (a `[[group]]` table; every key but `name` may be left out).
///
/// # Examples
/// ```
/// use lfrt::{GroupConfig, Policy, Promotion};
/// let mut feed = GroupConfig::new("feed", Policy::Fifo, 60);
/// feed.threads = 2;
/// feed.cpus = Some(vec![0]);
/// feed.promotion = Promotion::Lifo;
/// let admin = GroupConfig::new("admin", Policy::Other, 0); // time-shared, priority 0
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// Name, used in thread names (`lf-<name>-<n>`) and reports.
    pub name: String,
    /// Real-time priority 1..=99 (distinct across RT groups); 0 with `Policy::Other`.
    #[serde(default)]
    pub priority: u8,
    /// Scheduling policy.
    #[serde(default)]
    pub policy: Policy,
    /// The reservation of a `policy = "deadline"` group (required then, refused otherwise).
    #[serde(default)]
    pub deadline: Option<Deadline>,
    /// Number of pool threads (1..=64).
    #[serde(default = "GroupConfig::default_threads")]
    pub threads: usize,
    /// CPUs the threads may run on; `None` = all CPUs of the process.
    #[serde(default)]
    pub cpus: Option<Vec<usize>>,
    /// Follower promotion order.
    #[serde(default)]
    pub promotion: Promotion,
    /// Per-thread priorities (one per thread, each ≤ `priority` and above every lower group's).
    #[serde(default)]
    pub thread_priorities: Option<Vec<u8>>,
    /// Size of each thread's preallocated receive buffer, scratch buffer and datagram slots.
    #[serde(default = "GroupConfig::default_buffer_bytes")]
    pub buffer_bytes: usize,
    /// Capacity of the group's handle table.
    #[serde(default = "GroupConfig::default_max_handles")]
    pub max_handles: usize,
    /// Stack size of each pool thread; all of it is pre-faulted.
    #[serde(default = "GroupConfig::default_stack_bytes")]
    pub stack_bytes: usize,
    /// Handler time budget (µs) for the overrun watchdog; `None` = no watchdog.
    #[serde(default)]
    pub budget_us: Option<u64>,
    /// What the watchdog does on an overrun.
    #[serde(default)]
    pub on_overrun: OnOverrun,
    /// Built-in handlers registered at start (`[[group.handler]]`).
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
    /// The group's kind: `None` for a Leader/Followers group over its handle set; `Some` for a
    /// **bound** group (`[group.bound]`), whose threads serve a [`BoundPool`](crate::bound::BoundPool)
    /// over one connection to a back-end. See [`BoundGroup`].
    #[serde(default)]
    pub bound: Option<BoundGroup>,
    /// Task slots of the lane's async executor ([`Lane::spawn`](crate::Lane::spawn)); 0 (the
    /// default): the lane runs no tasks and has no executor handles. 0..=65536.
    #[serde(default)]
    pub max_tasks: usize,
    /// Bytes of one task slot: the largest future (or output) a task may have. Alignment is
    /// 64. 64..=1048576, default 512.
    #[serde(default = "GroupConfig::default_task_bytes")]
    pub task_bytes: usize,
}

/// A bound group (`[group.bound]`, [`GroupConfig::bound`]): the runtime connects to `connect`
/// in [`Runtime::new`](crate::Runtime::new) and runs a
/// [`BoundPool`](crate::bound::BoundPool) over that one connection. Its `threads` are spawned
/// and set up like any group's (policy, priority, CPUs, pre-faulted stack) and `serve` the
/// pool: they lead (reading replies and handing each to its waiter) or follow, and run the
/// handlers registered on the group's registry (the pool's unbound handles). Calls to the
/// back-end are made with waiters of [`Lane::bound_pool`](crate::Lane::bound_pool), by
/// those handlers or by any other thread.
///
/// The pool takes the group's `promotion` (not `"concurrent"`), `max_handles` and
/// `buffer_bytes`; the other sizes are here. A connection that fails (the back-end closes it,
/// a malformed frame) is not re-established: calls fail with its error while the threads go on
/// serving the group's handlers, until the runtime is shut down. The overrun watchdog does not
/// watch a bound group (`budget_us` is refused), and the post-warm-up allocation and fault
/// counts are not measured on its threads.
///
/// ```toml
/// [[group]]
/// name = "front"
/// policy = "fifo"
/// priority = 20
/// threads = 4
/// [group.bound]
/// connect = "127.0.0.1:7100"
/// max_waiters = 64
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoundGroup {
    /// The back-end's address (`"127.0.0.1:7100"`): an explicit address and port.
    #[serde(deserialize_with = "named::connect")]
    pub connect: SocketAddr,
    /// Waiter slots: at least one per thread of the group (the runtime leases those), plus one
    /// per handler or outside thread that calls the back-end. 1..=[`MAX_WAITERS`](crate::bound::MAX_WAITERS).
    #[serde(default = "BoundGroup::default_max_waiters")]
    pub max_waiters: usize,
    /// Largest reply body (bytes); each waiter slot preallocates one.
    /// 1..=[`MAX_BODY`](crate::bound::MAX_BODY).
    #[serde(default = "BoundGroup::default_max_body")]
    pub max_body: usize,
    /// How deeply unbound handlers may nest on one thread (at least 1).
    #[serde(default = "BoundGroup::default_max_nesting")]
    pub max_nesting: u32,
}

impl BoundGroup {
    /// A bound group's settings for the back-end at `connect`, with the defaults of
    /// [`BoundConfig`](crate::bound::BoundConfig): 64 waiters, 4 KiB replies, nesting 2.
    pub fn new(connect: SocketAddr) -> BoundGroup {
        BoundGroup {
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

    /// The pool of a bound group `g` whose [`GroupConfig::bound`] is `self`: the sizes of
    /// `self`, the group's promotion, handle table and buffer size.
    pub(crate) fn pool_config(&self, g: &GroupConfig) -> crate::bound::BoundConfig {
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
/// Default number of pool threads per group.
const DEFAULT_THREADS: usize = 2;
/// Default per-thread buffer size.
pub const DEFAULT_BUFFER_BYTES: usize = 64 * 1024;
/// Default handle table size.
pub const DEFAULT_MAX_HANDLES: usize = 1024;
/// Default pool thread stack size.
pub const DEFAULT_STACK_BYTES: usize = 256 * 1024;

impl GroupConfig {
    /// A group of the given scheduling `policy` and `priority`, with defaults for the rest:
    /// 2 threads, all CPUs, priority promotion, 64 KiB buffers, 1024 handles, 256 KiB stacks,
    /// no watchdog, no built-in handlers.
    ///
    /// `priority` is 1..=99 for [`Policy::Fifo`], [`Policy::Rr`] and [`Policy::Deadline`], and
    /// must be 0 for [`Policy::Other`]. A [`Policy::Deadline`] group also needs
    /// [`deadline`](Self::deadline) set before the configuration is validated.
    ///
    /// ```
    /// use lfrt::{GroupConfig, Policy};
    /// let control = GroupConfig::new("control", Policy::Fifo, 80);
    /// let batch = GroupConfig::new("batch", Policy::Other, 0);
    /// assert_eq!((control.policy, batch.priority), (Policy::Fifo, 0));
    /// ```
    pub fn new(name: impl Into<String>, policy: Policy, priority: u8) -> GroupConfig {
        GroupConfig {
            name: name.into(),
            priority,
            policy,
            deadline: None,
            threads: DEFAULT_THREADS,
            cpus: None,
            promotion: Promotion::Priority,
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
        }
    }

    fn default_task_bytes() -> usize {
        DEFAULT_TASK_BYTES
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

    /// Priority of thread `i` of the group.
    pub fn thread_priority(&self, i: usize) -> u8 {
        self.thread_priorities
            .as_ref()
            .and_then(|p| p.get(i).copied())
            .unwrap_or(self.priority)
    }

    /// Whether the group asks for a real-time policy.
    pub fn is_rt(&self) -> bool {
        self.policy != Policy::Other
    }

    /// The memory the group allocates and pre-faults before its threads serve the first event.
    pub fn memory(&self) -> GroupMemory {
        GroupMemory {
            threads: self.threads as u64,
            stack: self.stack_bytes as u64,
            buffers: Context::allocated_bytes(self.buffer_bytes),
            telemetry: (telemetry::RING_CAPACITY * std::mem::size_of::<telemetry::Sample>()) as u64,
            handle_table: Handles::table_bytes(self.max_handles),
            bound: self
                .bound
                .as_ref()
                .map_or(0, |b| b.pool_config(self).allocated_bytes()),
        }
    }

    /// Handles the group's built-in handlers register (one per timer of a `timer` handler).
    fn configured_handles(&self) -> usize {
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

    /// Timer expiries per second that the group's built-in timers deliver, all together.
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

/// What one group preallocates, in bytes: each pool thread's stack, buffers and telemetry ring,
/// and the group's handle table. Counted from the sizes the runtime allocates
/// ([`GroupConfig::memory`]); not counted are the process itself (code, heap, the telemetry
/// collector's histograms) and what handlers allocate, so this is a lower bound of what a
/// running group holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupMemory {
    /// Pool threads (`threads`).
    pub threads: u64,
    /// Each thread's stack (`stack_bytes`), pre-faulted at start-up.
    pub stack: u64,
    /// Each thread's [`Context`] storage: its buffer, scratch buffer and
    /// [`DATAGRAM_BATCH`](crate::DATAGRAM_BATCH) datagram slots of `buffer_bytes` each, plus
    /// the slots' message headers and addresses.
    pub buffers: u64,
    /// Each thread's telemetry ring.
    pub telemetry: u64,
    /// The group's handle table (`max_handles` slots), once per group.
    pub handle_table: u64,
    /// A bound group's pool, once per group: a reply buffer of `max_body` per waiter slot and
    /// the receive buffer; 0 for other groups.
    pub bound: u64,
}

impl GroupMemory {
    /// Bytes one pool thread preallocates.
    pub fn per_thread(&self) -> u64 {
        self.stack
            .saturating_add(self.buffers)
            .saturating_add(self.telemetry)
    }

    /// Bytes the whole group preallocates.
    pub fn total(&self) -> u64 {
        self.threads
            .saturating_mul(self.per_thread())
            .saturating_add(self.handle_table)
            .saturating_add(self.bound)
    }

    /// The setting behind the largest share: the one to lower when the total is too large.
    fn largest_field(&self) -> &'static str {
        let t = self.threads;
        [
            (t.saturating_mul(self.buffers), "buffer_bytes"),
            (t.saturating_mul(self.stack), "stack_bytes"),
            // The ring's size is fixed; only fewer threads make it smaller.
            (t.saturating_mul(self.telemetry), "threads"),
            (self.handle_table, "max_handles"),
        ]
        .into_iter()
        .fold((0, "buffer_bytes"), |a, b| if b.0 > a.0 { b } else { a })
        .1
    }
}

/// A byte count written for people: `512 B`, `256.0 KiB`, `1.1 MiB`, `23.5 GiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        match self.0 {
            n if n < 1 << 10 => write!(f, "{n} B"),
            n if n < 1 << 20 => write!(f, "{:.1} KiB", b / (1u64 << 10) as f64),
            n if n < 1 << 30 => write!(f, "{:.1} MiB", b / (1u64 << 20) as f64),
            _ => write!(f, "{:.1} GiB", b / (1u64 << 30) as f64),
        }
    }
}

impl fmt::Display for GroupMemory {
    /// `2.1 MiB = 2 threads × 1.1 MiB (stack 256.0 KiB, buffers 72.9 KiB, telemetry ring
    /// 768.0 KiB) + handle table 1.1 KiB` (`+ bound pool buffers …` for a bound group), then
    /// the exact byte count.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} = {} threads × {} (stack {}, buffers {}, telemetry ring {}) + handle table {}",
            Bytes(self.total()),
            self.threads,
            Bytes(self.per_thread()),
            Bytes(self.stack),
            Bytes(self.buffers),
            Bytes(self.telemetry),
            Bytes(self.handle_table),
        )?;
        if self.bound > 0 {
            write!(f, " + bound pool buffers {}", Bytes(self.bound))?;
        }
        write!(f, " ({} bytes)", self.total())?;
        Ok(())
    }
}

/// The whole runtime: global settings and its groups.
///
/// In a file the global settings sit in a `[runtime]` table and the groups in `[[group]]`
/// tables; both may be left out (and then validation asks for a group).
///
/// # Examples
/// ```
/// use lfrt::{GroupConfig, Policy, RtMode, RuntimeConfig};
/// let cfg = RuntimeConfig {
///     rt: RtMode::Required, // refuse to run without SCHED_FIFO
///     lock_memory: true,
///     metrics: None,
///     groups: vec![GroupConfig::new("control", Policy::Fifo, 80)],
///     bands: Vec::new(), // [[band]]: priority bands on one port
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
    /// Where the `lfrt` command serves live metrics in Prometheus text format
    /// (`metrics = "127.0.0.1:9464"`); `None`: not served. The runtime itself never reads it:
    /// the exporter lives in the tools crate, on a thread that is not a pool thread. Validation
    /// asks for an explicit port and address (no wildcard), not colliding with a `tcp-echo`
    /// handler's, and bindable now.
    pub metrics: Option<SocketAddr>,
    /// The groups, highest priority first or in any order.
    pub groups: Vec<GroupConfig>,
    /// Priority bands on shared ports (`[[band]]`), served by the groups they name.
    pub bands: Vec<BandConfig>,
}

/// The layout of a configuration file, which nests [`RuntimeConfig`]'s global settings in a
/// `[runtime]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    runtime: Settings,
    #[serde(default)]
    group: Vec<GroupConfig>,
    #[serde(default)]
    band: Vec<BandConfig>,
}

/// The `[runtime]` table.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Settings {
    #[serde(default)]
    rt: RtMode,
    #[serde(default)]
    lock_memory: bool,
    #[serde(default, deserialize_with = "named::metrics")]
    metrics: Option<SocketAddr>,
}

impl From<Document> for RuntimeConfig {
    fn from(d: Document) -> RuntimeConfig {
        RuntimeConfig {
            rt: d.runtime.rt,
            lock_memory: d.runtime.lock_memory,
            metrics: d.runtime.metrics,
            groups: d.group,
            bands: d.band,
        }
    }
}

/// Where a setting is written in a configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The top level of the file (where the `group` array is).
    Root,
    /// The `[runtime]` table.
    Runtime,
    /// The `[[group]]` table with this index (0-based, in file order).
    Group(usize),
    /// The `[group.bound]` table of the group with this index.
    Bound(usize),
    /// A `[[group.handler]]` table.
    Handler {
        /// Index of its group.
        group: usize,
        /// Index of the handler within the group.
        handler: usize,
    },
    /// The `[[band]]` table with this index (0-based, in file order).
    Band(usize),
}

impl Section {
    /// The path of `field` in this section as errors name it: `runtime.rt`,
    /// `group[1].priority`, `group[0].handler[2].bind`; an empty `field` names the table itself.
    pub fn path(self, field: &str) -> String {
        let table = match self {
            Section::Root => return field.to_string(),
            Section::Runtime => "runtime".to_string(),
            Section::Group(g) => format!("group[{g}]"),
            Section::Bound(g) => format!("group[{g}].bound"),
            Section::Handler { group, handler } => format!("group[{group}].handler[{handler}]"),
            Section::Band(b) => format!("band[{b}]"),
        };
        if field.is_empty() {
            table
        } else {
            format!("{table}.{field}")
        }
    }
}

/// A validation failure: which field, where, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    /// The table the field belongs to.
    pub section: Section,
    /// Field name as written in TOML.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

impl Invalid {
    /// The field as a path: `group[1].priority`.
    pub fn path(&self) -> String {
        self.section.path(self.field)
    }
}

impl From<Invalid> for Error {
    fn from(i: Invalid) -> Error {
        Error::config(i.path(), i.message)
    }
}

/// What validation checks a configuration against: this machine, as read at that moment.
#[derive(Debug, Clone)]
struct Machine {
    /// CPUs a group may name.
    cpus: Vec<usize>,
    /// Physical memory (bytes), if known.
    mem_total: Option<u64>,
    /// The most bytes `mlockall` may lock (`None`: no limit).
    memlock_limit: Option<u64>,
}

impl Machine {
    fn probe(cpus: Vec<usize>) -> Machine {
        Machine {
            cpus,
            mem_total: mem::mem_total(),
            memlock_limit: mem::MemLock::probe().limit(),
        }
    }
}

/// Whether two sockets of one protocol, bound to `a` and `b` without `SO_REUSEPORT`, would
/// collide (`EADDRINUSE`), whichever is bound first.
///
/// The rule, as Linux applies it: port 0 asks for an ephemeral port and never collides; on one
/// port, equal addresses collide, and a wildcard (`0.0.0.0`, `[::]`) takes the port on every
/// address of its family. `[::]` also takes it on every IPv4 address: std does not set
/// `IPV6_V6ONLY`, so the socket is dual-stack under Linux's default `net.ipv6.bindv6only = 0`
/// (lfrt assumes that default; with `bindv6only = 1` this refuses a pair the kernel would
/// accept). An IPv4-mapped IPv6 address (`[::ffff:127.0.0.1]`) is its IPv4 address.
fn addresses_collide(a: SocketAddr, b: SocketAddr) -> bool {
    if a.port() == 0 || a.port() != b.port() {
        return false;
    }
    let ip = |a: SocketAddr| a.ip().to_canonical();
    match (ip(a), ip(b)) {
        (x, y) if x == y => true,
        (IpAddr::V4(x), IpAddr::V4(y)) => x.is_unspecified() || y.is_unspecified(),
        (IpAddr::V6(x), IpAddr::V6(y)) => x.is_unspecified() || y.is_unspecified(),
        (IpAddr::V6(v6), IpAddr::V4(_)) | (IpAddr::V4(_), IpAddr::V6(v6)) => v6.is_unspecified(),
    }
}

impl RuntimeConfig {
    /// Bytes every group preallocates together ([`GroupConfig::memory`]).
    pub fn preallocated_bytes(&self) -> u64 {
        self.groups
            .iter()
            .fold(0u64, |sum, g| sum.saturating_add(g.memory().total()))
    }

    /// Checks everything that can be checked without starting anything: ranges, distinct
    /// priorities, existing CPUs, addresses that do not collide with each other, memory that
    /// fits the machine (and `RLIMIT_MEMLOCK` with `lock_memory`), and that every address binds
    /// now.
    ///
    /// The last two are point-in-time checks: another process may take a port or memory between
    /// this call and [`Runtime::new`](crate::Runtime::new), which then fails with
    /// [`Error::Bind`](crate::Error::Bind) (or cannot lock its memory).
    pub fn validate(&self) -> Result<(), Invalid> {
        self.validate_with_cpus(&sched::online_cpus())
    }

    /// [`validate`](Self::validate) against a given set of usable CPUs.
    pub fn validate_with_cpus(&self, cpus: &[usize]) -> Result<(), Invalid> {
        self.validate_on(&Machine::probe(cpus.to_vec()))
    }

    /// [`validate`](Self::validate) without binding any socket, for a group added in code
    /// ([`Runtime::add_group`](crate::Runtime::add_group)) checked together with the groups
    /// already there: the runtime holds their sockets already, and binds the new group's itself
    /// (a failed bind is [`Error::Bind`]).
    pub(crate) fn validate_without_binds(&self) -> Result<(), Invalid> {
        let machine = Machine::probe(sched::online_cpus());
        self.check_settings(&machine.cpus)?;
        self.check_bands()?;
        self.check_bound()?;
        self.check_deadlines(&machine.cpus, sched::rt_bandwidth())?;
        self.check_borrowing()?;
        self.check_memory(&machine)
    }

    fn validate_on(&self, machine: &Machine) -> Result<(), Invalid> {
        self.check_settings(&machine.cpus)?;
        self.check_bands()?;
        self.check_bound()?;
        self.check_deadlines(&machine.cpus, sched::rt_bandwidth())?;
        self.check_borrowing()?;
        self.check_memory(machine)?;
        self.check_binds()
    }

    /// Deadline lanes: parameters present exactly for `policy = "deadline"`, `1 ≤ runtime ≤
    /// deadline ≤ period`, no CPU restriction (the kernel admits a deadline thread only with an
    /// affinity spanning its root domain), no demotion (the kernel throttles instead), and the
    /// total bandwidth (threads × runtime / period, over every deadline lane) within the RT
    /// limit `bandwidth` × CPUs, which the kernel's admission control enforces with `EBUSY`.
    fn check_deadlines(&self, cpus: &[usize], bandwidth: Option<f64>) -> Result<(), Invalid> {
        let bad = |g: usize, field: &'static str, message: String| Invalid {
            section: Section::Group(g),
            field,
            message,
        };
        let mut total = 0.0;
        for (gi, g) in self.groups.iter().enumerate() {
            let d = match (g.policy, g.deadline) {
                (Policy::Deadline, Some(d)) => d,
                (Policy::Deadline, None) => {
                    return Err(bad(
                        gi,
                        "deadline",
                        "missing: policy \"deadline\" needs \
                        deadline = { runtime_us = …, deadline_us = …, period_us = … }"
                            .into(),
                    ))
                }
                (_, Some(_)) => {
                    return Err(bad(
                        gi,
                        "deadline",
                        "only a policy = \"deadline\" group takes \
                        deadline parameters"
                            .into(),
                    ))
                }
                (_, None) => continue,
            };
            if d.runtime_us == 0 || d.runtime_us > d.deadline_us || d.deadline_us > d.period_us {
                return Err(bad(
                    gi,
                    "deadline",
                    format!(
                    "runtime_us {} ≤ deadline_us {} ≤ period_us {} does not hold (and runtime_us \
                     must be at least 1)", d.runtime_us, d.deadline_us, d.period_us),
                ));
            }
            if d.period_us > 1 << 40 {
                return Err(bad(
                    gi,
                    "deadline",
                    format!("period_us {} is too long", d.period_us),
                ));
            }
            if let Some(own) = &g.cpus {
                if cpus.iter().any(|c| !own.contains(c)) {
                    return Err(bad(
                        gi,
                        "cpus",
                        format!(
                            "{own:?} does not span every CPU {cpus:?}: the kernel admits a \
                         SCHED_DEADLINE thread only with an affinity covering its root domain; \
                         leave `cpus` out"
                        ),
                    ));
                }
            }
            if g.on_overrun == OnOverrun::Demote {
                return Err(bad(
                    gi,
                    "on_overrun",
                    "\"demote\" does not apply to a deadline \
                    lane: the kernel throttles a thread that overruns its runtime"
                        .into(),
                ));
            }
            total += g.threads as f64 * d.runtime_us as f64 / d.period_us as f64;
            if let Some(bw) = bandwidth {
                let limit = bw * cpus.len().max(1) as f64;
                if total > limit {
                    return Err(bad(
                        gi,
                        "deadline",
                        format!(
                        "the deadline lanes reserve {total:.2} CPUs (threads × runtime / period), \
                         more than the {limit:.2} the kernel admits (sched_rt_runtime_us / \
                         sched_rt_period_us × {} CPUs)", cpus.len()),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Bound groups (`[group.bound]`): an address a connection can be made to, the pool's
    /// sizes ([`BoundConfig`](crate::bound::BoundConfig)'s own range check), a waiter slot for
    /// every thread, and none of the group settings a bound pool does not have: the concurrent
    /// promotion (the pool always has a leader) and the overrun watchdog (which watches the
    /// dispatches of Leader/Followers groups only).
    ///
    /// Nothing is connected: `lfrt check` does not open a connection to a back-end, so a
    /// back-end that is down is found by [`Runtime::new`](crate::Runtime::new)
    /// ([`Error::Connect`]).
    fn check_bound(&self) -> Result<(), Invalid> {
        for (gi, g) in self.groups.iter().enumerate() {
            let Some(b) = &g.bound else { continue };
            let bad = |section, field, message| {
                Err(Invalid {
                    section,
                    field,
                    message,
                })
            };
            let here = Section::Bound(gi);
            if b.connect.port() == 0 || b.connect.ip().is_unspecified() {
                return bad(
                    here,
                    "connect",
                    format!(
                        "{}: give the back-end's explicit address and port, like \
                         \"127.0.0.1:7100\" (no port 0, no wildcard address)",
                        b.connect
                    ),
                );
            }
            if let Some((field, message)) = b.pool_config(g).invalid() {
                return bad(here, field, message);
            }
            if b.max_waiters < g.threads {
                return bad(
                    here,
                    "max_waiters",
                    format!(
                        "{} for {} threads: each thread of the group leases a waiter slot; give \
                         at least one per thread, plus one per caller of the back-end",
                        b.max_waiters, g.threads
                    ),
                );
            }
            if g.promotion == Promotion::Concurrent {
                return bad(
                    Section::Group(gi),
                    "promotion",
                    "\"concurrent\" does not apply to a bound group: its threads share one \
                     connection, which only the leader reads; use \"fifo\", \"lifo\" or \
                     \"priority\""
                        .into(),
                );
            }
            if g.budget_us.is_some() {
                return bad(
                    Section::Group(gi),
                    "budget_us",
                    "the overrun watchdog does not watch a bound group's handlers; leave \
                     `budget_us` out"
                        .into(),
                );
            }
        }
        Ok(())
    }

    /// Lane borrowing (`borrow_from`, `max_borrowed`; `borrow.rs`): a real-time lane borrows
    /// from existing real-time lanes of lower priority, not itself, each named once, and at most
    /// as many threads as they have together. Deadline lanes neither borrow nor lend: a
    /// reservation is admitted by the kernel per thread (`EBUSY`), it cannot be taken on and
    /// handed back per event. A concurrent borrower has no leader whose absence says "all busy".
    fn check_borrowing(&self) -> Result<(), Invalid> {
        let bad = |g: usize, field: &'static str, message: String| Invalid {
            section: Section::Group(g),
            field,
            message,
        };
        for (gi, g) in self.groups.iter().enumerate() {
            if g.borrow_from.is_empty() {
                if g.max_borrowed.is_some() {
                    return Err(bad(
                        gi,
                        "max_borrowed",
                        "without `borrow_from` there is nothing to borrow: add \
                         borrow_from = [\"<lower lane>\"] or remove it"
                            .into(),
                    ));
                }
                continue;
            }
            match (g.policy, g.promotion) {
                (Policy::Deadline, _) => {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        "a deadline lane cannot borrow: a lent thread would have to take on its \
                         SCHED_DEADLINE reservation for one event, and the kernel admits \
                         reservations per thread (sched_setattr may fail with EBUSY)"
                            .into(),
                    ))
                }
                (Policy::Other, _) => {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        "a policy \"other\" lane has no priority to lend at: only fifo and rr \
                         lanes borrow"
                            .into(),
                    ))
                }
                (_, Promotion::Concurrent) => {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        "a promotion = \"concurrent\" lane has no leader whose absence shows \
                         that all its threads are busy: use priority, lifo or fifo promotion"
                            .into(),
                    ))
                }
                _ => {}
            }
            let mut lent = 0usize;
            for (k, name) in g.borrow_from.iter().enumerate() {
                if g.borrow_from[..k].contains(name) {
                    return Err(bad(gi, "borrow_from", format!("`{name}` is named twice")));
                }
                if *name == g.name {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        format!("`{name}` is this lane: a lane cannot borrow from itself"),
                    ));
                }
                let Some(l) = self.groups.iter().find(|l| l.name == *name) else {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        format!("`{name}` is not the name of a [[group]]"),
                    ));
                };
                if !matches!(l.policy, Policy::Fifo | Policy::Rr) {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        format!(
                            "`{name}` is a policy {:?} lane: only fifo and rr lanes lend (a \
                             deadline thread cannot leave its reservation for one event)",
                            l.policy
                        ),
                    ));
                }
                if l.bound.is_some() || g.bound.is_some() {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        format!(
                            "`{name}` or this lane is a bound group: its threads serve a bound \
                             pool, which neither lends threads nor borrows them"
                        ),
                    ));
                }
                if l.buffer_bytes < g.buffer_bytes || l.stack_bytes < g.stack_bytes {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        format!(
                            "`{name}` has buffer_bytes {} and stack_bytes {}, less than this \
                             lane's {} and {}: a lent thread runs this lane's handlers with its \
                             own buffers and stack, so the lender needs at least as much",
                            l.buffer_bytes, l.stack_bytes, g.buffer_bytes, g.stack_bytes
                        ),
                    ));
                }
                if l.priority >= g.priority {
                    return Err(bad(
                        gi,
                        "borrow_from",
                        format!(
                            "`{name}` (priority {}) is not below this lane (priority {}): a lane \
                             borrows only from lower lanes",
                            l.priority, g.priority
                        ),
                    ));
                }
                lent += l.threads;
            }
            let max = g.max_borrowed.unwrap_or(1);
            if max == 0 || max > lent {
                return Err(bad(
                    gi,
                    "max_borrowed",
                    format!(
                        "{max}: must be 1..={lent} (the threads of the borrow_from lanes together)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Ranges, names, priorities, lanes, CPUs and address collisions.
    fn check_settings(&self, cpus: &[usize]) -> Result<(), Invalid> {
        let bad = |g: usize, field: &'static str, message: String| Invalid {
            section: Section::Group(g),
            field,
            message,
        };
        if self.groups.is_empty() {
            return Err(Invalid {
                section: Section::Root,
                field: "group",
                message: "at least one [[group]] is required".into(),
            });
        }
        let mut names = HashSet::new();
        let mut prios: Vec<(u8, usize)> = Vec::new();
        // (tcp, address, where) of every handler seen so far.
        let mut addrs: Vec<(bool, SocketAddr, Section)> = Vec::new();
        for (gi, g) in self.groups.iter().enumerate() {
            if g.name.is_empty()
                || !g
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(bad(
                    gi,
                    "name",
                    format!("`{}`: use letters, digits, '-' and '_'", g.name),
                ));
            }
            if !names.insert(g.name.as_str()) {
                return Err(bad(
                    gi,
                    "name",
                    format!("`{}` is used by another group", g.name),
                ));
            }
            match g.policy {
                Policy::Other if g.priority != 0 => {
                    return Err(bad(
                        gi,
                        "priority",
                        format!(
                            "{} with policy \"other\": must be 0 (SCHED_OTHER has no RT priority)",
                            g.priority
                        ),
                    ));
                }
                Policy::Fifo | Policy::Rr | Policy::Deadline if g.priority == 0 => {
                    return Err(bad(
                        gi,
                        "priority",
                        "missing or 0: SCHED_FIFO/RR groups need a priority 1..=99".into(),
                    ));
                }
                Policy::Fifo | Policy::Rr | Policy::Deadline if g.priority > 99 => {
                    return Err(bad(
                        gi,
                        "priority",
                        format!(
                            "{} is out of range: SCHED_FIFO/RR priorities are 1..=99",
                            g.priority
                        ),
                    ));
                }
                _ => {}
            }
            if g.is_rt() {
                if let Some(&(_, other)) = prios.iter().find(|(p, _)| *p == g.priority) {
                    return Err(bad(
                        gi,
                        "priority",
                        format!(
                            "{} is already the priority of group `{}`: each group needs its own",
                            g.priority, self.groups[other].name
                        ),
                    ));
                }
                prios.push((g.priority, gi));
            }
            if g.threads == 0 || g.threads > MAX_GROUP_THREADS {
                return Err(bad(
                    gi,
                    "threads",
                    format!(
                        "{}: a group needs 1..={MAX_GROUP_THREADS} threads",
                        g.threads
                    ),
                ));
            }
            if let Some(c) = &g.cpus {
                if c.is_empty() {
                    return Err(bad(
                        gi,
                        "cpus",
                        "empty list: omit `cpus` to use every CPU".into(),
                    ));
                }
                if let Some(missing) = c.iter().find(|c| !cpus.contains(c)) {
                    return Err(bad(
                        gi,
                        "cpus",
                        format!("CPU {missing} does not exist or is offline (online: {cpus:?})"),
                    ));
                }
            }
            if g.buffer_bytes < 64 || g.buffer_bytes > 64 << 20 {
                return Err(bad(
                    gi,
                    "buffer_bytes",
                    format!("{}: must be 64..=67108864", g.buffer_bytes),
                ));
            }
            if g.max_handles == 0 || g.max_handles > crate::engine::word::MAX_HANDLES {
                return Err(bad(
                    gi,
                    "max_handles",
                    format!("{}: must be 1..=1048576", g.max_handles),
                ));
            }
            if g.max_tasks > crate::task::MAX_TASKS {
                return Err(bad(
                    gi,
                    "max_tasks",
                    format!("{}: must be 0..=65536", g.max_tasks),
                ));
            }
            if g.task_bytes < 64 || g.task_bytes > 1 << 20 {
                return Err(bad(
                    gi,
                    "task_bytes",
                    format!("{}: must be 64..=1048576", g.task_bytes),
                ));
            }
            if g.stack_bytes < 64 * 1024 || g.stack_bytes > 64 << 20 {
                return Err(bad(
                    gi,
                    "stack_bytes",
                    format!("{}: must be 65536..=67108864", g.stack_bytes),
                ));
            }
            if let Some(b) = g.budget_us {
                if b == 0 || b > 10_000_000 {
                    return Err(bad(gi, "budget_us", format!("{b}: must be 1..=10000000")));
                }
            } else if g.on_overrun == OnOverrun::Demote {
                return Err(bad(
                    gi,
                    "on_overrun",
                    "\"demote\" needs a `budget_us`".into(),
                ));
            }
            let handles = g.configured_handles();
            if handles > g.max_handles {
                return Err(bad(
                    gi,
                    "max_handles",
                    format!(
                        "{} handles configured but max_handles is {}",
                        handles, g.max_handles
                    ),
                ));
            }
            for (hi, h) in g.handlers.iter().enumerate() {
                let here = Section::Handler {
                    group: gi,
                    handler: hi,
                };
                let hbad = |field: &'static str, message: String| Invalid {
                    section: here,
                    field,
                    message,
                };
                match h {
                    HandlerConfig::UdpEcho { bind, work_us }
                    | HandlerConfig::TcpEcho { bind, work_us } => {
                        if *work_us > 100_000 {
                            return Err(hbad(
                                "work_us",
                                format!("{work_us}: at most 100000 µs of busy work per event"),
                            ));
                        }
                        let tcp = matches!(h, HandlerConfig::TcpEcho { .. });
                        if let Some((_, other, at)) = addrs
                            .iter()
                            .find(|(t, a, _)| *t == tcp && addresses_collide(*a, *bind))
                        {
                            return Err(hbad(
                                "bind",
                                format!(
                                    "{bind} collides with {other} of `{}`: on one port a wildcard \
                                     address (0.0.0.0, [::]) takes every address of its family, \
                                     and [::] every IPv4 address too",
                                    at.path("bind")
                                ),
                            ));
                        }
                        addrs.push((tcp, *bind, here));
                    }
                    HandlerConfig::Timer {
                        interval_us,
                        count,
                        distance_us,
                    } => {
                        if !(50..=10_000_000).contains(interval_us) {
                            return Err(hbad(
                                "interval_us",
                                format!("{interval_us}: must be 50..=10000000 µs"),
                            ));
                        }
                        if *count == 0 || *count > 256 {
                            return Err(hbad("count", format!("{count}: must be 1..=256")));
                        }
                        if *distance_us > 10_000_000 {
                            return Err(hbad(
                                "distance_us",
                                format!("{distance_us}: at most 10000000 µs"),
                            ));
                        }
                    }
                }
            }
        }
        if let Some(m) = self.metrics {
            let bad_metrics = |message: String| Invalid {
                section: Section::Runtime,
                field: "metrics",
                message,
            };
            // A scraper must know the port, and serving every interface must be written out.
            if m.port() == 0 || m.ip().is_unspecified() {
                return Err(bad_metrics(format!(
                    "{m}: give an explicit address and port, like \"127.0.0.1:9464\" (no port 0, \
                     no wildcard address)"
                )));
            }
            // The exporter is a TCP listener: only a tcp-echo handler can take its port.
            if let Some((_, other, at)) = addrs
                .iter()
                .find(|(tcp, a, _)| *tcp && addresses_collide(*a, m))
            {
                return Err(bad_metrics(format!(
                    "{m} collides with {other} of `{}`",
                    at.path("bind")
                )));
            }
        }
        // Per-thread priorities must stay inside the group's lane: at most the group's priority
        // and above every lower group's, so lanes never interleave.
        for (gi, g) in self.groups.iter().enumerate() {
            let Some(tp) = &g.thread_priorities else {
                continue;
            };
            if tp.len() != g.threads {
                return Err(bad(
                    gi,
                    "thread_priorities",
                    format!(
                        "{} entries for {} threads: give one per thread",
                        tp.len(),
                        g.threads
                    ),
                ));
            }
            if !g.is_rt() {
                return Err(bad(
                    gi,
                    "thread_priorities",
                    "only for policy \"fifo\" or \"rr\"".into(),
                ));
            }
            let floor = prios
                .iter()
                .map(|&(p, _)| p)
                .filter(|&p| p < g.priority)
                .max()
                .unwrap_or(0);
            if let Some(p) = tp.iter().find(|&&p| p > g.priority || p <= floor) {
                return Err(bad(gi, "thread_priorities", format!("{p} is outside this group's lane {}..={} (above the next lower group, at most the group's priority)", floor + 1, g.priority)));
            }
        }
        Ok(())
    }

    /// The preallocated total against the machine's memory and, with `lock_memory` and
    /// `rt = "required"`, against what `mlockall` may lock (with `"best-effort"` a failed
    /// `mlockall` is a warning at start, so it is not refused here). The error names the
    /// largest group's largest share.
    fn check_memory(&self, machine: &Machine) -> Result<(), Invalid> {
        let total = self.preallocated_bytes();
        let memlock = machine
            .memlock_limit
            .filter(|_| self.lock_memory && self.rt == RtMode::Required);
        let over = [
            (machine.mem_total, "this machine's memory (MemTotal)", ""),
            (
                memlock,
                "RLIMIT_MEMLOCK",
                "; `lock_memory = true` must stay within it: raise it, grant CAP_IPC_LOCK, or set \
                 lock_memory = false",
            ),
        ]
        .into_iter()
        .find_map(|(limit, what, advice)| limit.filter(|&l| total > l).map(|l| (l, what, advice)));
        let Some((limit, what, advice)) = over else {
            return Ok(());
        };
        let (gi, largest) = self
            .groups
            .iter()
            .map(GroupConfig::memory)
            .enumerate()
            .fold(None::<(usize, GroupMemory)>, |a, (i, m)| match a {
                Some((_, b)) if b.total() >= m.total() => a,
                _ => Some((i, m)),
            })
            .expect("validated: at least one group");
        Err(Invalid {
            section: Section::Group(gi),
            field: largest.largest_field(),
            message: format!(
                "the plan preallocates {} ({total} bytes), more than {what}: {} ({limit} \
                 bytes){advice}; this group takes {largest}",
                Bytes(total),
                Bytes(limit)
            ),
        })
    }

    /// Binds every handler's address, and the metrics address, and drops the socket at once:
    /// the port is free *now*.
    fn check_binds(&self) -> Result<(), Invalid> {
        if let Some(addr) = self.metrics {
            std::net::TcpListener::bind(addr)
                .map_err(|e| Invalid {
                    section: Section::Runtime,
                    field: "metrics",
                    message: format!("cannot bind {addr}: {e}"),
                })
                .map(drop)?;
        }
        for (gi, g) in self.groups.iter().enumerate() {
            for (hi, h) in g.handlers.iter().enumerate() {
                let probe = match *h {
                    HandlerConfig::UdpEcho { bind, .. } => std::net::UdpSocket::bind(bind)
                        .map(drop)
                        .map_err(|e| (bind, e)),
                    HandlerConfig::TcpEcho { bind, .. } => std::net::TcpListener::bind(bind)
                        .map(drop)
                        .map_err(|e| (bind, e)),
                    HandlerConfig::Timer { .. } => Ok(()),
                };
                if let Err((bind, e)) = probe {
                    return Err(Invalid {
                        section: Section::Handler {
                            group: gi,
                            handler: hi,
                        },
                        field: "bind",
                        message: format!("cannot bind {bind}: {e}"),
                    });
                }
            }
        }
        self.check_band_binds()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(groups: Vec<GroupConfig>) -> RuntimeConfig {
        RuntimeConfig {
            rt: RtMode::BestEffort,
            lock_memory: false,
            metrics: None,
            groups,
            bands: Vec::new(),
        }
    }

    fn field_of(c: &RuntimeConfig) -> String {
        c.validate_with_cpus(&[0, 1]).unwrap_err().path()
    }

    fn udp(bind: &str) -> HandlerConfig {
        HandlerConfig::UdpEcho {
            bind: bind.parse().unwrap(),
            work_us: 0,
        }
    }

    /// A machine with plenty of memory and no lock limit, unless a test says otherwise.
    fn machine() -> Machine {
        Machine {
            cpus: vec![0, 1],
            mem_total: Some(1 << 40),
            memlock_limit: None,
        }
    }

    #[test]
    fn each_invalid_setting_names_its_field() {
        let ok = cfg(vec![
            GroupConfig::new("a", Policy::Fifo, 80),
            GroupConfig::new("b", Policy::Fifo, 40),
        ]);
        ok.validate_with_cpus(&[0, 1]).unwrap();
        let mut c = ok.clone();
        c.groups[1].priority = 100;
        assert_eq!(field_of(&c), "group[1].priority");
        let mut c = ok.clone();
        c.groups[1].priority = 80;
        assert_eq!(field_of(&c), "group[1].priority");
        let mut c = ok.clone();
        c.groups[0].cpus = Some(vec![0, 7]);
        assert_eq!(field_of(&c), "group[0].cpus");
        let mut c = ok.clone();
        c.groups[0].threads = 0;
        assert_eq!(field_of(&c), "group[0].threads");
        let mut c = ok.clone();
        c.groups[0].thread_priorities = Some(vec![80, 30]);
        assert_eq!(field_of(&c), "group[0].thread_priorities");
        let mut c = ok.clone();
        c.groups[0].on_overrun = OnOverrun::Demote;
        assert_eq!(field_of(&c), "group[0].on_overrun");
        assert_eq!(field_of(&cfg(vec![])), "group");
    }

    /// Lane borrowing: only from existing lower real-time lanes, never by or from a deadline
    /// lane, not by a concurrent or time-shared lane, within the lenders' threads.
    #[test]
    fn borrowing_is_validated() {
        let lanes = |borrow: &[&str], max: Option<usize>| {
            let mut hi = GroupConfig::new("hi", Policy::Fifo, 80);
            hi.borrow_from = borrow.iter().map(|s| s.to_string()).collect();
            hi.max_borrowed = max;
            let mut lo = GroupConfig::new("lo", Policy::Fifo, 20);
            lo.threads = 3;
            let mut mid = GroupConfig::new("mid", Policy::Rr, 50);
            mid.threads = 1;
            cfg(vec![hi, mid, lo])
        };
        let ok = lanes(&["lo", "mid"], Some(4));
        ok.check_borrowing().unwrap();
        lanes(&["lo"], None).check_borrowing().unwrap();
        let field = |c: RuntimeConfig| {
            let e = c.check_borrowing().unwrap_err();
            (e.path(), e.message)
        };
        for (c, path, says) in [
            (
                lanes(&["lo", "mid"], Some(5)),
                "group[0].max_borrowed",
                "1..=4",
            ),
            (lanes(&["lo"], Some(0)), "group[0].max_borrowed", "1..=3"),
            (lanes(&[], Some(1)), "group[0].max_borrowed", "without"),
            (lanes(&["lo", "lo"], None), "group[0].borrow_from", "twice"),
            (lanes(&["hi"], None), "group[0].borrow_from", "itself"),
            (lanes(&["x"], None), "group[0].borrow_from", "not the name"),
        ] {
            let (p, m) = field(c);
            assert_eq!(p, path, "{m}");
            assert!(m.contains(says), "{m}");
        }
        // A lender with a smaller buffer or stack than the borrower's; a bound lender.
        let mut c = lanes(&["lo"], None);
        c.groups[2].buffer_bytes = c.groups[0].buffer_bytes / 2;
        assert!(field(c).1.contains("buffer_bytes"));
        let mut c = lanes(&["lo"], None);
        c.groups[2].stack_bytes = c.groups[0].stack_bytes / 2;
        assert!(field(c).1.contains("stack_bytes"));
        let mut c = lanes(&["lo"], None);
        c.groups[2].bound = Some(BoundGroup::new("127.0.0.1:7100".parse().unwrap()));
        assert!(field(c).1.contains("bound group"));
        // Borrowing upwards.
        let mut c = lanes(&[], None);
        c.groups[2].borrow_from = vec!["hi".into()];
        assert!(field(c).1.contains("not below"));
        // Deadline, time-shared and concurrent borrowers; a deadline lender.
        let mut c = ok.clone();
        c.groups[0].policy = Policy::Deadline;
        assert!(field(c).1.contains("deadline lane cannot borrow"));
        let mut c = lanes(&["lo"], None);
        c.groups[0].policy = Policy::Other;
        c.groups[0].priority = 0;
        assert_eq!(field(c).0, "group[0].borrow_from");
        let mut c = ok.clone();
        c.groups[0].promotion = Promotion::Concurrent;
        assert!(field(c).1.contains("concurrent"));
        let mut c = ok.clone();
        c.groups[1].policy = Policy::Deadline;
        assert!(field(c).1.contains("only fifo and rr lanes lend"));
        // The whole validation runs it.
        assert_eq!(field_of(&lanes(&["x"], None)), "group[0].borrow_from");
    }

    #[test]
    fn port_in_use_is_found_at_validation() {
        let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut g = GroupConfig::new("a", Policy::Fifo, 10);
        g.handlers.push(HandlerConfig::UdpEcho {
            bind: held.local_addr().unwrap(),
            work_us: 0,
        });
        let e = cfg(vec![g]).validate_with_cpus(&[0]).unwrap_err();
        assert_eq!(e.path(), "group[0].handler[0].bind");
        assert!(e.message.contains("in use"), "{}", e.message);
    }

    #[test]
    fn colliding_addresses_follow_the_kernel_rule() {
        let c = |a: &str, b: &str| {
            let (a, b) = (a.parse().unwrap(), b.parse().unwrap());
            let ab = addresses_collide(a, b);
            assert_eq!(ab, addresses_collide(b, a), "{a} {b}: symmetric");
            ab
        };
        assert!(c("127.0.0.1:7000", "127.0.0.1:7000"));
        assert!(c("0.0.0.0:7000", "127.0.0.1:7000"));
        assert!(c("0.0.0.0:7000", "0.0.0.0:7000"));
        assert!(c("[::]:7000", "[::1]:7000"));
        assert!(
            c("[::]:7000", "127.0.0.1:7000"),
            "dual-stack [::] takes IPv4"
        );
        assert!(c("[::]:7000", "0.0.0.0:7000"));
        assert!(c("[::ffff:127.0.0.1]:7000", "127.0.0.1:7000"), "v4-mapped");
        assert!(!c("0.0.0.0:7000", "[::1]:7000"), "0.0.0.0 is IPv4 only");
        assert!(!c("127.0.0.1:7000", "127.0.0.2:7000"));
        assert!(!c("127.0.0.1:7000", "127.0.0.1:7001"));
        assert!(
            !c("127.0.0.1:0", "127.0.0.1:0"),
            "ephemeral ports never collide"
        );
        assert!(!c("0.0.0.0:0", "127.0.0.1:0"));
    }

    /// Hardening item 3: `0.0.0.0:P` and `127.0.0.1:P` in two groups passed validation, then the
    /// second bind failed at run time with a bare "Address already in use".
    #[test]
    fn wildcard_and_specific_address_on_one_port_are_refused() {
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut a = GroupConfig::new("a", Policy::Fifo, 80);
        a.handlers.push(udp(&format!("0.0.0.0:{port}")));
        let mut b = GroupConfig::new("b", Policy::Fifo, 40);
        b.handlers.push(udp(&format!("127.0.0.1:{port}")));
        let e = cfg(vec![a.clone(), b]).validate_on(&machine()).unwrap_err();
        assert_eq!(e.path(), "group[1].handler[0].bind");
        assert!(
            e.message.contains("group[0].handler[0].bind"),
            "{}",
            e.message
        );
        // The same port over TCP is another socket space: no collision.
        let mut b = GroupConfig::new("b", Policy::Fifo, 40);
        b.handlers.push(HandlerConfig::TcpEcho {
            bind: format!("127.0.0.1:{port}").parse().unwrap(),
            work_us: 0,
        });
        cfg(vec![a, b]).check_settings(&[0, 1]).unwrap();
    }

    /// Hardening item 4: two handlers on port 0 were refused as "bound by another handler".
    #[test]
    fn ephemeral_ports_never_conflict() {
        let mut a = GroupConfig::new("a", Policy::Fifo, 80);
        a.handlers.push(udp("127.0.0.1:0"));
        a.handlers.push(udp("127.0.0.1:0"));
        let mut b = GroupConfig::new("b", Policy::Fifo, 40);
        b.handlers.push(HandlerConfig::TcpEcho {
            bind: "127.0.0.1:0".parse().unwrap(),
            work_us: 0,
        });
        b.handlers.push(HandlerConfig::TcpEcho {
            bind: "127.0.0.1:0".parse().unwrap(),
            work_us: 0,
        });
        cfg(vec![a, b]).validate_on(&machine()).unwrap();
    }

    #[test]
    fn metrics_address_is_validated() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut c = cfg(vec![GroupConfig::new("a", Policy::Fifo, 80)]);
        c.metrics = Some(format!("127.0.0.1:{port}").parse().unwrap());
        c.validate_on(&machine()).unwrap();
        for wrong in ["127.0.0.1:0", "0.0.0.0:9464", "[::]:9464"] {
            c.metrics = Some(wrong.parse().unwrap());
            let e = c.validate_on(&machine()).unwrap_err();
            assert_eq!(e.path(), "runtime.metrics", "{wrong}");
        }
        // A tcp-echo on the same port collides; a udp-echo does not.
        c.metrics = Some(format!("127.0.0.1:{port}").parse().unwrap());
        c.groups[0].handlers.push(udp(&format!("0.0.0.0:{port}")));
        c.check_settings(&[0, 1]).unwrap();
        c.groups[0].handlers.push(HandlerConfig::TcpEcho {
            bind: format!("0.0.0.0:{port}").parse().unwrap(),
            work_us: 0,
        });
        let e = c.check_settings(&[0, 1]).unwrap_err();
        assert_eq!(e.path(), "runtime.metrics");
        assert!(
            e.message.contains("group[0].handler[1].bind"),
            "{}",
            e.message
        );
        // A port in use now is refused like a handler's.
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        c.groups[0].handlers.clear();
        c.metrics = Some(held.local_addr().unwrap());
        let e = c.validate_on(&machine()).unwrap_err();
        assert_eq!(e.path(), "runtime.metrics");
        assert!(e.message.contains("in use"), "{}", e.message);
    }

    #[test]
    fn memory_is_counted_from_what_the_runtime_allocates() {
        let mut g = GroupConfig::new("a", Policy::Fifo, 80);
        g.threads = 3;
        g.buffer_bytes = 4096;
        let m = g.memory();
        assert_eq!(m.threads, 3);
        assert_eq!(m.stack, DEFAULT_STACK_BYTES as u64);
        // Buffer, scratch and 16 datagram slots of buffer_bytes, plus per-slot headers whose
        // size does not depend on buffer_bytes.
        let overhead = m.buffers - 18 * 4096;
        g.buffer_bytes = 65536;
        assert_eq!(g.memory().buffers - 18 * 65536, overhead);
        assert!(overhead > 0 && overhead < 16 * 512, "{overhead}");
        assert_eq!(
            m.telemetry,
            (telemetry::RING_CAPACITY * std::mem::size_of::<telemetry::Sample>()) as u64
        );
        assert!(m.handle_table >= DEFAULT_MAX_HANDLES as u64 * 4);
        assert_eq!(
            m.total(),
            3 * (m.stack + m.buffers + m.telemetry) + m.handle_table
        );
        let two = cfg(vec![g.clone(), GroupConfig::new("b", Policy::Fifo, 40)]);
        assert_eq!(
            two.preallocated_bytes(),
            g.memory().total() + GroupConfig::new("b", Policy::Fifo, 40).memory().total()
        );
    }

    #[test]
    fn a_plan_larger_than_memory_names_the_largest_share() {
        let mut small = GroupConfig::new("small", Policy::Fifo, 80);
        small.buffer_bytes = 4096;
        let big = GroupConfig::new("big", Policy::Fifo, 40); // 64 KiB buffers: buffers are its largest share
        let c = cfg(vec![small, big]);
        let need = c.preallocated_bytes();
        let m = Machine {
            mem_total: Some(need - 1),
            ..machine()
        };
        let e = c.validate_on(&m).unwrap_err();
        assert_eq!(e.path(), "group[1].buffer_bytes");
        assert!(e.message.contains("MemTotal"), "{}", e.message);
        let mut c2 = c.clone();
        c2.groups[1].stack_bytes = 8 << 20;
        let e = c2.validate_on(&m).unwrap_err();
        assert_eq!(e.path(), "group[1].stack_bytes");
        // Exactly enough memory passes.
        let m = Machine {
            mem_total: Some(need),
            ..machine()
        };
        c.validate_on(&m).unwrap();
    }

    #[test]
    fn deadline_lanes_are_checked_against_the_kernels_rules() {
        let dl = |runtime_us, deadline_us, period_us| {
            let mut g = GroupConfig::new("ctl", Policy::Deadline, 90);
            g.threads = 1;
            g.deadline = Some(Deadline {
                runtime_us,
                deadline_us,
                period_us,
            });
            g
        };
        let cpus = [0, 1];
        let check = |groups: Vec<GroupConfig>, bw| cfg(groups).check_deadlines(&cpus, bw);
        check(vec![dl(200, 1000, 1000)], Some(0.95)).unwrap();
        for (g, field) in [
            (dl(0, 1000, 1000), "deadline"),
            (dl(500, 400, 1000), "deadline"),
            (dl(200, 2000, 1000), "deadline"),
            (
                GroupConfig {
                    deadline: None,
                    ..dl(1, 1, 1)
                },
                "deadline",
            ),
            (
                GroupConfig {
                    cpus: Some(vec![1]),
                    ..dl(200, 1000, 1000)
                },
                "cpus",
            ),
            (
                GroupConfig {
                    on_overrun: OnOverrun::Demote,
                    ..dl(200, 1000, 1000)
                },
                "on_overrun",
            ),
        ] {
            assert_eq!(
                check(vec![g.clone()], Some(0.95)).unwrap_err().field,
                field,
                "{g:?}"
            );
        }
        // Parameters on a FIFO group are refused too.
        let mut fifo = GroupConfig::new("f", Policy::Fifo, 50);
        fifo.deadline = Some(Deadline {
            runtime_us: 1,
            deadline_us: 1,
            period_us: 1,
        });
        assert_eq!(check(vec![fifo], None).unwrap_err().field, "deadline");
        // Bandwidth: 4 threads × 0.5 = 2 CPUs > 0.95 × 2 CPUs; fine without throttling.
        let mut heavy = dl(500, 1000, 1000);
        heavy.threads = 4;
        let e = check(vec![heavy.clone()], Some(0.95)).unwrap_err();
        assert!(e.message.contains("reserve 2.00 CPUs"), "{}", e.message);
        check(vec![heavy], None).unwrap();
    }

    #[test]
    fn lock_memory_must_fit_rlimit_memlock() {
        let mut c = cfg(vec![GroupConfig::new("a", Policy::Fifo, 80)]);
        let m = Machine {
            memlock_limit: Some(1 << 20),
            ..machine()
        };
        c.validate_on(&m).unwrap();
        c.lock_memory = true;
        c.rt = RtMode::BestEffort;
        c.validate_on(&m).unwrap(); // mlockall may fail: a warning at start
        c.rt = RtMode::Required;
        let e = c.validate_on(&m).unwrap_err();
        assert_eq!(e.path(), "group[0].buffer_bytes");
        assert!(e.message.contains("RLIMIT_MEMLOCK"), "{}", e.message);
        let unlimited = Machine {
            memlock_limit: None,
            ..machine()
        };
        c.validate_on(&unlimited).unwrap();
    }

    #[test]
    fn timer_rate_adds_every_timer() {
        let mut g = GroupConfig::new("a", Policy::Fifo, 80);
        assert_eq!(g.timer_events_per_sec(), 0.0);
        g.handlers.push(HandlerConfig::Timer {
            interval_us: 1000,
            count: 2,
            distance_us: 1000,
        });
        g.handlers.push(udp("127.0.0.1:0"));
        assert_eq!(g.timer_events_per_sec(), 1500.0);
        g.handlers[0] = HandlerConfig::Timer {
            interval_us: 50,
            count: 256,
            distance_us: 0,
        };
        assert_eq!(g.timer_events_per_sec(), 256.0 * 20_000.0);
    }

    #[test]
    fn named_handler_errors_split_back() {
        assert_eq!(
            split_named("`interval_us`: invalid type: string \"x\", expected u64"),
            Some(("interval_us", "invalid type: string \"x\", expected u64"))
        );
        assert_eq!(split_named("unknown field `bind`"), None);
        assert_eq!(split_named("`a b`: x"), None);
    }
}
