//! Shared helpers for the real-time integration tests.
#![allow(dead_code)]

use std::fs::File;
use std::os::fd::AsRawFd;

/// Serialises every SCHED_FIFO test across test binaries and processes: on 2 cores, parallel
/// real-time tests disturb each other and can starve the test harness itself.
pub struct RtLock(File);

/// Takes the machine-wide RT test lock (`flock` on /tmp/lfrt-tools.lock); released on drop.
pub fn rt_lock() -> RtLock {
    let f = File::create("/tmp/lfrt-tools.lock").expect("create lock file");
    // SAFETY: valid fd; flock has no memory-safety preconditions.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock");
    RtLock(f)
}

/// Where [`skip`] records every skipped test, one line each, because cargo test hides a passing
/// test's output: the README's test flow (and `.ci/run`) prints this file after the run.
pub const SKIP_LOG: &str = "/tmp/lfrt-skipped-tests.log";

/// The one way a test skips: prints `SKIP <test>: <why>`, appends the line to [`SKIP_LOG`] and
/// returns, so the caller returns too. Under CI (`CI` set
/// in the environment, as `.ci/run` runs: root, 2 CPUs, util-linux installed) nothing may skip,
/// so this panics instead and the run fails: a skipped real-time test is not a pass.
pub fn skip(test: &str, why: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{test} would skip under CI ({why}); CI runs as root with everything installed, so this is a failure");
    }
    eprintln!("SKIP {test}: {why}");
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(SKIP_LOG)
    {
        let _ = writeln!(f, "SKIP {test}: {why}");
    }
}

/// True if this process may use SCHED_FIFO at `priority`; otherwise [`skip`]s with the reason.
pub fn rt_allowed(test: &str, priority: u8) -> bool {
    let p = lfrt::os::RtPrivilege::probe();
    if p.allows(priority) {
        return true;
    }
    skip(
        test,
        &format!(
            "SCHED_FIFO {priority} not permitted (CAP_SYS_NICE missing, RLIMIT_RTPRIO = {}); runs for real in CI as root",
            p.rlimit_rtprio
        ),
    );
    false
}

/// True if every command in `tools` runs (`TOOL --version` succeeds); otherwise [`skip`]s
/// naming the missing ones (util-linux's prlimit, setpriv and taskset, which `.ci/run`
/// installs).
pub fn tools_installed(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            !std::process::Command::new(t)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    skip(
        test,
        &format!("{} (util-linux) not installed", missing.join("/")),
    );
    false
}

/// True if this machine has the 2 CPUs a client/server test needs; otherwise [`skip`]s.
pub fn two_cpus(test: &str) -> bool {
    if lfrt::os::available_cpus().len() >= 2 {
        return true;
    }
    skip(test, "needs 2 CPUs (server and client)");
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

/// A runtime of `lanes` (no bands), built but not started: the one way the tests build a
/// runtime from lanes alone.
pub fn runtime(rt: lfrt::RtMode, lock_memory: bool, lanes: Vec<lfrt::LaneConfig>) -> lfrt::Runtime {
    lfrt::Runtime::new(lfrt::RuntimeConfig {
        trace: Default::default(),
        rt,
        lock_memory,
        lanes,
        bands: Vec::new(),
    })
    .unwrap()
}

/// A runtime with one best-effort lane `"lane"` (priority 10, 2 KiB buffers) of `threads`
/// threads, built but not started.
pub fn lane(threads: usize) -> lfrt::Runtime {
    let mut g = lfrt::LaneConfig::new("lane", lfrt::Policy::Fifo, 10);
    g.threads = threads;
    g.buffer_bytes = 2048;
    runtime(lfrt::RtMode::BestEffort, false, vec![g])
}

/// Runs the example `name` (cargo builds the examples next to the test binaries:
/// target/<profile>/examples/) with `args`; it must succeed. Returns its standard output.
pub fn run_example(name: &str, args: &[&str]) -> String {
    let exe = std::env::current_exe().unwrap();
    let example = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples")
        .join(name);
    assert!(example.exists(), "{} not built", example.display());
    let out = std::process::Command::new(&example)
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}
