//! Scheduling policy, priority, CPU affinity and RT privilege checks.

use std::io;

/// A kernel scheduling policy as lfrt uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sched {
    Fifo(u8),
    Rr(u8),
    Other,
}

impl Sched {
    fn raw(self) -> (libc::c_int, libc::c_int) {
        match self {
            Sched::Fifo(p) => (libc::SCHED_FIFO, p as libc::c_int),
            Sched::Rr(p) => (libc::SCHED_RR, p as libc::c_int),
            Sched::Other => (libc::SCHED_OTHER, 0),
        }
    }
}

/// Sets the calling thread's policy and priority through `thread-priority`
/// (always with an explicit policy: without one the crate only changes `nice`).
pub(crate) fn set_current(s: Sched) -> io::Result<()> {
    use thread_priority::*;
    let (policy, prio) = match s {
        Sched::Fifo(p) => (
            ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo),
            p,
        ),
        Sched::Rr(p) => (
            ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::RoundRobin),
            p,
        ),
        Sched::Other => (
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other),
            0,
        ),
    };
    let prio = ThreadPriority::Crossplatform(prio.try_into().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("priority {prio} out of range"),
        )
    })?);
    set_thread_priority_and_policy(thread_native_id(), prio, policy).map_err(|e| match e {
        Error::OS(code) => io::Error::from_raw_os_error(code),
        other => io::Error::other(format!("{other:?}")),
    })
}

/// Sets the policy of another thread by kernel tid (used by the overrun watchdog).
pub(crate) fn set_tid(tid: i32, s: Sched) -> io::Result<()> {
    let (policy, prio) = s.raw();
    let param = libc::sched_param {
        sched_priority: prio,
    };
    syscall!(sched_setscheduler(tid, policy, &param)).map(drop)
}

/// Reads back `(policy, static rt priority)` of a thread from the kernel.
pub fn read_back(tid: i32) -> io::Result<(i32, i32)> {
    let policy = syscall!(sched_getscheduler(tid))?;
    let mut param = libc::sched_param { sched_priority: 0 };
    syscall!(sched_getparam(tid, &mut param))?;
    Ok((policy & !libc::SCHED_RESET_ON_FORK, param.sched_priority))
}

/// The *effective* priority of a thread as the kernel schedules it, including priority
/// inheritance boosts: `/proc/self/task/<tid>/stat` field 18 (`prio`), which is
/// `-1 - rt_priority` for RT threads. Returns the RT priority (0 for SCHED_OTHER).
pub fn effective_rt_priority(tid: i32) -> io::Result<i32> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))?;
    // The command name (field 2) may contain spaces; fields after the closing paren are clean.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let prio: i32 = rest
        .split_whitespace()
        .nth(15) // field 18 overall: state is field 3 = index 0 here
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other("malformed /proc stat"))?;
    Ok(if prio < 0 { -1 - prio } else { 0 })
}

/// Minor page faults of a thread so far (`/proc/self/task/<tid>/stat` field 10).
pub fn minor_faults(tid: i32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))?;
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    rest.split_whitespace()
        .nth(7)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other("malformed /proc stat"))
}

/// Pins the calling thread to `cpus` (a mask of several CPUs is allowed).
pub(crate) fn set_current_affinity(cpus: &[usize]) -> io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        set.set(c).map_err(io::Error::from)?;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(io::Error::from)
}

/// CPUs a thread may run on, read back from the kernel.
pub fn affinity(tid: i32) -> io::Result<Vec<usize>> {
    let set =
        nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(tid)).map_err(io::Error::from)?;
    Ok((0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// CPUs the calling thread may run on now (its affinity mask).
pub fn available_cpus() -> Vec<usize> {
    affinity(0).unwrap_or_default()
}

/// CPUs that exist and are online (`/sys/devices/system/cpu/online`, e.g. `0-3,6`), whatever
/// the calling thread's own affinity. Falls back to [`available_cpus`].
pub fn online_cpus() -> Vec<usize> {
    let parse = |s: &str| -> Option<Vec<usize>> {
        let mut v = Vec::new();
        for part in s.trim().split(',').filter(|p| !p.is_empty()) {
            match part.split_once('-') {
                Some((a, b)) => v.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
                None => v.push(part.parse().ok()?),
            }
        }
        Some(v)
    };
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse(&s))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(available_cpus)
}

/// What the kernel will check before granting an RT policy.
#[derive(Debug, Clone, Copy)]
pub struct RtPrivilege {
    /// `CAP_SYS_NICE` is in the effective capability set.
    pub cap_sys_nice: bool,
    /// Soft `RLIMIT_RTPRIO`: RT priorities up to this are allowed without the capability.
    pub rlimit_rtprio: u64,
}

impl RtPrivilege {
    /// Reads the calling process's capability set and rlimit.
    pub fn probe() -> RtPrivilege {
        let cap_sys_nice = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("CapEff:"))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            })
            .map(|caps| caps & (1 << 23) != 0) // CAP_SYS_NICE = 23
            .unwrap_or(false);
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let rlimit_rtprio = match syscall!(getrlimit(libc::RLIMIT_RTPRIO, &mut rl)) {
            Ok(_) => rl.rlim_cur,
            Err(_) => 0,
        };
        RtPrivilege {
            cap_sys_nice,
            rlimit_rtprio,
        }
    }

    /// Whether an RT policy at `priority` will be granted.
    pub fn allows(&self, priority: u8) -> bool {
        self.cap_sys_nice || u64::from(priority) <= self.rlimit_rtprio
    }
}

/// `sched_getcpu()`: the CPU the caller runs on now.
pub fn current_cpu() -> i32 {
    // SAFETY: sched_getcpu takes no arguments and has no preconditions.
    unsafe { libc::sched_getcpu() }
}
