//! The validation and probe step: everything `check` refuses and `run` would fail on, checked
//! without starting anything. One file per table or concern: the settings of each
//! `[[lane]]` and its handlers (`settings.rs`), deadline lanes against the kernel's
//! rules (`deadline.rs`), lane borrowing (`borrowing.rs`), bound lanes (`bound.rs`), and
//! the bind checks (`binds.rs`); the memory plan is `memory.rs` beside it. Each returns the
//! first [`Invalid`] it finds, naming its section and field.

mod binds;
mod borrowing;
#[cfg(test)]
pub(crate) use borrowing::MAX_EPOLL_CHAIN;
mod bound;
mod deadline;
mod settings;

pub(crate) use binds::addresses_collide;
pub(crate) use deadline::DeadlineKernel;

use super::*;
use crate::sys::{mem, sched};
use crate::Error;

/// Where a setting is written in a configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The top level of the file (where the `lane` array is).
    Root,
    /// The `[runtime]` table.
    Runtime,
    /// The `[[lane]]` table with this index (0-based, in file order).
    Lane(usize),
    /// The `[lane.bound]` table of the lane with this index.
    Bound(usize),
    /// A `[[lane.handler]]` table.
    Handler {
        /// Index of its lane.
        lane: usize,
        /// Index of the handler within the lane.
        handler: usize,
    },
    /// The `[[band]]` table with this index (0-based, in file order).
    Band(usize),
    /// The `[trace]` table (the flight recorder).
    Trace,
}

impl Section {
    /// The path of `field` in this section as errors name it: `runtime.rt`,
    /// `lane[1].priority`, `lane[0].handler[2].bind`; an empty `field` names the table itself.
    pub fn path(self, field: &str) -> String {
        let table = match self {
            Section::Root => return field.to_string(),
            Section::Runtime => "runtime".to_string(),
            Section::Lane(g) => format!("lane[{g}]"),
            Section::Bound(g) => format!("lane[{g}].bound"),
            Section::Handler { lane, handler } => format!("lane[{lane}].handler[{handler}]"),
            Section::Band(b) => format!("band[{b}]"),
            Section::Trace => "trace".to_string(),
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
    /// The field as a path: `lane[1].priority`.
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
pub(crate) struct Machine {
    /// CPUs a lane may name.
    pub(crate) cpus: Vec<usize>,
    /// Physical memory (bytes), if known.
    pub(crate) mem_total: Option<u64>,
    /// The most bytes `mlockall` may lock (`None`: no limit).
    pub(crate) memlock_limit: Option<u64>,
}

impl Machine {
    pub(crate) fn probe(cpus: Vec<usize>) -> Machine {
        Machine {
            cpus,
            mem_total: mem::mem_total(),
            memlock_limit: mem::MemLock::probe().limit(),
        }
    }
}

impl RuntimeConfig {
    /// `[trace] kernel = true` needs an ftrace instance, which `Runtime::start` creates: refused
    /// here, as start would, when tracefs is missing or not writable (`KernelTrace::may_open`'s error).
    pub(crate) fn check_kernel_trace(&self, may_open: std::io::Result<()>) -> Result<(), Invalid> {
        may_open.map_err(|e| Invalid {
            section: Section::Trace,
            field: "kernel",
            message: format!(
                "the kernel recorder needs a private ftrace instance, and {e}; run as root, or \
                 set kernel = false"
            ),
        })
    }

    /// Checks everything that can be checked without starting anything: ranges, distinct
    /// priorities, existing CPUs, addresses that do not collide with each other, memory that
    /// fits the machine (and `RLIMIT_MEMLOCK` with `lock_memory`), and that every address binds
    /// now.
    ///
    /// The last two are point-in-time checks: another process may take a port or memory between
    /// this call and [`Runtime::new`](crate::Runtime::new), which then fails with
    /// [`Error::Bind`] (or cannot lock its memory).
    pub fn validate(&self) -> Result<(), Invalid> {
        self.validate_with_cpus(&sched::online_cpus())
    }

    /// [`validate`](Self::validate) against a given set of usable CPUs.
    pub fn validate_with_cpus(&self, cpus: &[usize]) -> Result<(), Invalid> {
        self.validate_on(&Machine::probe(cpus.to_vec()))
    }

    /// [`validate`](Self::validate) without binding any socket, for a lane added in code
    /// ([`Runtime::add_lane`](crate::Runtime::add_lane)) checked together with the lanes
    /// already there: the runtime holds their sockets already, and binds the new lane's itself
    /// (a failed bind is [`Error::Bind`]).
    pub(crate) fn validate_without_binds(&self) -> Result<(), Invalid> {
        self.check_all_but_binds(&Machine::probe(sched::online_cpus()))
    }

    /// [`validate`](Self::validate) against `machine`.
    pub(crate) fn validate_on(&self, machine: &Machine) -> Result<(), Invalid> {
        self.check_all_but_binds(machine)?;
        self.check_binds()
    }

    /// Every check but the bind probe, table by table and concern by concern, against
    /// `machine`.
    fn check_all_but_binds(&self, machine: &Machine) -> Result<(), Invalid> {
        self.check_settings(&machine.cpus)?;
        self.check_bands()?;
        self.check_bound()?;
        self.check_deadlines(
            &machine.cpus,
            sched::rt_bandwidth(),
            &DeadlineKernel::probe(),
        )?;
        self.check_borrowing()?;
        self.check_lender_privilege(sched::RtPrivilege::probe())?;
        if self.trace.kernel && self.trace.window_ms > 0 {
            self.check_kernel_trace(crate::sys::tracefs::KernelTrace::may_open())?;
        }
        self.check_memory(machine)
    }
}
