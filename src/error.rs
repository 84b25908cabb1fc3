//! The one error type of lfrt's set-up and control paths.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Why building, starting or controlling a runtime failed. Nothing is left running when a
/// constructor returns an error.
///
/// # Examples
/// ```
/// use lfrt::{Error, LaneConfig, Policy, Runtime, RuntimeConfig};
/// let mut cfg = RuntimeConfig::default();
/// cfg.lanes.push(LaneConfig::new("control", Policy::Fifo, 80));
/// let rt = Runtime::new(cfg)?;
/// match rt.lane("contorl") {
///     Err(Error::UnknownLane { name, known }) => assert_eq!((name.as_str(), &known[..]), ("contorl", &["control".to_owned()][..])),
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid. `file`/`line` are set when it came from a TOML file.
    Config {
        /// The configuration file, if any.
        file: Option<PathBuf>,
        /// 1-based line of the offending value, if known.
        line: Option<usize>,
        /// The field, as a path (`lane[1].priority`, `lane[0].handler[2].bind`).
        field: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// `rt = "required"` but the kernel will not grant the real-time policy.
    RtPermission {
        /// The lane whose threads could not be made real-time.
        lane: String,
        /// The priority that was refused.
        priority: u8,
        /// The kernel's answer.
        source: io::Error,
        /// What the process has: capability and rlimit.
        have: String,
        /// The policy refused was SCHED_DEADLINE, which only CAP_SYS_NICE grants
        /// (RLIMIT_RTPRIO does not).
        deadline: bool,
    },
    /// A scheduling call failed for another reason.
    Sched {
        /// The lane.
        lane: String,
        /// What was attempted.
        what: String,
        /// The kernel's answer.
        source: io::Error,
    },
    /// A pool thread died (panicked) before it reported ready.
    ThreadSetup {
        /// The thread's lane.
        lane: String,
        /// The thread's index in its lane (its name is `lf-<lane>-<thread>`).
        thread: usize,
        /// The panic message.
        message: String,
    },
    /// A socket could not be bound.
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The kernel's answer (e.g. address in use).
        source: io::Error,
    },
    /// A bound lane could not connect to its back-end (`[lane.bound] connect`).
    Connect {
        /// The lane.
        lane: String,
        /// The back-end's address.
        addr: SocketAddr,
        /// The kernel's answer (e.g. connection refused).
        source: io::Error,
    },
    /// Every slot of the lane's handle table is in use.
    TooManyHandles {
        /// The configured `max_handles`.
        max: usize,
    },
    /// A system call failed.
    Io {
        /// What lfrt was doing.
        context: &'static str,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The runtime is in the wrong state for the call (e.g. started twice).
    State(&'static str),
    /// A handler's fd is in blocking mode: a read on it could block a pool thread (and
    /// shutdown with it). Set it nonblocking (e.g. `set_nonblocking(true)`) before registering.
    Blocking {
        /// The fd.
        fd: i32,
    },
    /// Handlers still running when a graceful shutdown's deadline passed
    /// ([`Runtime::shutdown_within`](crate::Runtime::shutdown_within)); their threads were left
    /// detached.
    Unfinished {
        /// The deadline that passed.
        deadline: std::time::Duration,
        /// Each unfinished handler: its lane, thread and handle.
        handlers: Vec<String>,
        /// Each lane whose async tasks were not all cancelled (a task's poll was still
        /// running): its name and how many; they are cancelled when that poll returns.
        tasks: Vec<String>,
    },
    /// [`Runtime::lane`](crate::Runtime::lane) was asked for a lane the runtime does
    /// not have.
    UnknownLane {
        /// The name asked for.
        name: String,
        /// The runtime's lanes, in order.
        known: Vec<String>,
    },
}

impl Error {
    pub(crate) fn config(field: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Config {
            file: None,
            line: None,
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config { file, line, field, message } => {
                match (file, line) {
                    (Some(p), Some(l)) => write!(f, "{}:{l}: ", p.display())?,
                    (Some(p), None) => write!(f, "{}: ", p.display())?,
                    _ => {}
                }
                write!(f, "invalid `{field}`: {message}")
            }
            Error::RtPermission { lane, source, have, deadline: true, .. } => write!(
                f,
                "lane `{lane}`: SCHED_DEADLINE refused ({source}); a deadline lane needs \
                 CAP_SYS_NICE, which RLIMIT_RTPRIO does not replace (this process has {have}). \
                 Grant it with `setcap cap_sys_nice+ep $(which lfrt)` or AmbientCapabilities=CAP_SYS_NICE, \
                 or use policy \"fifo\""
            ),
            Error::RtPermission { lane, priority, source, have, deadline: false } => write!(
                f,
                "lane `{lane}`: real-time priority {priority} refused ({source}); rt = \"required\" needs \
                 CAP_SYS_NICE or a soft RLIMIT_RTPRIO >= {priority} (this process has {have}). Grant it with \
                 `setcap cap_sys_nice+ep $(which lfrt)`, or `ulimit -r {priority}` / an rtprio line in \
                 /etc/security/limits.conf, or run with rt = \"best-effort\""
            ),
            Error::Sched { lane, what, source } => write!(f, "lane `{lane}`: {what}: {source}"),
            Error::ThreadSetup { lane, thread, message } => write!(
                f,
                "lane `{lane}`: pool thread {thread} (lf-{lane}-{thread}) died during set-up: {message}"
            ),
            Error::Bind { addr, source } => write!(f, "cannot bind {addr}: {source}"),
            Error::Connect { lane, addr, source } => write!(
                f,
                "lane `{lane}`: cannot connect to the back-end at {addr}: {source}"
            ),
            Error::TooManyHandles { max } => write!(f, "handle table full: all {max} slots in use (raise max_handles)"),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::State(s) => f.write_str(s),
            Error::Blocking { fd } => write!(
                f,
                "fd {fd} is in blocking mode: a handler reading it could block its pool thread; \
                 set it nonblocking (O_NONBLOCK, e.g. set_nonblocking(true)) before registering"
            ),
            Error::Unfinished {
                deadline,
                handlers,
                tasks,
            } => {
                write!(
                    f,
                    "shutdown: {} handler(s) still running after {deadline:?} (a handler is not returning): {}",
                    handlers.len(),
                    handlers.join("; ")
                )?;
                if !tasks.is_empty() {
                    write!(f, "; tasks not cancelled yet: {}", tasks.join("; "))?;
                }
                Ok(())
            }
            Error::UnknownLane { name, known } => {
                write!(f, "no lane named `{name}`; the lanes are: ")?;
                if known.is_empty() {
                    return f.write_str("none");
                }
                for (i, k) in known.iter().enumerate() {
                    write!(f, "{}`{k}`", if i == 0 { "" } else { ", " })?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::RtPermission { source, .. }
            | Error::Sched { source, .. }
            | Error::Bind { source, .. }
            | Error::Connect { source, .. }
            | Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
