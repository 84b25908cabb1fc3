//! Zenoh's own threads: what runs them, at which policy, and putting the receive workers at
//! `SCHED_FIFO` (`[threads] rx_priority`).
//!
//! Zenoh's runtimes are tokio runtimes that start their worker threads when first used, and
//! tokio's threads inherit the policy of the thread that starts them. So the receive runtime is
//! started from a helper thread that runs at the wanted `SCHED_FIFO` priority for that moment
//! ([`raise_rx`]): its workers, and the blocking-task threads they start later, are born at
//! that priority. Threads that were already running (a runtime another session started first)
//! are set one by one, and the bridge's watcher thread rescans every 100 ms for any `rx-N`
//! thread that is not at the priority yet.

use crate::Error;
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
    zenoh_threads_of(std::process::id())
}

/// The live Zenoh threads of process `pid`, as [`zenoh_threads`] (`lfrt-zenoh doctor CONFIG
/// --pid PID` reports them for a running service).
pub fn zenoh_threads_of(pid: u32) -> Vec<ZenohThread> {
    let mut out = Vec::new();
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
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

/// Sets `tid` to `SCHED_FIFO` `priority`.
fn set_fifo(tid: i32, priority: u8) -> std::io::Result<()> {
    let param = libc::sched_param {
        sched_priority: i32::from(priority),
    };
    // SAFETY: a plain system call on a thread id with a valid parameter; it fails with ESRCH if
    // the thread is gone, EPERM without the privilege.
    if unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO, &param) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn privilege_error(priority: u8, e: std::io::Error) -> Error {
    Error::Privilege {
        what: format!("Zenoh's receive workers at SCHED_FIFO {priority} ([threads] rx_priority)"),
        detail: if e.raw_os_error() == Some(libc::EPERM) {
            format!("the process lacks CAP_SYS_NICE and RLIMIT_RTPRIO is below {priority}")
        } else {
            e.to_string()
        },
    }
}

/// Starts Zenoh's receive runtime from a thread at `SCHED_FIFO` `priority` (its workers inherit
/// it), then sets every `rx-N` thread that is not at that policy yet. Returns how many threads
/// it set one by one.
///
/// # Errors
/// [`Error::Privilege`] naming the capability and rlimit if the kernel refuses the policy.
pub(crate) fn raise_rx(priority: u8) -> Result<usize, Error> {
    let starter = std::thread::Builder::new()
        .name("lfrt-zenoh-rx0".into())
        .spawn(move || -> std::io::Result<()> {
            set_fifo(0, priority)?;
            // The first use builds the runtime, and its workers, on this thread.
            drop(zenoh_runtime::ZRuntime::RX.spawn(async {}));
            Ok(())
        })
        .map_err(Error::Io)?;
    starter
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the helper thread panicked")))
        .map_err(|e| privilege_error(priority, e))?;
    rescan_rx(priority)
}

/// Sets every live `rx-N` thread of this process that is not at `SCHED_FIFO` `priority`.
/// Returns how many it set.
///
/// # Errors
/// [`Error::Privilege`] if the kernel refuses.
pub(crate) fn rescan_rx(priority: u8) -> Result<usize, Error> {
    let want = format!("fifo {priority}");
    let mut set = 0;
    for t in zenoh_threads() {
        if t.name.starts_with("rx-") && t.policy != want {
            match set_fifo(t.tid, priority) {
                Ok(()) => set += 1,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(privilege_error(priority, e)),
            }
        }
    }
    Ok(set)
}
