//! Shared helpers for the real-time integration tests.
#![allow(dead_code)]

use std::fs::File;
use std::os::fd::AsRawFd;

/// Serialises every SCHED_FIFO test across test binaries and processes: on 2 cores, parallel
/// real-time tests disturb each other and can starve the test harness itself.
pub struct RtLock(File);

/// Takes the machine-wide RT test lock (`flock` on /tmp/lfrt-rt-tests.lock); released on drop.
pub fn rt_lock() -> RtLock {
    let f = File::create("/tmp/lfrt-rt-tests.lock").expect("create lock file");
    // SAFETY: valid fd; flock has no memory-safety preconditions.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock");
    RtLock(f)
}

/// True if this process may use SCHED_FIFO at `priority`; otherwise prints why the caller skips.
pub fn rt_allowed(test: &str, priority: u8) -> bool {
    let p = lfrt::os::RtPrivilege::probe();
    if p.allows(priority) {
        return true;
    }
    eprintln!(
        "SKIP {test}: SCHED_FIFO {priority} not permitted (CAP_SYS_NICE missing, RLIMIT_RTPRIO = {}); runs for real in CI as root",
        p.rlimit_rtprio
    );
    false
}

/// Polls `cond` every millisecond for up to `secs` seconds (a liveness bound, not a timing
/// assertion: the condition is the test's real check).
pub fn wait_until(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    cond()
}
