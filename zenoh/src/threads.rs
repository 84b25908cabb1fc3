//! Zenoh's own threads: what runs them, and at which policy.

use std::fs;

/// One live thread of Zenoh's runtimes in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZenohThread {
    /// Its name (`rx-0`, `tx-0`, `app-0`, `acc-0`, `net-0`, …).
    pub name: String,
    /// Its kernel id.
    pub tid: i32,
    /// Its scheduling policy (`other`, `fifo`, `rr`, …) and priority.
    pub policy: String,
}

fn policy_of(tid: i32) -> String {
    // SAFETY: plain system calls on a thread id; they read, and fail with ESRCH if it is gone.
    let policy = unsafe { libc::sched_getscheduler(tid) };
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: as above; `param` is a valid out-pointer.
    let _ = unsafe { libc::sched_getparam(tid, &mut param) };
    let name = match policy & !libc::SCHED_RESET_ON_FORK {
        libc::SCHED_OTHER => "other",
        libc::SCHED_FIFO => "fifo",
        libc::SCHED_RR => "rr",
        libc::SCHED_BATCH => "batch",
        libc::SCHED_IDLE => "idle",
        6 => "deadline",
        _ => "unknown",
    };
    format!("{name} {}", param.sched_priority)
}

/// The live threads of Zenoh's runtimes in this process (by their names, `rx-N`, `tx-N`,
/// `app-N`, `acc-N`, `net-N`), with their policy: each runtime's worker threads
/// ([`Threads`](crate::Threads)), plus the blocking-task threads it started on demand (named
/// alike, at most `max_blocking` per runtime, ended after 10 s idle). They run at `SCHED_OTHER` unless the thread
/// that first used Zenoh ran at a real-time policy (they inherit it): open a
/// [`Bridge`](crate::Bridge) from a normal thread.
///
/// # Examples
/// ```
/// // In a process without Zenoh sessions there are none.
/// assert!(lfrt_zenoh::zenoh_threads().is_empty());
/// ```
pub fn zenoh_threads() -> Vec<ZenohThread> {
    let mut out = Vec::new();
    let Ok(dir) = fs::read_dir("/proc/self/task") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(comm) = fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        let name = comm.trim();
        let zenoh = name.split_once('-').is_some_and(|(rt, n)| {
            ["rx", "tx", "app", "acc", "net"].contains(&rt) && n.parse::<u32>().is_ok()
        });
        if zenoh {
            out.push(ZenohThread {
                name: name.to_owned(),
                tid,
                policy: policy_of(tid),
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
