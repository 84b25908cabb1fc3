//! A check's result as data: a [`Finding`] (status, topic, text and fix), the [`Report`] the
//! findings make, and the [`Verdict`] they add up to, with `lfrt doctor`'s exit status for it.

use std::fmt;

/// How a finding stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Status {
    Ok,
    Warn,
    Fail,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        })
    }
}

/// One line of the report, and its fix when it is not `ok`.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub(crate) status: Status,
    pub(crate) topic: &'static str,
    pub(crate) text: String,
    pub(crate) fix: Option<String>,
    /// A `warn` that means the plan does not run as configured: real-time lanes flattened to
    /// time-sharing. The verdict then says "not as intended" ([`Verdict::Flattened`]).
    pub(crate) flattens: bool,
}

pub(crate) fn ok(topic: &'static str, text: impl Into<String>) -> Finding {
    Finding {
        status: Status::Ok,
        topic,
        text: text.into(),
        fix: None,
        flattens: false,
    }
}

pub(crate) fn not_ok(
    status: Status,
    topic: &'static str,
    text: impl Into<String>,
    fix: impl Into<String>,
) -> Finding {
    Finding {
        status,
        topic,
        text: text.into(),
        fix: Some(fix.into()),
        flattens: false,
    }
}

/// What `lfrt doctor` found: print it with `{}`; [`verdict`](Report::verdict) gives the exit
/// status.
#[derive(Debug, Clone)]
pub struct Report {
    pub(crate) findings: Vec<Finding>,
}

/// The report's verdict, and `lfrt doctor`'s exit status for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The configuration (or the default need) runs as configured here: exit status 0.
    AsIntended,
    /// A `fail`: `lfrt run` refuses to start, or starts without what the configuration asks
    /// for: exit status 1.
    CannotRun,
    /// It runs, but not as intended: `rt = "best-effort"` with real time refused, so its lanes
    /// are flattened to time-sharing: exit status 3.
    Flattened,
}

impl Verdict {
    /// `lfrt doctor`'s exit status: 0, 1 or 3 (2 is a bad argument or configuration).
    pub fn exit_status(self) -> u8 {
        match self {
            Verdict::AsIntended => 0,
            Verdict::CannotRun => 1,
            Verdict::Flattened => 3,
        }
    }
}

impl Report {
    /// What the findings add up to.
    pub fn verdict(&self) -> Verdict {
        if self.findings.iter().any(|f| f.status == Status::Fail) {
            Verdict::CannotRun
        } else if self.findings.iter().any(|f| f.flattens) {
            Verdict::Flattened
        } else {
            Verdict::AsIntended
        }
    }

    /// The configuration (or the default need, `SCHED_FIFO` at some priority) can run as
    /// intended on this machine, by this process: no `fail`, and no lane flattened.
    pub fn ready(&self) -> bool {
        self.verdict() == Verdict::AsIntended
    }
}
