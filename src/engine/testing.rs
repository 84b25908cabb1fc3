//! What the engine's unit tests share: a lane's plain parameters, an eventfd handler that
//! records what it saw, and the machine-wide lock every SCHED_FIFO test takes.

use crate::engine::borrow::BorrowSpec;
use crate::engine::follower_queue::Promotion;
use crate::engine::handler::{Context, Disposition, Event, EventHandler};
use crate::engine::lane::{LaneSpec, OnOverrun};
use crate::sys::{fd, fd::EventFd, sched, sched::Sched};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Mutex};

/// A lane `name` of `threads` time-shared threads (no privilege needed), priority 10.
pub(crate) fn spec(name: &str, threads: usize) -> LaneSpec {
    LaneSpec {
        name: name.to_owned(),
        priority: 10,
        threads: vec![(Sched::Other, 10); threads],
        promotion: Promotion::Priority,
        max_handles: 8,
        buffer_bytes: 1024,
        stack_bytes: 256 * 1024,
        cpus: None,
        budget_us: None,
        on_overrun: OnOverrun::Report,
        borrow: None,
        promote_after_ns: 50_000,
    }
}

/// `spec` of a lane that borrows from `from`, one thread at a time, raising a lent thread to
/// `sched`.
pub(crate) fn borrowing(name: &str, from: &[&str], sched: Sched) -> LaneSpec {
    LaneSpec {
        priority: 20,
        borrow: Some(BorrowSpec {
            from: from.iter().map(|s| s.to_string()).collect(),
            sched,
            max: 1,
        }),
        ..spec(name, 1)
    }
}

/// What a [`Recorder`] saw of one dispatch: the lane, thread index and priority its context
/// named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) lane: usize,
    pub(crate) thread: usize,
    pub(crate) priority: u8,
}

/// A handler on an eventfd (readable once written) that records each dispatch and leaves the
/// count unread, so its handle is ready again whenever it is re-armed.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) fd: Arc<EventFd>,
    pub(crate) seen: Arc<Mutex<Vec<Seen>>>,
}

impl Recorder {
    pub(crate) fn new() -> Recorder {
        Recorder {
            fd: Arc::new(EventFd::new().expect("eventfd")),
            seen: Arc::default(),
        }
    }
}

impl EventHandler for Recorder {
    fn source(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
    fn handle(&mut self, _: &Event, ctx: &mut Context) -> Disposition {
        self.seen.lock().unwrap().push(Seen {
            lane: ctx.lane(),
            thread: ctx.thread_index(),
            priority: ctx.priority(),
        });
        Disposition::Rearm
    }
}

/// The machine-wide lock of the SCHED_FIFO tests (the one `rt-tests/tests/util` takes), held
/// while the value lives.
#[derive(Debug)]
pub(crate) struct RtLock(#[allow(dead_code)] File);

/// Skips a test as the integration tests do: `line` on stderr and in
/// `/tmp/lfrt-skipped-tests.log`, which `.ci/run` prints. Under CI, which runs as root,
/// nothing may skip: it panics with `line` instead.
pub(crate) fn skip(line: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "under CI nothing skips: {line}"
    );
    eprintln!("{line}");
    if let Ok(mut log) = File::options()
        .create(true)
        .append(true)
        .open("/tmp/lfrt-skipped-tests.log")
    {
        let _ = writeln!(log, "{line}");
    }
}

/// Takes the RT test lock if this process may use SCHED_FIFO at `priority`. Otherwise the test
/// skips as the integration tests do (a line in `/tmp/lfrt-skipped-tests.log`, which `.ci/run`
/// prints) and this returns `None`; under CI, which runs as root, it fails instead.
pub(crate) fn fifo_allowed(test: &str, priority: u8) -> Option<RtLock> {
    let p = sched::RtPrivilege::probe();
    if !p.allows(priority) {
        skip(&format!(
            "SKIP {test}: SCHED_FIFO {priority} not permitted (no CAP_SYS_NICE, RLIMIT_RTPRIO {})",
            p.rlimit_rtprio
        ));
        return None;
    }
    let f = File::create("/tmp/lfrt-tools.lock").expect("create the RT test lock file");
    fd::lock_exclusive(&f).expect("flock on the RT test lock");
    Some(RtLock(f))
}
