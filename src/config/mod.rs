//! Runtime configuration: the types a TOML file or code fills in, and their validation.
//!
//! [`RuntimeConfig::validate`] is the single place where configurations are checked; the TOML
//! loader ([`load`]) only adds the file name and line to the errors it finds.

mod file;

pub use file::{load, parse};

use crate::error::Error;
use crate::follower_queue::{Promotion, MAX_GROUP_THREADS};
use std::collections::HashSet;
use std::net::SocketAddr;

/// What to do when real-time scheduling cannot be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RtMode {
    /// Warn and run at normal priority.
    #[default]
    BestEffort,
    /// Refuse to start, naming the missing capability or rlimit.
    Required,
}

/// Scheduling policy of a group's threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// `SCHED_FIFO`: run until blocking or preempted by a higher priority.
    #[default]
    Fifo,
    /// `SCHED_RR`: like FIFO, with a time slice among equal priorities.
    Rr,
    /// `SCHED_OTHER`: the normal time-sharing policy (`priority` then only orders followers).
    Other,
}

/// What the overrun watchdog does when a handler exceeds its group's `budget_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnOverrun {
    /// Report it (tracing warning and the `budget_overruns` metric).
    #[default]
    Report,
    /// Report it and drop the thread to `SCHED_OTHER` until the handler returns.
    Demote,
}

/// A built-in handler, so that a configuration file alone runs a service.
#[derive(Debug, Clone, PartialEq)]
pub enum HandlerConfig {
    /// Echo each datagram verbatim to its sender.
    UdpEcho {
        /// Address to bind.
        bind: SocketAddr,
        /// Thread CPU time burnt per datagram, standing in for handler cost (µs).
        work_us: u64,
    },
    /// Accept TCP connections and echo each stream's bytes back.
    TcpEcho {
        /// Address to listen on.
        bind: SocketAddr,
        /// Thread CPU time burnt per read, standing in for handler cost (µs).
        work_us: u64,
    },
    /// Periodic timers (absolute timerfd) that record their wake-up latency.
    Timer {
        /// Period (µs).
        interval_us: u64,
        /// How many timers.
        count: usize,
        /// Each further timer's period is this much longer (µs), as cyclictest's `-d`.
        distance_us: u64,
    },
}

/// One Leader/Followers group: a pool of threads at one priority sharing one handle set.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupConfig {
    /// Name, used in thread names (`lf-<name>-<n>`) and reports.
    pub name: String,
    /// Real-time priority 1..=99 (distinct across RT groups); 0 with `Policy::Other`.
    pub priority: u8,
    /// Scheduling policy.
    pub policy: Policy,
    /// Number of pool threads (1..=64).
    pub threads: usize,
    /// CPUs the threads may run on; `None` = all CPUs of the process.
    pub cpus: Option<Vec<usize>>,
    /// Follower promotion order.
    pub promotion: Promotion,
    /// Per-thread priorities (one per thread, each ≤ `priority` and above every lower group's).
    pub thread_priorities: Option<Vec<u8>>,
    /// Size of each thread's preallocated receive buffer and scratch buffer.
    pub buffer_bytes: usize,
    /// Capacity of the group's handle table.
    pub max_handles: usize,
    /// Stack size of each pool thread; all of it is pre-faulted.
    pub stack_bytes: usize,
    /// Handler time budget (µs) for the overrun watchdog; `None` = no watchdog.
    pub budget_us: Option<u64>,
    /// What the watchdog does on an overrun.
    pub on_overrun: OnOverrun,
    /// Built-in handlers registered at start.
    pub handlers: Vec<HandlerConfig>,
}

/// Default per-thread buffer size.
pub const DEFAULT_BUFFER_BYTES: usize = 64 * 1024;
/// Default handle table size.
pub const DEFAULT_MAX_HANDLES: usize = 1024;
/// Default pool thread stack size.
pub const DEFAULT_STACK_BYTES: usize = 256 * 1024;

impl GroupConfig {
    /// A group with defaults: SCHED_FIFO, 2 threads, all CPUs, priority promotion,
    /// 64 KiB buffers, 1024 handles, 256 KiB stacks, no watchdog, no built-in handlers.
    pub fn new(name: impl Into<String>, priority: u8) -> GroupConfig {
        GroupConfig {
            name: name.into(),
            priority,
            policy: Policy::Fifo,
            threads: 2,
            cpus: None,
            promotion: Promotion::Priority,
            thread_priorities: None,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            max_handles: DEFAULT_MAX_HANDLES,
            stack_bytes: DEFAULT_STACK_BYTES,
            budget_us: None,
            on_overrun: OnOverrun::Report,
            handlers: Vec::new(),
        }
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
}

/// The whole runtime: global settings and its groups.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuntimeConfig {
    /// Real-time mode.
    pub rt: RtMode,
    /// `mlockall(MCL_CURRENT | MCL_FUTURE)` before the pool starts.
    pub lock_memory: bool,
    /// The groups, highest priority first or in any order.
    pub groups: Vec<GroupConfig>,
}

/// A validation failure: which field of which group (or handler), and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    /// Group index, if the field belongs to a group.
    pub group: Option<usize>,
    /// Handler index within the group, if the field belongs to a handler.
    pub handler: Option<usize>,
    /// Field name as written in TOML.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

impl Invalid {
    /// The field as a path: `group[1].priority`.
    pub fn path(&self) -> String {
        match (self.group, self.handler) {
            (Some(g), Some(h)) => format!("group[{g}].handler[{h}].{}", self.field),
            (Some(g), None) => format!("group[{g}].{}", self.field),
            _ => format!("runtime.{}", self.field),
        }
    }
}

impl From<Invalid> for Error {
    fn from(i: Invalid) -> Error {
        Error::config(i.path(), i.message)
    }
}

impl RuntimeConfig {
    /// Checks everything that can be checked without starting anything: ranges, distinct
    /// priorities, existing CPUs, and that every address binds (ports are free).
    pub fn validate(&self) -> Result<(), Invalid> {
        self.validate_with_cpus(&crate::sys::sched::online_cpus())
    }

    /// [`validate`](Self::validate) against a given set of usable CPUs.
    pub fn validate_with_cpus(&self, cpus: &[usize]) -> Result<(), Invalid> {
        let bad = |g: usize, field: &'static str, message: String| Invalid {
            group: Some(g),
            handler: None,
            field,
            message,
        };
        if self.groups.is_empty() {
            return Err(Invalid {
                group: None,
                handler: None,
                field: "group",
                message: "at least one [[group]] is required".into(),
            });
        }
        let mut names = HashSet::new();
        let mut prios: Vec<(u8, usize)> = Vec::new();
        let mut addrs = HashSet::new();
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
                Policy::Fifo | Policy::Rr if !(1..=99).contains(&g.priority) => {
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
            if g.max_handles == 0 || g.max_handles > 1 << 20 {
                return Err(bad(
                    gi,
                    "max_handles",
                    format!("{}: must be 1..=1048576", g.max_handles),
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
            let handles: usize = g
                .handlers
                .iter()
                .map(|h| {
                    if let HandlerConfig::Timer { count, .. } = h {
                        *count
                    } else {
                        1
                    }
                })
                .sum();
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
                let hbad = |field: &'static str, message: String| Invalid {
                    group: Some(gi),
                    handler: Some(hi),
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
                        if !addrs.insert((tcp, *bind)) {
                            return Err(hbad(
                                "bind",
                                format!("{bind} is bound by another handler"),
                            ));
                        }
                        let probe = if tcp {
                            std::net::TcpListener::bind(bind).map(drop)
                        } else {
                            std::net::UdpSocket::bind(bind).map(drop)
                        };
                        if let Err(e) = probe {
                            return Err(hbad("bind", format!("cannot bind {bind}: {e}")));
                        }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(groups: Vec<GroupConfig>) -> RuntimeConfig {
        RuntimeConfig {
            rt: RtMode::BestEffort,
            lock_memory: false,
            groups,
        }
    }

    fn field_of(c: &RuntimeConfig) -> String {
        c.validate_with_cpus(&[0, 1]).unwrap_err().path()
    }

    #[test]
    fn each_invalid_setting_names_its_field() {
        let ok = cfg(vec![GroupConfig::new("a", 80), GroupConfig::new("b", 40)]);
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
    }

    #[test]
    fn port_in_use_is_found_at_validation() {
        let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut g = GroupConfig::new("a", 10);
        g.handlers.push(HandlerConfig::UdpEcho {
            bind: held.local_addr().unwrap(),
            work_us: 0,
        });
        let e = cfg(vec![g]).validate_with_cpus(&[0]).unwrap_err();
        assert_eq!(e.path(), "group[0].handler[0].bind");
        assert!(e.message.contains("in use"), "{}", e.message);
    }
}
