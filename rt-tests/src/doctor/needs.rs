//! The checks of what the configuration asks of this machine (or, without one, the default
//! need: `SCHED_FIFO` at some priority): each lane's real-time policy as a probe thread got
//! it, its CPUs, what `lock_memory` will lock against `RLIMIT_MEMLOCK`, each lane's hand-off
//! ([`handoff`]) and its busy time under the RT throttle.

use super::machine::{cpulist, lane_sched, sched_name, setcap, size, Machine};
use super::report::{not_ok, ok, Finding, Status};
use lfrt::os::Sched;
use lfrt::{HandlerConfig, LaneConfig, RtMode, RuntimeConfig};

/// Why the kernel may refuse a real-time policy despite the privilege.
fn refusal_fix(m: &Machine, need: u8) -> String {
    if m.privilege.cap_sys_nice {
        let cgroup = match &m.rt_cgroup {
            Some((path, 0)) => format!(
                "this process's cpu cgroup {path} has cpu.rt_runtime_us = 0: give it a real-time budget (echo 950000 > /sys/fs/cgroup/cpu{path}/cpu.rt_runtime_us, after its parents) or run lfrt in the root cgroup"
            ),
            _ => "check the cgroup's real-time budget (cpu.rt_runtime_us, CONFIG_RT_LANE_SCHED) and the container's seccomp and capability policy".into(),
        };
        format!("CAP_SYS_NICE is present yet the kernel refused: {cgroup}")
    } else {
        format!(
            "grant CAP_SYS_NICE ({}) or raise RLIMIT_RTPRIO to at least {need} (now {}; `<user> - rtprio {need}` in /etc/security/limits.conf)",
            setcap(m, "cap_sys_nice"),
            m.privilege.rlimit_rtprio
        )
    }
}

fn probe_of(m: &Machine, s: Sched) -> Result<(), String> {
    m.probes
        .iter()
        .find(|(p, _)| *p == s)
        .map(|(_, r)| r.clone())
        .unwrap_or_else(|| Err("not probed".into()))
}

pub(crate) fn default_need(m: &Machine) -> Finding {
    let s = Sched::Fifo(1);
    let upto = if m.privilege.cap_sys_nice {
        99
    } else {
        m.privilege.rlimit_rtprio.min(99)
    };
    match probe_of(m, s) {
        Ok(()) => ok(
            "rt",
            format!("SCHED_FIFO granted to a probe thread (priority 1; up to {upto} allowed): lfrt lanes can run as real-time lanes"),
        ),
        Err(e) => not_ok(
            Status::Fail,
            "rt",
            format!("SCHED_FIFO refused to a probe thread at priority 1 ({e}): lfrt lanes would run time-shared"),
            refusal_fix(m, 1),
        ),
    }
}

pub(crate) fn rt_need(m: &Machine, c: &RuntimeConfig) -> Finding {
    let rt: Vec<(&LaneConfig, Sched)> = c
        .lanes
        .iter()
        .filter_map(|g| Some((g, lane_sched(g)?)))
        .collect();
    if rt.is_empty() {
        return ok("rt", "no lane asks for SCHED_FIFO/RR: nothing to grant");
    }
    let name =
        |(g, s): &(&LaneConfig, Sched)| format!("{} ({} ×{})", g.name, sched_name(*s), g.threads);
    let refused: Vec<(&(&LaneConfig, Sched), String)> = rt
        .iter()
        .filter_map(|x| probe_of(m, x.1).err().map(|e| (x, e)))
        .collect();
    if refused.is_empty() {
        return ok(
            "rt",
            format!(
                "granted to a probe thread for every lane: {}",
                rt.iter().map(name).collect::<Vec<_>>().join(", ")
            ),
        );
    }
    let list = refused
        .iter()
        .map(|(x, _)| name(x))
        .collect::<Vec<_>>()
        .join(", ");
    let error = &refused[0].1;
    let need = refused
        .iter()
        .map(|((_, s), _)| match s {
            Sched::Fifo(p) | Sched::Rr(p) => *p,
            Sched::Other => 0,
            Sched::Deadline { .. } => 99,
        })
        .max()
        .unwrap_or(1);
    let fix = refusal_fix(m, need);
    match c.rt {
        RtMode::Required => not_ok(
            Status::Fail,
            "rt",
            format!("refused for {list}: {error}; with rt = \"required\" lfrt refuses to start"),
            fix,
        ),
        RtMode::BestEffort => Finding {
            flattens: true,
            ..not_ok(
                Status::Warn,
                "rt",
                format!("refused for {list}: {error}; rt = \"best-effort\" runs them at SCHED_OTHER, so the lanes are flattened (a busy lower lane delays a higher one)"),
                fix,
            )
        },
    }
}

pub(crate) fn cpus_need(m: &Machine, c: &RuntimeConfig) -> Finding {
    let mut fails = Vec::new();
    let mut warns = Vec::new();
    let mut plan = Vec::new();
    for g in &c.lanes {
        let Some(cpus) = &g.cpus else {
            plan.push(format!("{} any of {}", g.name, cpulist(&m.affinity)));
            continue;
        };
        let isolated = if cpus.iter().all(|c| m.isolated.contains(c)) {
            " (isolated)"
        } else {
            ""
        };
        plan.push(format!("{} → {}{isolated}", g.name, cpulist(cpus)));
        for &cpu in cpus {
            if !m.online.contains(&cpu) {
                fails.push(format!(
                    "lane {}: CPU {cpu} does not exist or is offline (online: {})",
                    g.name,
                    cpulist(&m.online)
                ));
            } else if m.cpuset.as_ref().is_some_and(|set| !set.contains(&cpu)) {
                fails.push(format!(
                    "lane {}: CPU {cpu} is outside this process's cpuset (CPUs {}, a cgroup): pinning fails or loses it",
                    g.name,
                    cpulist(m.cpuset.as_deref().unwrap_or_default())
                ));
            } else if !m.affinity.contains(&cpu) {
                warns.push(format!(
                    "lane {}: CPU {cpu} is outside this process's affinity (CPUs {}; taskset?): its threads pin themselves there anyway",
                    g.name,
                    cpulist(&m.affinity)
                ));
            }
        }
    }
    if !fails.is_empty() {
        not_ok(
            Status::Fail,
            "cpus",
            fails.join("; "),
            "change the lane's cpus, bring the CPU online (echo 1 > /sys/devices/system/cpu/cpuN/online) or widen the cgroup's cpuset.cpus",
        )
    } else if !warns.is_empty() {
        not_ok(
            Status::Warn,
            "cpus",
            warns.join("; "),
            "start lfrt with those CPUs in its affinity (taskset -c <cpus> lfrt ...), or change the lane's cpus",
        )
    } else {
        ok("cpus", plan.join(", "))
    }
}

/// What `lock_memory = true` will lock (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LockEstimate {
    /// Mapped when `Runtime::start` calls `mlockall`.
    pub(crate) before: u64,
    /// Mapped by `Runtime::start` and the first samples afterwards.
    pub(crate) after: u64,
    /// Part of the total: this process's `VmSize` now.
    pub(crate) baseline: u64,
    /// Part of the total: pool threads' stacks and `Context` storage.
    pub(crate) pool: u64,
    pub(crate) threads: usize,
}

impl LockEstimate {
    pub(crate) fn new(m: &Machine, c: &RuntimeConfig) -> LockEstimate {
        let ring = (lfrt::telemetry::RING_CAPACITY * std::mem::size_of::<lfrt::telemetry::Sample>())
            as u64;
        let threads: usize = c.lanes.iter().map(|g| g.threads).sum();
        let timers: usize = c
            .lanes
            .iter()
            .flat_map(|g| &g.handlers)
            .map(|h| match h {
                HandlerConfig::Timer { count, .. } => *count,
                _ => 0,
            })
            .sum();
        let pool: u64 = c
            .lanes
            .iter()
            .map(|g| {
                g.threads as u64
                    * (g.stack_bytes as u64
                        + (2 + lfrt::DATAGRAM_BATCH as u64) * g.buffer_bytes as u64)
            })
            .sum();
        let histograms = 4 * m.histogram_bytes;
        let watchdog = if c.lanes.iter().any(|g| g.budget_us.is_some()) {
            m.helper_stack
        } else {
            0
        };
        LockEstimate {
            before: m.vm_size
                + m.helper_stack // collector thread
                + ring // collector's batch
                + threads as u64 * ring
                + c.lanes.len() as u64 * histograms,
            after: pool + watchdog + timers as u64 * histograms,
            baseline: m.vm_size,
            pool,
            threads,
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.before + self.after
    }
}

pub(crate) fn lock_need(m: &Machine, c: &RuntimeConfig, e: &LockEstimate) -> Finding {
    let soft = m.memlock.0;
    let what = format!(
        "lock_memory = true needs about {} locked: {} mapped by this binary now, {} of telemetry and helper threads, {} for {} pool threads (each stack_bytes + {} × buffer_bytes)",
        size(e.total()),
        size(e.baseline),
        size(e.total() - e.baseline - e.pool),
        size(e.pool),
        e.threads,
        2 + lfrt::DATAGRAM_BATCH
    );
    if m.cap_ipc_lock {
        return ok(
            "lock_memory",
            format!("{what}; CAP_IPC_LOCK lifts RLIMIT_MEMLOCK"),
        );
    }
    if soft >= e.total() {
        return ok(
            "lock_memory",
            format!("{what}; within RLIMIT_MEMLOCK {}", size(soft)),
        );
    }
    let fix = format!(
        "grant CAP_IPC_LOCK ({}) or raise RLIMIT_MEMLOCK above {} (`<user> - memlock unlimited` in /etc/security/limits.conf); or lower buffer_bytes, threads or stack_bytes",
        setcap(m, "cap_ipc_lock"),
        size(e.total())
    );
    let limit = size(soft);
    match c.rt {
        RtMode::Required => not_ok(
            Status::Fail,
            "lock_memory",
            format!("{what}; above RLIMIT_MEMLOCK {limit} without CAP_IPC_LOCK: with rt = \"required\" lfrt refuses to start (mlockall or a later allocation fails)"),
            fix,
        ),
        RtMode::BestEffort if soft < e.before => not_ok(
            Status::Warn,
            "lock_memory",
            format!("{what}; above RLIMIT_MEMLOCK {limit} without CAP_IPC_LOCK: mlockall fails and rt = \"best-effort\" runs with unlocked memory"),
            fix,
        ),
        RtMode::BestEffort => not_ok(
            Status::Fail,
            "lock_memory",
            format!("{what}; RLIMIT_MEMLOCK {limit} without CAP_IPC_LOCK admits mlockall ({} mapped then) but not the pool's storage after it: thread creation or allocation fails", size(e.before)),
            fix,
        ),
    }
}

/// How a lane hands its events from the thread that waits to the thread that handles them,
/// and why: one line, for `lfrt check`'s plan and `lfrt doctor CONFIG`. `None` for a bound
/// lane (its pool has its own hand-off).
pub fn handoff(g: &LaneConfig) -> Option<String> {
    if g.bound.is_some() {
        return None;
    }
    let order =
        match g.promotion {
            lfrt::Promotion::Priority => "followers by thread priority, ties LIFO",
            lfrt::Promotion::Lifo => "followers LIFO",
            lfrt::Promotion::Fifo => "followers FIFO",
            lfrt::Promotion::Concurrent => return Some(
                "concurrent: every idle thread waits in epoll_wait and the kernel wakes one per \
                 event (no leader, no follower order); a wake-up per event, the slowest mode \
                 against clients sharing the CPUs (BENCHMARKS.md §2)"
                    .into(),
            ),
        };
    Some(match g.promote_after_us {
        0 => format!(
            "a follower promoted before every event (promote_after_us = 0; {order}): a \
             wake-up per event; the default keeps the role through quick events and wakes none"
        ),
        t => format!(
            "deferred ({order}): a leader keeps its role, waking nobody, through events whose \
             handlers recently ran under {t} µs in all, promotes at once for longer or new work, \
             and is relieved by the watchdog after {t} µs; the default, which needs no choice \
             per workload"
        ),
    })
}

/// Each lane's hand-off (the default needs no choice; another mode is named with its cost).
pub(crate) fn promotion(c: &RuntimeConfig) -> Finding {
    let lines: Vec<String> = c
        .lanes
        .iter()
        .filter_map(|g| handoff(g).map(|h| format!("{}: {h}", g.name)))
        .collect();
    if lines.is_empty() {
        return ok(
            "promotion",
            "bound lanes only: their pools hand off replies",
        );
    }
    ok("promotion", lines.join("; "))
}

pub(crate) fn busy_time(m: &Machine, c: &RuntimeConfig) -> Finding {
    let rt: Vec<&LaneConfig> = c.lanes.iter().filter(|g| g.is_rt()).collect();
    if rt.is_empty() {
        return ok(
            "busy_time",
            "no real-time lane: the RT throttle does not apply",
        );
    }
    let names = rt
        .iter()
        .map(|g| g.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let budgets = rt
        .iter()
        .map(|g| match g.budget_us {
            Some(b) => format!("{} {b} µs", g.name),
            None => format!("{} none", g.name),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let unguarded: Vec<&str> = rt
        .iter()
        .filter(|g| g.budget_us.is_none() || g.on_overrun != lfrt::OnOverrun::Demote)
        .map(|g| g.name.as_str())
        .collect();
    match (m.rt_runtime_us, m.rt_period_us) {
        (Some(-1), _) if !unguarded.is_empty() => not_ok(
            Status::Warn,
            "busy_time",
            format!("RT throttling is off and {} may run a handler without end (budget_us: {budgets})", unguarded.join(", ")),
            format!("give {} budget_us with on_overrun = \"demote\", or sysctl -w kernel.sched_rt_runtime_us=950000", unguarded.join(", ")),
        ),
        (Some(r), Some(p)) if r > 0 => ok(
            "busy_time",
            format!("{names} may keep a CPU busy {r} µs of every {p} µs before the kernel stalls them for the rest (budget_us: {budgets})"),
        ),
        _ => ok("busy_time", format!("{names} run under the RT throttle above (budget_us: {budgets})")),
    }
}
