//! The memory plan: what a lane preallocates, from the same sizes the runtime allocates
//! with, and the check of the total against the machine.

use super::check::Machine;
use super::*;
use crate::engine::handler::{Context, Handles};
use crate::observe::telemetry;
use crate::sources::handlers::TcpEcho;
use crate::task::lane::Executor;
use std::fmt;

/// What one lane preallocates, in bytes: each pool thread's stack, buffers and telemetry ring,
/// the lane's handle table, bound pool and task table, and its `tcp-echo` handlers' connection
/// tables. Counted from the sizes the runtime allocates
/// ([`LaneConfig::memory`]); not counted are the process itself (code, heap, the telemetry
/// collector's histograms) and what handlers allocate, so this is a lower bound of what a
/// running lane holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneMemory {
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
    /// The lane's handle table (`max_handles` slots), once per lane.
    pub handle_table: u64,
    /// A bound lane's pool, once per lane: a reply buffer of `max_body` per waiter slot and
    /// the receive buffer; 0 for other lanes.
    pub bound: u64,
    /// The `tcp-echo` handlers' connection tables, once per handler: `max_connections` ×
    /// `buffer_bytes` each (the echo a peer has not taken yet); 0 without one.
    pub connections: u64,
    /// The lane's task table, once per lane: `max_tasks` slots of `task_bytes` (rounded up
    /// to 64, pre-faulted) and the executor's per-slot state and queues; 0 without tasks
    /// (`max_tasks = 0`).
    pub tasks: u64,
}

impl LaneMemory {
    /// Bytes one pool thread preallocates.
    pub fn per_thread(&self) -> u64 {
        self.stack
            .saturating_add(self.buffers)
            .saturating_add(self.telemetry)
    }

    /// Bytes the whole lane preallocates.
    pub fn total(&self) -> u64 {
        self.threads
            .saturating_mul(self.per_thread())
            .saturating_add(self.handle_table)
            .saturating_add(self.bound)
            .saturating_add(self.connections)
            .saturating_add(self.tasks)
    }

    /// The setting behind the largest share: the one to lower when the total is too large.
    fn largest_field(&self) -> &'static str {
        let t = self.threads;
        [
            // The connection tables are made of `buffer_bytes` buffers too.
            (
                t.saturating_mul(self.buffers)
                    .saturating_add(self.connections),
                "buffer_bytes",
            ),
            (t.saturating_mul(self.stack), "stack_bytes"),
            // The ring's size is fixed; only fewer threads make it smaller.
            (t.saturating_mul(self.telemetry), "threads"),
            (self.handle_table, "max_handles"),
            (self.tasks, "max_tasks"),
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

impl fmt::Display for LaneMemory {
    /// `2.1 MiB = 2 threads × 1.1 MiB (stack 256.0 KiB, buffers 72.9 KiB, telemetry ring
    /// 768.0 KiB) + handle table 1.1 KiB` (`+ bound pool buffers …` for a bound lane,
    /// `+ task table …` for a lane with tasks), then the exact byte count.
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
        if self.connections > 0 {
            write!(
                f,
                " + tcp-echo connection tables {}",
                Bytes(self.connections)
            )?;
        }
        if self.tasks > 0 {
            write!(f, " + task table {}", Bytes(self.tasks))?;
        }
        write!(f, " ({} bytes)", self.total())?;
        Ok(())
    }
}

impl LaneConfig {
    /// The memory the lane allocates and pre-faults before its threads serve the first event.
    pub fn memory(&self) -> LaneMemory {
        LaneMemory {
            threads: self.threads as u64,
            stack: self.stack_bytes as u64,
            buffers: Context::allocated_bytes(self.buffer_bytes),
            telemetry: (telemetry::RING_CAPACITY * std::mem::size_of::<telemetry::Sample>()) as u64,
            handle_table: Handles::table_bytes(self.max_handles),
            bound: self
                .bound
                .as_ref()
                .map_or(0, |b| b.pool_config(self).allocated_bytes()),
            connections: self
                .handlers
                .iter()
                .map(|h| match *h {
                    HandlerConfig::TcpEcho {
                        max_connections, ..
                    } => TcpEcho::table_bytes(max_connections, self.buffer_bytes),
                    _ => 0,
                })
                .fold(0, u64::saturating_add),
            tasks: if self.max_tasks > 0 {
                Executor::allocated_bytes(self.max_tasks, self.task_bytes)
            } else {
                0
            },
        }
    }
}

impl RuntimeConfig {
    /// Bytes every lane preallocates together ([`LaneConfig::memory`]), and the flight
    /// recorder's rings ([`recorder_bytes`](Self::recorder_bytes)).
    pub fn preallocated_bytes(&self) -> u64 {
        self.lanes.iter().fold(self.recorder_bytes(), |sum, g| {
            sum.saturating_add(g.memory().total())
        })
    }

    /// Bytes the flight recorder preallocates for all lanes ([`TraceConfig::bytes_per_lane`]
    /// each; 0 with `[trace] window_ms = 0`).
    pub fn recorder_bytes(&self) -> u64 {
        (self.lanes.len() as u64).saturating_mul(self.trace.bytes_per_lane())
    }

    /// The preallocated total against the machine's memory and, with `lock_memory` and
    /// `rt = "required"`, against what `mlockall` may lock (with `"best-effort"` a failed
    /// `mlockall` is a warning at start, so it is not refused here). The error names the
    /// largest lane's largest share.
    pub(crate) fn check_memory(&self, machine: &Machine) -> Result<(), Invalid> {
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
            .lanes
            .iter()
            .map(LaneConfig::memory)
            .enumerate()
            .fold(None::<(usize, LaneMemory)>, |a, (i, m)| match a {
                Some((_, b)) if b.total() >= m.total() => a,
                _ => Some((i, m)),
            })
            .expect("validated: at least one lane");
        Err(Invalid {
            section: Section::Lane(gi),
            field: largest.largest_field(),
            message: format!(
                "the plan preallocates {} ({total} bytes), more than {what}: {} ({limit} \
                 bytes){advice}; this lane takes {largest}",
                Bytes(total),
                Bytes(limit)
            ),
        })
    }
}
