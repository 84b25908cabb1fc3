//! The checks of the machine alone, whatever the configuration: the kernel and its preemption
//! mode, real-time and memory-locking privileges, the RT throttle, timer slack, isolated and
//! tickless CPUs, frequency governors, SMT, idle states and irqbalance.

use super::machine::{cpulist, setcap, size, DmaLatency, Machine, NO_LATENCY_CONSTRAINT};
use super::needs::LockEstimate;
use super::report::{not_ok, ok, Finding, Status};

/// An idle state that takes longer than this to leave adds visibly to a wake-up (µs).
const SHALLOW_IDLE_US: u64 = 10;

/// The kernel's preemption model as its version string (`uname -v`) names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    /// `PREEMPT_RT` (or `/sys/kernel/realtime` = 1).
    Rt,
    /// `PREEMPT_DYNAMIC`: the mode is chosen at boot (`preempt=`) or in debugfs.
    Dynamic,
    /// Built with full (`PREEMPT`) or lazy (`PREEMPT_LAZY`) preemption.
    Preemptible,
    /// None of those: `PREEMPT_NONE` or `PREEMPT_VOLUNTARY`.
    NotPreemptible,
}

pub(crate) fn kernel(m: &Machine) -> Finding {
    let what = match kernel_model(m) {
        Kernel::Rt => "PREEMPT_RT: scheduling latency bounded by design",
        Kernel::Dynamic => "not PREEMPT_RT; the preemption mode is chosen at boot (see preempt)",
        Kernel::Preemptible => "not PREEMPT_RT; preemptible (see preempt)",
        Kernel::NotPreemptible => "not PREEMPT_RT; built without full preemption (see preempt)",
    };
    ok("kernel", format!("{} ({}): {what}", m.release, m.version))
}

fn kernel_model(m: &Machine) -> Kernel {
    let has = |t: &str| m.version.split_whitespace().any(|w| w == t);
    if m.realtime || has("PREEMPT_RT") {
        Kernel::Rt
    } else if has("PREEMPT_DYNAMIC") {
        Kernel::Dynamic
    } else if has("PREEMPT") || has("PREEMPT_LAZY") {
        Kernel::Preemptible
    } else {
        Kernel::NotPreemptible
    }
}

/// The dynamic preemption mode and where it was read.
pub(crate) fn dynamic_mode(m: &Machine) -> Option<(String, String)> {
    if let Some(s) = &m.preempt_debugfs {
        let mode = s
            .split_whitespace()
            .find_map(|w| w.strip_prefix('(')?.strip_suffix(')'))?;
        return Some((mode.into(), "/sys/kernel/debug/sched/preempt".into()));
    }
    if let Some(mode) = m
        .cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix("preempt="))
    {
        return Some((mode.into(), "preempt= on the kernel command line".into()));
    }
    let (mode, source) = m.preempt_kconfig.as_ref()?;
    Some((
        mode.to_string(),
        format!("the boot default in {source}; no preempt= on the command line, /sys/kernel/debug/sched/preempt unreadable"),
    ))
}

pub(crate) fn preempt(m: &Machine) -> Finding {
    const WAITS: &str = "a woken SCHED_FIFO thread waits until the running kernel code reaches a preemption point (milliseconds in the worst case)";
    match kernel_model(m) {
        Kernel::Rt => ok("preempt", "full (PREEMPT_RT)"),
        Kernel::Preemptible => ok("preempt", "preemptible (built in: PREEMPT)"),
        Kernel::NotPreemptible => not_ok(
            Status::Warn,
            "preempt",
            format!("none or voluntary (built in): {WAITS}"),
            "install a kernel built with PREEMPT_DYNAMIC (then boot with preempt=full), PREEMPT or PREEMPT_RT",
        ),
        Kernel::Dynamic => match dynamic_mode(m) {
            Some((mode, source)) if mode == "full" || mode == "lazy" => ok(
                "preempt",
                format!("dynamic preemption mode \"{mode}\" ({source}): a woken SCHED_FIFO thread preempts kernel code at once"),
            ),
            Some((mode, source)) => not_ok(
                Status::Warn,
                "preempt",
                format!("dynamic preemption mode \"{mode}\" ({source}): {WAITS}"),
                "boot with preempt=full on the kernel command line (or, with debugfs mounted: echo full > /sys/kernel/debug/sched/preempt)",
            ),
            None => not_ok(
                Status::Warn,
                "preempt",
                "dynamic preemption mode unknown: /sys/kernel/debug/sched/preempt unreadable, no preempt= on the command line, no kernel config found",
                "boot with preempt=full to be sure (or mount debugfs to read the mode: mount -t debugfs none /sys/kernel/debug)",
            ),
        },
    }
}

/// `need`: the highest real-time priority wanted (0: none).
pub(crate) fn rt_privilege(m: &Machine, need: u8) -> [Finding; 2] {
    let p = &m.privilege;
    let covered = p.rlimit_rtprio >= u64::from(need);
    let nice = if p.cap_sys_nice {
        ok(
            "sys_nice",
            "CAP_SYS_NICE in the effective set: SCHED_FIFO/RR at any priority",
        )
    } else if need == 0 {
        ok(
            "sys_nice",
            "CAP_SYS_NICE not in the effective set; not needed: no lane asks for SCHED_FIFO/RR",
        )
    } else if covered {
        ok(
            "sys_nice",
            format!(
                "CAP_SYS_NICE not in the effective set; not needed: RLIMIT_RTPRIO {} covers priority {need}",
                p.rlimit_rtprio
            ),
        )
    } else {
        not_ok(
            Status::Warn,
            "sys_nice",
            "CAP_SYS_NICE not in the effective set",
            format!(
                "{} (or AmbientCapabilities=CAP_SYS_NICE in a systemd unit)",
                setcap(m, "cap_sys_nice")
            ),
        )
    };
    let rtprio = if p.cap_sys_nice {
        ok(
            "rtprio",
            format!(
                "RLIMIT_RTPRIO {} (not needed with CAP_SYS_NICE)",
                p.rlimit_rtprio
            ),
        )
    } else if need == 0 {
        ok(
            "rtprio",
            format!(
                "RLIMIT_RTPRIO {} (not needed: no lane asks for SCHED_FIFO/RR)",
                p.rlimit_rtprio
            ),
        )
    } else if covered {
        ok(
            "rtprio",
            format!(
                "RLIMIT_RTPRIO {0}: SCHED_FIFO/RR up to priority {0} without CAP_SYS_NICE",
                p.rlimit_rtprio
            ),
        )
    } else {
        let now = if m.rtprio_hard >= u64::from(need) {
            format!(
                " (the hard limit {} allows `ulimit -r {need}` now)",
                m.rtprio_hard
            )
        } else {
            String::new()
        };
        not_ok(
            Status::Warn,
            "rtprio",
            format!(
                "RLIMIT_RTPRIO {}: without CAP_SYS_NICE no SCHED_FIFO/RR priority above it (needed: {need})",
                p.rlimit_rtprio
            ),
            format!("`<user> - rtprio {need}` in /etc/security/limits.conf and log in again, or LimitRTPRIO={need} in a systemd unit{now}"),
        )
    };
    [nice, rtprio]
}

pub(crate) fn lock_privilege(m: &Machine, lock: Option<&LockEstimate>) -> [Finding; 2] {
    let (soft, hard) = m.memlock;
    let need = lock.map(LockEstimate::total);
    let covered = need.is_none_or(|n| soft >= n);
    let cap = if m.cap_ipc_lock {
        ok(
            "ipc_lock",
            "CAP_IPC_LOCK in the effective set: locked memory is not limited by RLIMIT_MEMLOCK",
        )
    } else if covered {
        ok(
            "ipc_lock",
            format!(
                "CAP_IPC_LOCK not in the effective set: lock_memory = true works within RLIMIT_MEMLOCK {}",
                size(soft)
            ),
        )
    } else {
        not_ok(
            Status::Warn,
            "ipc_lock",
            "CAP_IPC_LOCK not in the effective set",
            format!(
                "{} (or AmbientCapabilities=CAP_IPC_LOCK in a systemd unit)",
                setcap(m, "cap_ipc_lock")
            ),
        )
    };
    let limit = if m.cap_ipc_lock {
        ok(
            "memlock",
            format!(
                "RLIMIT_MEMLOCK {} (not needed with CAP_IPC_LOCK)",
                size(soft)
            ),
        )
    } else if let (false, Some(n)) = (covered, need) {
        let now = if hard >= n {
            format!(
                " (the hard limit {} allows `ulimit -l {}` now)",
                size(hard),
                n.div_ceil(1024)
            )
        } else {
            String::new()
        };
        not_ok(
            Status::Warn,
            "memlock",
            format!(
                "RLIMIT_MEMLOCK {}: lock_memory = true needs about {}",
                size(soft),
                size(n)
            ),
            format!("`<user> - memlock unlimited` in /etc/security/limits.conf and log in again, or LimitMEMLOCK=infinity in a systemd unit{now}"),
        )
    } else {
        ok(
            "memlock",
            format!(
                "RLIMIT_MEMLOCK {}: the most this process may lock without CAP_IPC_LOCK",
                size(soft)
            ),
        )
    };
    [cap, limit]
}

pub(crate) fn throttle(m: &Machine) -> Finding {
    match (m.rt_runtime_us, m.rt_period_us) {
        (Some(-1), _) => not_ok(
            Status::Warn,
            "rt_throttle",
            "sched_rt_runtime_us = -1 (RT throttling off): a SCHED_FIFO thread that never blocks holds its CPU for good",
            "sysctl -w kernel.sched_rt_runtime_us=950000 (or give every real-time lane budget_us with on_overrun = \"demote\")",
        ),
        (Some(0), _) => not_ok(
            Status::Fail,
            "rt_throttle",
            "sched_rt_runtime_us = 0: SCHED_FIFO/RR threads get no CPU time at all",
            "sysctl -w kernel.sched_rt_runtime_us=950000",
        ),
        (Some(r), Some(p)) => ok(
            "rt_throttle",
            format!(
                "SCHED_FIFO/RR threads may run {r} µs of every {p} µs on a CPU ({:.0}%); past that the kernel stalls them until the period ends",
                r as f64 * 100.0 / p as f64
            ),
        ),
        _ => not_ok(
            Status::Warn,
            "rt_throttle",
            "unknown: /proc/sys/kernel/sched_rt_runtime_us or sched_rt_period_us unreadable",
            "check `sysctl kernel.sched_rt_runtime_us kernel.sched_rt_period_us`",
        ),
    }
}

pub(crate) fn timerslack(m: &Machine) -> Finding {
    ok(
        "timerslack",
        match m.timerslack_ns {
            Some(ns) => format!("{ns} ns for this process: it delays only time-shared threads' sleeps and timeouts; SCHED_FIFO/RR threads and timerfd expiries get none"),
            None => "unknown (/proc/self/timerslack_ns unreadable); SCHED_FIFO/RR threads and timerfd expiries get no slack anyway".into(),
        },
    )
}

pub(crate) fn isolcpus(m: &Machine) -> Finding {
    if m.isolated.is_empty() {
        ok("isolcpus", "none isolated: real-time threads share every CPU with other tasks (optional: isolcpus= on the command line, then cpus = [...] in the lane)")
    } else {
        ok(
            "isolcpus",
            format!(
                "CPUs {} isolated from the scheduler's balancing: pin real-time lanes there with cpus = [...]",
                cpulist(&m.isolated)
            ),
        )
    }
}

pub(crate) fn nohz_full(m: &Machine) -> Finding {
    ok(
        "nohz_full",
        match &m.nohz_full {
            None => "not available (kernel built without NO_HZ_FULL): the scheduler tick interrupts every busy CPU".to_string(),
            Some(v) if v.is_empty() => "none: the scheduler tick interrupts every busy CPU (optional: nohz_full= for CPUs running one real-time thread)".into(),
            Some(v) => format!("CPUs {}: the tick stops there while one task runs", cpulist(v)),
        },
    )
}

pub(crate) fn governor(m: &Machine) -> Finding {
    let mut by: Vec<(String, Vec<usize>)> = Vec::new();
    for (cpu, g) in &m.governors {
        let g = g.clone().unwrap_or_else(|| "none".into());
        match by.iter_mut().find(|(name, _)| *name == g) {
            Some((_, v)) => v.push(*cpu),
            None => by.push((g, vec![*cpu])),
        }
    }
    let listed = by
        .iter()
        .map(|(g, v)| format!("{g} on CPU {}", cpulist(v)))
        .collect::<Vec<_>>()
        .join(", ");
    if by.iter().all(|(g, _)| g == "none") {
        ok(
            "governor",
            "no cpufreq on any CPU: the hypervisor or firmware sets the frequency (usual in VMs)",
        )
    } else if by.iter().all(|(g, _)| g == "performance" || g == "none") {
        ok("governor", listed)
    } else {
        not_ok(
            Status::Warn,
            "governor",
            format!("{listed}: a CPU first runs a woken real-time thread at whatever frequency it idled at"),
            "cpupower frequency-set -g performance (or echo performance | sudo tee /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)",
        )
    }
}

pub(crate) fn smt(m: &Machine) -> Finding {
    match &m.smt {
        None => ok("smt", "unknown (no smt/ or topology files): assuming one thread per core"),
        Some((false, how)) => ok("smt", format!("off ({how})")),
        Some((true, how)) => not_ok(
            Status::Warn,
            "smt",
            format!("on ({how}): sibling hardware threads share a core, so load on one slows a real-time thread on the other"),
            "boot with nosmt, or echo off | sudo tee /sys/devices/system/cpu/smt/control (or keep the siblings of real-time CPUs idle)",
        ),
    }
}

pub(crate) fn cpuidle(m: &Machine) -> [Finding; 2] {
    let deepest = m
        .idle_states
        .iter()
        .filter(|(_, _, disabled)| !disabled)
        .max_by_key(|(_, latency, _)| *latency);
    let held = match m.dma_latency {
        DmaLatency::Writable(Some(v)) if v < NO_LATENCY_CONSTRAINT => Some(v),
        _ => None,
    };
    let driver = m.cpuidle_driver.as_deref().filter(|d| *d != "none");
    let idle = match (driver, deepest) {
        (None, _) => ok(
            "cpuidle",
            "no cpuidle driver: idle CPUs use the default idle (halt), no deep C-states to leave",
        ),
        (Some(d), Some((name, lat, _))) if *lat > SHALLOW_IDLE_US => match held {
            Some(v) if (v as u64) < *lat => ok(
                "cpuidle",
                format!("driver {d}; deepest state {name} exits in {lat} µs, but a process holds /dev/cpu_dma_latency at {v} µs, which keeps CPUs out of it"),
            ),
            _ => not_ok(
                Status::Warn,
                "cpuidle",
                format!("driver {d}; deepest enabled state {name} exits in {lat} µs: a wake-up on an idle CPU waits for it"),
                "hold /dev/cpu_dma_latency at 0 while the service runs (lfrt cyclic does so for its runs; lfrt run does not), or boot with processor.max_cstate=1 intel_idle.max_cstate=1",
            ),
        },
        (Some(d), Some((name, lat, _))) => ok(
            "cpuidle",
            format!("driver {d}; deepest enabled state {name} exits in {lat} µs"),
        ),
        (Some(d), None) => ok("cpuidle", format!("driver {d}; no idle states listed for CPU 0")),
    };
    let deep = driver.is_some() && deepest.is_some_and(|(_, lat, _)| *lat > SHALLOW_IDLE_US);
    let qos = match m.dma_latency {
        DmaLatency::Absent => ok(
            "dma_latency",
            "/dev/cpu_dma_latency absent (kernel without CPU latency QoS)",
        ),
        DmaLatency::NotWritable if deep => not_ok(
            Status::Warn,
            "dma_latency",
            "/dev/cpu_dma_latency not writable by this process: it cannot keep CPUs out of deep idle states",
            "run as root, or give the service's user write access to /dev/cpu_dma_latency (a udev rule)",
        ),
        DmaLatency::NotWritable => ok(
            "dma_latency",
            "/dev/cpu_dma_latency not writable by this process (no deep idle states to keep CPUs out of)",
        ),
        DmaLatency::Writable(v) => ok(
            "dma_latency",
            format!(
                "/dev/cpu_dma_latency writable; {}; lfrt cyclic holds it at 0 µs during its runs",
                match v {
                    Some(v) if v < NO_LATENCY_CONSTRAINT => format!("held at {v} µs now"),
                    Some(_) => "no constraint held now".to_string(),
                    None => "current constraint unreadable".to_string(),
                }
            ),
        ),
    };
    [idle, qos]
}

pub(crate) fn irqbalance(m: &Machine) -> Finding {
    match m.irqbalance {
        None => ok("irqbalance", "not running"),
        Some(pid) => not_ok(
            Status::Warn,
            "irqbalance",
            format!("running (pid {pid}): it moves device interrupts between CPUs, real-time ones included (it leaves isolcpus/nohz_full CPUs alone)"),
            "sudo systemctl stop irqbalance, or IRQBALANCE_BANNED_CPULIST=<real-time CPUs> in /etc/default/irqbalance",
        ),
    }
}
