//! The settings of each table: every `[[lane]]` and its `[[lane.handler]]`s, one check per
//! table (`[runtime]`'s two settings need none).

use super::super::*;
use super::*;
use crate::engine::follower_queue::MAX_LANE_THREADS;
use std::collections::HashSet;
use std::net::SocketAddr;

/// The longest deferred promotion (`promote_after_us`): one second.
const MAX_PROMOTE_AFTER_US: u64 = 1_000_000;

/// What the per-table checks learn as they go: the lane names, the real-time priorities (and
/// their lane) and the (tcp, address, where) of every handler seen so far.
#[derive(Default)]
struct Seen<'a> {
    names: HashSet<&'a str>,
    prios: Vec<(u8, usize)>,
    addrs: Vec<(bool, SocketAddr, Section)>,
}

impl RuntimeConfig {
    /// Ranges, names, priorities, lanes, CPUs and address collisions, table by table.
    pub(crate) fn check_settings(&self, cpus: &[usize]) -> Result<(), Invalid> {
        if self.lanes.is_empty() {
            return Err(Invalid {
                section: Section::Root,
                field: "lane",
                message: "at least one [[lane]] is required".into(),
            });
        }
        if let Some((field, message)) = self.trace.invalid() {
            return Err(Invalid {
                section: Section::Trace,
                field,
                message,
            });
        }
        let mut seen = Seen::default();
        for (gi, g) in self.lanes.iter().enumerate() {
            self.check_lane(gi, g, cpus, &mut seen)?;
            for (hi, h) in g.handlers.iter().enumerate() {
                check_handler(
                    Section::Handler {
                        lane: gi,
                        handler: hi,
                    },
                    h,
                    &mut seen,
                )?;
            }
        }
        self.check_thread_priorities(&seen)
    }

    /// One `[[lane]]`'s own settings: name, policy and priority, threads, CPUs, sizes, budget
    /// and the handles its handlers need.
    fn check_lane<'a>(
        &self,
        gi: usize,
        g: &'a LaneConfig,
        cpus: &[usize],
        seen: &mut Seen<'a>,
    ) -> Result<(), Invalid> {
        let bad = |g: usize, field: &'static str, message: String| Invalid {
            section: Section::Lane(g),
            field,
            message,
        };
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
        if !seen.names.insert(g.name.as_str()) {
            return Err(bad(
                gi,
                "name",
                format!("`{}` is used by another lane", g.name),
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
                    "missing or 0: SCHED_FIFO/RR lanes need a priority 1..=99".into(),
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
            if let Some(&(_, other)) = seen.prios.iter().find(|(p, _)| *p == g.priority) {
                return Err(bad(
                    gi,
                    "priority",
                    format!(
                        "{} is already the priority of lane `{}`: each lane needs its own",
                        g.priority, self.lanes[other].name
                    ),
                ));
            }
            seen.prios.push((g.priority, gi));
        }
        if g.threads == 0 || g.threads > MAX_LANE_THREADS {
            return Err(bad(
                gi,
                "threads",
                format!("{}: a lane needs 1..={MAX_LANE_THREADS} threads", g.threads),
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
        // The sizes: each within its range.
        for (field, value, range) in [
            ("buffer_bytes", g.buffer_bytes, 64..=64 << 20),
            (
                "max_handles",
                g.max_handles,
                1..=crate::engine::word::MAX_HANDLES,
            ),
            ("max_tasks", g.max_tasks, 0..=crate::task::MAX_TASKS),
            ("task_bytes", g.task_bytes, 64..=1 << 20),
            ("stack_bytes", g.stack_bytes, 64 * 1024..=64 << 20),
        ] {
            if !range.contains(&value) {
                let (lo, hi) = range.into_inner();
                return Err(bad(gi, field, format!("{value}: must be {lo}..={hi}")));
            }
        }
        if g.promote_after_us > MAX_PROMOTE_AFTER_US {
            return Err(bad(
                gi,
                "promote_after_us",
                format!(
                    "{}: must be 0..={MAX_PROMOTE_AFTER_US} (the longest an event may wait for \
                     a busy leader before a follower takes the role; 0 promotes before every \
                     event)",
                    g.promote_after_us
                ),
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
        if let Some(us) = g.trace_over_us {
            if us == 0 || us > 10_000_000 {
                return Err(bad(
                    gi,
                    "trace_over_us",
                    format!("{us}: must be 1..=10000000"),
                ));
            }
            if self.trace.window_ms == 0 {
                return Err(bad(
                    gi,
                    "trace_over_us",
                    "the flight recorder is off ([trace] window_ms = 0): nothing would be \
                     written"
                        .into(),
                ));
            }
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
        Ok(())
    }

    /// `thread_priorities`, against every lane's lane.
    fn check_thread_priorities(&self, seen: &Seen<'_>) -> Result<(), Invalid> {
        let bad = |g: usize, field: &'static str, message: String| Invalid {
            section: Section::Lane(g),
            field,
            message,
        };
        // Per-thread priorities must stay inside the lane's lane: at most the lane's priority
        // and above every lower lane's, so lanes never interleave.
        for (gi, g) in self.lanes.iter().enumerate() {
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
            let floor = seen
                .prios
                .iter()
                .map(|&(p, _)| p)
                .filter(|&p| p < g.priority)
                .max()
                .unwrap_or(0);
            if let Some(p) = tp.iter().find(|&&p| p > g.priority || p <= floor) {
                return Err(bad(gi, "thread_priorities", format!("{p} is outside this lane's lane {}..={} (above the next lower lane, at most the lane's priority)", floor + 1, g.priority)));
            }
        }
        Ok(())
    }
}

/// One `[[lane.handler]]` at `here`.
fn check_handler(here: Section, h: &HandlerConfig, seen: &mut Seen<'_>) -> Result<(), Invalid> {
    let hbad = |field: &'static str, message: String| Invalid {
        section: here,
        field,
        message,
    };
    match h {
        HandlerConfig::UdpEcho { bind } | HandlerConfig::TcpEcho { bind, .. } => {
            if let HandlerConfig::TcpEcho {
                max_connections, ..
            } = h
            {
                if *max_connections == 0 || *max_connections > crate::engine::word::MAX_HANDLES {
                    return Err(hbad(
                        "max_connections",
                        format!(
                            "{max_connections}: must be 1..={} (each connection also takes \
                             one of the lane's max_handles)",
                            crate::engine::word::MAX_HANDLES
                        ),
                    ));
                }
            }
            let tcp = matches!(h, HandlerConfig::TcpEcho { .. });
            if let Some((_, other, at)) = seen
                .addrs
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
            seen.addrs.push((tcp, *bind, here));
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
    Ok(())
}
