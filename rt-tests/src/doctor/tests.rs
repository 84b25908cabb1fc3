//! The rules on fabricated machines: a tuned one, one without privilege, refused or flattened
//! real time, locked memory against its limit, CPUs out of reach, tuning problems, and the
//! `/proc` formats the facts are read from.

use super::diagnose::diagnose;
use super::host::dynamic_mode;
use super::machine::{
    cpulist, limit, needs, preempt_of_kconfig, status_kib, DmaLatency, Machine,
    NO_LATENCY_CONSTRAINT, STD_THREAD_STACK, UNLIMITED,
};
use super::needs::LockEstimate;
use super::report::{Finding, Report, Status, Verdict};
use lfrt::os::{RtPrivilege, Sched};
use lfrt::{LaneConfig, Policy, RtMode, RuntimeConfig};
use std::path::Path;

/// A machine as good as it gets: PREEMPT_RT, root, isolated CPUs, performance governor.
fn machine() -> Machine {
    Machine {
        release: "6.12.0-rt".into(),
        version: "#1 SMP PREEMPT_RT".into(),
        realtime: true,
        preempt_debugfs: None,
        cmdline: String::new(),
        preempt_kconfig: None,
        privilege: RtPrivilege {
            cap_sys_nice: true,
            rlimit_rtprio: 0,
        },
        rtprio_hard: 0,
        cap_ipc_lock: true,
        memlock: (8 << 20, 8 << 20),
        rt_runtime_us: Some(950_000),
        rt_period_us: Some(1_000_000),
        timerslack_ns: Some(50_000),
        online: vec![0, 1, 2, 3],
        affinity: vec![0, 1, 2, 3],
        cpuset: Some(vec![0, 1, 2, 3]),
        isolated: vec![2, 3],
        nohz_full: Some(vec![2, 3]),
        governors: (0..4).map(|c| (c, Some("performance".into()))).collect(),
        smt: Some((false, "smt/control = off".into())),
        cpuidle_driver: None,
        idle_states: Vec::new(),
        dma_latency: DmaLatency::Writable(Some(NO_LATENCY_CONSTRAINT)),
        irqbalance: None,
        vm_size: 7 << 20,
        histogram_bytes: 200 << 10,
        helper_stack: STD_THREAD_STACK,
        exe: "/usr/bin/lfrt".into(),
        rt_cgroup: Some(("/".into(), 950_000)),
        probes: vec![(Sched::Fifo(1), Ok(()))],
    }
}

/// Without privilege: no capability, RLIMIT_RTPRIO 0, every probe refused.
fn unprivileged(mut m: Machine, cfg: Option<&RuntimeConfig>) -> Machine {
    m.privilege = RtPrivilege {
        cap_sys_nice: false,
        rlimit_rtprio: 0,
    };
    m.cap_ipc_lock = false;
    m.probes = needs(cfg)
        .into_iter()
        .map(|s| (s, Err("Operation not permitted (os error 1)".to_string())))
        .collect();
    m
}

fn config(rt: RtMode) -> RuntimeConfig {
    let mut c = RuntimeConfig {
        rt,
        ..RuntimeConfig::default()
    };
    c.lanes.push(LaneConfig::new("control", Policy::Fifo, 80));
    c.lanes.push(LaneConfig::new("bulk", Policy::Fifo, 20));
    c
}

fn find<'a>(r: &'a Report, topic: &str) -> &'a Finding {
    r.findings.iter().find(|f| f.topic == topic).unwrap()
}

/// Every finding that is not `ok` carries a fix, except the verdict.
fn every_problem_has_a_fix(r: &Report) {
    for f in &r.findings {
        if f.status != Status::Ok && f.topic != "verdict" {
            assert!(f.fix.is_some(), "{} has no fix: {r}", f.topic);
        }
    }
    assert_eq!(r.findings.last().unwrap().topic, "verdict");
}

#[test]
fn a_tuned_machine_is_ready_without_warnings() {
    let r = diagnose(&machine(), None);
    assert!(r.ready(), "{r}");
    assert!(r.findings.iter().all(|f| f.status == Status::Ok), "{r}");
}

#[test]
fn no_privilege_fails_the_default_need_naming_both_grants() {
    let m = unprivileged(machine(), None);
    let r = diagnose(&m, None);
    assert!(!r.ready());
    let f = find(&r, "rt");
    assert_eq!(f.status, Status::Fail);
    let fix = f.fix.as_deref().unwrap();
    assert!(
        fix.contains("CAP_SYS_NICE") && fix.contains("RLIMIT_RTPRIO"),
        "{fix}"
    );
    assert_eq!(find(&r, "sys_nice").status, Status::Warn);
    assert_eq!(find(&r, "rtprio").status, Status::Warn);
    every_problem_has_a_fix(&r);
}

#[test]
fn rtprio_alone_covers_the_needed_priorities() {
    let c = config(RtMode::Required);
    let mut m = unprivileged(machine(), Some(&c));
    m.privilege.rlimit_rtprio = 80;
    m.probes = needs(Some(&c)).into_iter().map(|s| (s, Ok(()))).collect();
    let r = diagnose(&m, Some((Path::new("c.toml"), &c)));
    assert!(r.ready(), "{r}");
    assert_eq!(find(&r, "sys_nice").status, Status::Ok);
    assert_eq!(find(&r, "rtprio").status, Status::Ok);
    m.privilege.rlimit_rtprio = 79;
    let r = diagnose(&m, Some((Path::new("c.toml"), &c)));
    assert_eq!(find(&r, "rtprio").status, Status::Warn, "{r}");
}

#[test]
fn refused_rt_fails_when_required_and_flattens_lanes_when_best_effort() {
    for (mode, status) in [
        (RtMode::Required, Status::Fail),
        (RtMode::BestEffort, Status::Warn),
    ] {
        let c = config(mode);
        let m = unprivileged(machine(), Some(&c));
        let r = diagnose(&m, Some((Path::new("c.toml"), &c)));
        let f = find(&r, "rt");
        assert_eq!(f.status, status, "{r}");
        // Issue #20 defect 7: flattened lanes are not "as intended".
        let verdict = match mode {
            RtMode::Required => Verdict::CannotRun,
            RtMode::BestEffort => Verdict::Flattened,
        };
        assert_eq!(r.verdict(), verdict, "{r}");
        assert!(!r.ready());
        let v = find(&r, "verdict");
        assert_eq!(v.status, status, "{r}");
        assert!(!v.text.contains("can run as intended"), "{r}");
        assert!(f.text.contains("control") && f.text.contains("bulk"), "{r}");
        let fix = f.fix.as_deref().unwrap();
        assert!(
            fix.contains("CAP_SYS_NICE") && fix.contains("RLIMIT_RTPRIO to at least 80"),
            "{fix}"
        );
        every_problem_has_a_fix(&r);
    }
}

#[test]
fn time_shared_lanes_need_no_privilege() {
    let mut c = config(RtMode::Required);
    for g in &mut c.lanes {
        g.policy = Policy::Other;
        g.priority = 0;
    }
    let m = unprivileged(machine(), Some(&c));
    assert!(m.probes.is_empty());
    let r = diagnose(&m, Some((Path::new("c.toml"), &c)));
    assert!(r.ready(), "{r}");
    for topic in ["sys_nice", "rtprio", "rt"] {
        assert_eq!(find(&r, topic).status, Status::Ok, "{topic}: {r}");
    }
}

#[test]
fn refusal_despite_the_capability_names_the_cgroup() {
    let c = config(RtMode::Required);
    let mut m = machine();
    m.rt_cgroup = Some(("/user.slice".into(), 0));
    m.probes = needs(Some(&c))
        .into_iter()
        .map(|s| (s, Err("Operation not permitted (os error 1)".to_string())))
        .collect();
    let r = diagnose(&m, Some((Path::new("c.toml"), &c)));
    let fix = find(&r, "rt").fix.clone().unwrap();
    assert!(
        fix.contains("/user.slice") && fix.contains("cpu.rt_runtime_us"),
        "{fix}"
    );
}

#[test]
fn lock_memory_against_rlimit_memlock() {
    let mut c = config(RtMode::Required);
    c.lock_memory = true;
    let mut m = unprivileged(machine(), Some(&c));
    m.probes = needs(Some(&c)).into_iter().map(|s| (s, Ok(()))).collect();
    let e = LockEstimate::new(&m, &c);
    // 2 lanes × 2 threads × (256 KiB + 18 × 64 KiB).
    assert_eq!(e.pool, 4 * (256 << 10) + 4 * 18 * (64 << 10));
    m.memlock = (UNLIMITED, UNLIMITED);
    let r = diagnose(&m, Some((Path::new("c.toml"), &c)));
    assert_eq!(find(&r, "lock_memory").status, Status::Ok, "{r}");
    m.memlock = (64 << 10, 64 << 10);
    let r = diagnose(&m, Some((Path::new("c.toml"), &c)));
    let f = find(&r, "lock_memory");
    assert_eq!(f.status, Status::Fail, "{r}");
    assert!(f.fix.as_deref().unwrap().contains("RLIMIT_MEMLOCK"));
    assert_eq!(find(&r, "memlock").status, Status::Warn);
    // Best effort: below the part before mlockall, the lock is only lost...
    c.rt = RtMode::BestEffort;
    let r = diagnose(&m, Some((Path::new("c.toml"), &c)));
    assert_eq!(find(&r, "lock_memory").status, Status::Warn, "{r}");
    // ... between the two parts, the pool's own allocations fail.
    m.memlock = (e.before + 1, UNLIMITED);
    let r = diagnose(&m, Some((Path::new("c.toml"), &c)));
    assert_eq!(find(&r, "lock_memory").status, Status::Fail, "{r}");
    every_problem_has_a_fix(&r);
    m.cap_ipc_lock = true;
    assert!(diagnose(&m, Some((Path::new("c.toml"), &c))).ready());
}

#[test]
fn cpus_offline_outside_the_cpuset_or_the_affinity() {
    let mut c = config(RtMode::Required);
    c.lanes[0].cpus = Some(vec![3]);
    let mut m = machine();
    m.probes = needs(Some(&c)).into_iter().map(|s| (s, Ok(()))).collect();
    let at = Some((Path::new("c.toml"), &c));
    assert_eq!(find(&diagnose(&m, at), "cpus").status, Status::Ok);
    m.affinity = vec![0, 1];
    let r = diagnose(&m, at);
    let f = find(&r, "cpus");
    assert_eq!(f.status, Status::Warn, "{r}");
    assert!(f.text.contains("CPU 3"), "{r}");
    m.cpuset = Some(vec![0, 1]);
    let f = find(&diagnose(&m, at), "cpus").clone();
    assert_eq!(f.status, Status::Fail);
    m.online = vec![0, 1];
    let r = diagnose(&m, at);
    assert!(
        find(&r, "cpus").text.contains("CPU 3 does not exist"),
        "{r}"
    );
    assert!(!r.ready());
}

#[test]
fn tuning_problems_warn_with_a_fix() {
    let mut m = machine();
    m.realtime = false;
    m.version = "#1 SMP PREEMPT_DYNAMIC".into();
    m.preempt_kconfig = Some(("none", "/proc/config.gz".into()));
    m.governors[1].1 = Some("powersave".into());
    m.smt = Some((true, "smt/control = on".into()));
    m.cpuidle_driver = Some("intel_idle".into());
    m.idle_states = vec![("POLL".into(), 0, false), ("C6".into(), 133, false)];
    m.irqbalance = Some(42);
    m.rt_runtime_us = Some(-1);
    let r = diagnose(&m, None);
    for topic in [
        "preempt",
        "governor",
        "smt",
        "cpuidle",
        "irqbalance",
        "rt_throttle",
    ] {
        assert_eq!(find(&r, topic).status, Status::Warn, "{topic}: {r}");
    }
    assert!(r.ready(), "warnings alone do not fail: {r}");
    every_problem_has_a_fix(&r);
    // A process holding /dev/cpu_dma_latency low keeps CPUs out of C6.
    m.dma_latency = DmaLatency::Writable(Some(0));
    assert_eq!(find(&diagnose(&m, None), "cpuidle").status, Status::Ok);
}

#[test]
fn dynamic_preemption_mode_sources_in_order() {
    let mut m = machine();
    m.realtime = false;
    m.version = "#1 SMP PREEMPT_DYNAMIC".into();
    m.preempt_kconfig = Some(("none", "/proc/config.gz".into()));
    assert_eq!(dynamic_mode(&m).unwrap().0, "none");
    m.cmdline = "quiet preempt=full".into();
    assert_eq!(dynamic_mode(&m).unwrap().0, "full");
    m.preempt_debugfs = Some("none (voluntary) full lazy".into());
    assert_eq!(dynamic_mode(&m).unwrap().0, "voluntary");
    assert_eq!(find(&diagnose(&m, None), "preempt").status, Status::Warn);
    assert_eq!(
        preempt_of_kconfig(
            "# CONFIG_PREEMPT is not set\nCONFIG_PREEMPT_NONE=y\nCONFIG_PREEMPT_DYNAMIC=y\n"
        ),
        Some("none")
    );
    assert_eq!(
        preempt_of_kconfig("CONFIG_PREEMPT=y\nCONFIG_PREEMPT_RT=y\n"),
        Some("rt")
    );
}

#[test]
fn proc_formats() {
    assert_eq!(cpulist(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                  Max locked memory         8388608              unlimited            bytes     \n\
                  Max realtime priority     0                    0                    \n";
    assert_eq!(
        limit(limits, "Max locked memory"),
        Some((8 << 20, UNLIMITED))
    );
    assert_eq!(limit(limits, "Max realtime priority"), Some((0, 0)));
    assert_eq!(
        status_kib("Name:\tlfrt\nVmSize:\t   12392 kB\n", "VmSize:"),
        Some(12392)
    );
}
