//! The facts: everything `lfrt doctor` reads from the kernel and this process, gathered once
//! into a [`Machine`] (the rules then only read it, so they can be tested on fabricated
//! machines), the policy probes that ask the kernel for real time, and how a fact is written
//! in a finding (CPU lists, sizes, policies, the `setcap` that grants a capability).

use lfrt::os::{RtPrivilege, Sched};
use lfrt::{LaneConfig, Policy, RuntimeConfig};
use std::path::Path;

/// `RLIMIT_*` value meaning "no limit" (as `RLIM_INFINITY`).
pub(crate) const UNLIMITED: u64 = u64::MAX;
/// `/dev/cpu_dma_latency` reads this when no process holds a constraint
/// (`PM_QOS_CPU_LATENCY_DEFAULT_VALUE`).
pub(crate) const NO_LATENCY_CONSTRAINT: i32 = 2_000_000_000;
/// The stack std gives a spawned thread without `stack_size` (the runtime's collector and
/// watchdog), unless `RUST_MIN_STACK` says otherwise.
pub(crate) const STD_THREAD_STACK: u64 = 2 << 20;

/// State of `/dev/cpu_dma_latency`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DmaLatency {
    Absent,
    NotWritable,
    /// Writable; the constraint in force now (µs), if it could be read.
    Writable(Option<i32>),
}

/// Everything `lfrt doctor` reads, gathered once.
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    pub(crate) release: String,
    pub(crate) version: String,
    pub(crate) realtime: bool,
    /// Contents of `/sys/kernel/debug/sched/preempt` (`none voluntary (full) lazy`).
    pub(crate) preempt_debugfs: Option<String>,
    pub(crate) cmdline: String,
    /// Preemption model the kernel was configured with, and where it was read.
    pub(crate) preempt_kconfig: Option<(&'static str, String)>,
    pub(crate) privilege: RtPrivilege,
    /// Hard `RLIMIT_RTPRIO`.
    pub(crate) rtprio_hard: u64,
    pub(crate) cap_ipc_lock: bool,
    /// Soft and hard `RLIMIT_MEMLOCK` in bytes ([`UNLIMITED`] for none).
    pub(crate) memlock: (u64, u64),
    pub(crate) rt_runtime_us: Option<i64>,
    pub(crate) rt_period_us: Option<i64>,
    pub(crate) timerslack_ns: Option<u64>,
    pub(crate) online: Vec<usize>,
    pub(crate) affinity: Vec<usize>,
    /// The CPUs of the process's cpuset cgroup, if readable.
    pub(crate) cpuset: Option<Vec<usize>>,
    pub(crate) isolated: Vec<usize>,
    /// `None`: the kernel has no `nohz_full` file (built without `NO_HZ_FULL`).
    pub(crate) nohz_full: Option<Vec<usize>>,
    /// Per online CPU, its cpufreq governor (`None`: no cpufreq for it).
    pub(crate) governors: Vec<(usize, Option<String>)>,
    /// SMT on, and how it was told (`smt/control`, or sibling lists).
    pub(crate) smt: Option<(bool, String)>,
    pub(crate) cpuidle_driver: Option<String>,
    /// CPU 0's idle states: name, exit latency (µs), disabled.
    pub(crate) idle_states: Vec<(String, u64, bool)>,
    pub(crate) dma_latency: DmaLatency,
    pub(crate) irqbalance: Option<u32>,
    /// This process's mapped size now (`VmSize`, bytes).
    pub(crate) vm_size: u64,
    /// Bytes of one telemetry latency histogram.
    pub(crate) histogram_bytes: u64,
    pub(crate) helper_stack: u64,
    pub(crate) exe: String,
    /// The process's v1 `cpu` cgroup and its `cpu.rt_runtime_us`.
    pub(crate) rt_cgroup: Option<(String, i64)>,
    /// Each policy a probe thread asked for, and the kernel's answer.
    pub(crate) probes: Vec<(Sched, Result<(), String>)>,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

impl Machine {
    pub(crate) fn read(cfg: Option<&RuntimeConfig>) -> Machine {
        // First, before this process maps anything else: the baseline of the estimate.
        let status = read("/proc/self/status").unwrap_or_default();
        let vm_size = status_kib(&status, "VmSize:").unwrap_or(0) * 1024;
        let cap_eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0);
        let limits = read("/proc/self/limits").unwrap_or_default();
        let online = lfrt::os::online_cpus();
        let cpu = |n: usize, file: &str| read(&format!("/sys/devices/system/cpu/cpu{n}/{file}"));
        let smt = match (
            read("/sys/devices/system/cpu/smt/active"),
            read("/sys/devices/system/cpu/smt/control"),
        ) {
            (Some(a), c) => Some((a == "1", format!("smt/control = {}", c.unwrap_or_default()))),
            _ => {
                let siblings: Vec<String> = online
                    .iter()
                    .filter_map(|&n| cpu(n, "topology/thread_siblings_list"))
                    .collect();
                (!siblings.is_empty()).then(|| {
                    let shared = siblings
                        .iter()
                        .any(|s| lfrt::os::parse_cpu_list(s).is_some_and(|v| v.len() > 1));
                    (shared, "thread_siblings_list".to_string())
                })
            }
        };
        let idle_states = (0..)
            .map_while(|i| {
                let name = cpu(0, &format!("cpuidle/state{i}/name"))?;
                let latency = cpu(0, &format!("cpuidle/state{i}/latency"))
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let disabled = cpu(0, &format!("cpuidle/state{i}/disable")).as_deref() == Some("1");
                Some((name, latency, disabled))
            })
            .collect();
        Machine {
            release: read("/proc/sys/kernel/osrelease").unwrap_or_default(),
            version: read("/proc/sys/kernel/version").unwrap_or_default(),
            realtime: read("/sys/kernel/realtime").as_deref() == Some("1"),
            preempt_debugfs: read("/sys/kernel/debug/sched/preempt"),
            cmdline: read("/proc/cmdline").unwrap_or_default(),
            preempt_kconfig: kconfig_preempt(),
            privilege: RtPrivilege::probe(),
            rtprio_hard: limit(&limits, "Max realtime priority").map_or(0, |l| l.1),
            cap_ipc_lock: cap_eff & (1 << 14) != 0, // CAP_IPC_LOCK = 14
            memlock: limit(&limits, "Max locked memory").unwrap_or((0, 0)),
            rt_runtime_us: read("/proc/sys/kernel/sched_rt_runtime_us")
                .and_then(|s| s.parse().ok()),
            rt_period_us: read("/proc/sys/kernel/sched_rt_period_us").and_then(|s| s.parse().ok()),
            timerslack_ns: read("/proc/self/timerslack_ns").and_then(|s| s.parse().ok()),
            affinity: lfrt::os::available_cpus(),
            cpuset: cgroup_file(
                &["cpuset"],
                &["cpuset.effective_cpus", "cpuset.cpus.effective"],
            )
            .and_then(|(_, s)| lfrt::os::parse_cpu_list(&s)),
            isolated: read("/sys/devices/system/cpu/isolated")
                .and_then(|s| lfrt::os::parse_cpu_list(&s))
                .unwrap_or_default(),
            nohz_full: read("/sys/devices/system/cpu/nohz_full")
                .map(|s| lfrt::os::parse_cpu_list(&s).unwrap_or_default()),
            governors: online
                .iter()
                .map(|&n| (n, cpu(n, "cpufreq/scaling_governor")))
                .collect(),
            online,
            smt,
            cpuidle_driver: read("/sys/devices/system/cpu/cpuidle/current_driver"),
            idle_states,
            dma_latency: dma_latency(),
            irqbalance: find_process("irqbalance"),
            vm_size,
            histogram_bytes: lfrt::telemetry::new_histogram().distinct_values() as u64 * 8,
            helper_stack: std::env::var("RUST_MIN_STACK")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(STD_THREAD_STACK),
            exe: std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "lfrt".into()),
            rt_cgroup: cgroup_file(&["cpu"], &["cpu.rt_runtime_us"])
                .and_then(|(path, s)| Some((path, s.parse().ok()?))),
            probes: needs(cfg).into_iter().map(|s| (s, probe(s))).collect(),
        }
    }
}

/// The policies to probe: each real-time lane's at its highest thread priority, or
/// `SCHED_FIFO` 1 without a configuration.
pub(crate) fn needs(cfg: Option<&RuntimeConfig>) -> Vec<Sched> {
    let Some(cfg) = cfg else {
        return vec![Sched::Fifo(1)];
    };
    let mut v: Vec<Sched> = cfg.lanes.iter().filter_map(lane_sched).collect();
    v.dedup();
    v
}

/// The policy a lane's highest-priority thread asks for (`None` for `SCHED_OTHER`).
pub(crate) fn lane_sched(g: &LaneConfig) -> Option<Sched> {
    let top = (0..g.threads)
        .map(|i| g.thread_priority(i))
        .max()
        .unwrap_or(g.priority);
    match g.policy {
        Policy::Fifo => Some(Sched::Fifo(top)),
        Policy::Rr => Some(Sched::Rr(top)),
        Policy::Other => None,
        Policy::Deadline => g.deadline.map(|d| Sched::Deadline {
            runtime_ns: d.runtime_us * 1000,
            deadline_ns: d.deadline_us * 1000,
            period_ns: d.period_us * 1000,
        }),
    }
}

/// Asks for `s` on a thread of its own that exits at once, as a pool thread would ask for it.
fn probe(s: Sched) -> Result<(), String> {
    std::thread::Builder::new()
        .name("lfrt-doctor".into())
        .spawn(move || {
            lfrt::os::set_current_sched(s).map_err(|e| e.to_string())?;
            match lfrt::os::read_back(0) {
                Ok(got) if got == s => Ok(()),
                Ok(got) => Err(format!("the kernel reports {got:?}")),
                Err(e) => Err(e.to_string()),
            }
        })
        .map_err(|e| format!("cannot spawn a probe thread: {e}"))?
        .join()
        .unwrap_or_else(|_| Err("the probe thread panicked".into()))
}

/// A `VmSize:`-style line of `/proc/self/status`, in KiB.
pub(crate) fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Soft and hard values of one `/proc/self/limits` row (`unlimited` = [`UNLIMITED`]).
pub(crate) fn limit(limits: &str, name: &str) -> Option<(u64, u64)> {
    let rest = limits.lines().find_map(|l| l.strip_prefix(name))?;
    let mut v = rest.split_whitespace().map(|s| match s {
        "unlimited" => Some(UNLIMITED),
        n => n.parse().ok(),
    });
    Some((v.next()??, v.next()??))
}

/// The kernel's configured preemption model: `/proc/config.gz` (`CONFIG_IKCONFIG_PROC`) or
/// `/boot/config-<release>`. For a `PREEMPT_DYNAMIC` kernel it is the boot default.
fn kconfig_preempt() -> Option<(&'static str, String)> {
    use std::io::Read;
    let gz = std::fs::File::open("/proc/config.gz").ok().and_then(|f| {
        let mut s = String::new();
        flate2::read::GzDecoder::new(f)
            .read_to_string(&mut s)
            .ok()?;
        Some((s, "/proc/config.gz".to_string()))
    });
    let (text, source) = gz.or_else(|| {
        let path = format!("/boot/config-{}", read("/proc/sys/kernel/osrelease")?);
        Some((std::fs::read_to_string(&path).ok()?, path))
    })?;
    Some((preempt_of_kconfig(&text)?, source))
}

/// The preemption model a kernel configuration selects.
pub(crate) fn preempt_of_kconfig(text: &str) -> Option<&'static str> {
    let set = |k: &str| text.lines().any(|l| l.strip_suffix("=y") == Some(k));
    [
        ("CONFIG_PREEMPT_RT", "rt"),
        ("CONFIG_PREEMPT_LAZY", "lazy"),
        ("CONFIG_PREEMPT", "full"),
        ("CONFIG_PREEMPT_VOLUNTARY", "voluntary"),
        ("CONFIG_PREEMPT_NONE", "none"),
    ]
    .into_iter()
    .find_map(|(k, mode)| set(k).then_some(mode))
}

/// A file of the process's cgroup for one of `controllers`: v1 (`/sys/fs/cgroup/<ctl>/<path>`)
/// or v2 (`/sys/fs/cgroup/<path>`, `/sys/fs/cgroup/unified/<path>`). Returns the cgroup path and
/// the contents of the first readable file.
fn cgroup_file(controllers: &[&str], files: &[&str]) -> Option<(String, String)> {
    let cgroups = read("/proc/self/cgroup")?;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let roots: Vec<String> = if ctls.is_empty() {
            vec!["/sys/fs/cgroup".into(), "/sys/fs/cgroup/unified".into()]
        } else if ctls.split(',').any(|c| controllers.contains(&c)) {
            vec![format!("/sys/fs/cgroup/{ctls}")]
        } else {
            continue;
        };
        for root in roots {
            for file in files {
                if let Some(s) = read(&format!("{root}{path}/{file}")) {
                    return Some((path.to_string(), s));
                }
            }
        }
    }
    None
}

/// Opens `/dev/cpu_dma_latency` read-write for a moment: the open adds a request with no
/// constraint (dropped again on close) and a read returns the constraint in force.
fn dma_latency() -> DmaLatency {
    use std::io::Read;
    let path = Path::new("/dev/cpu_dma_latency");
    if !path.exists() {
        return DmaLatency::Absent;
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(mut f) => {
            let mut b = [0u8; 4];
            DmaLatency::Writable(f.read_exact(&mut b).ok().map(|_| i32::from_ne_bytes(b)))
        }
        Err(_) => DmaLatency::NotWritable,
    }
}

/// The pid of a process whose `comm` is `name`.
fn find_process(name: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        (read(&format!("/proc/{pid}/comm"))? == name).then_some(pid)
    })
}

/// The inverse of [`lfrt::os::parse_cpu_list`] for sorted lists.
pub(crate) fn cpulist(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if j == i {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

pub(crate) fn size(bytes: u64) -> String {
    match bytes {
        UNLIMITED => "unlimited".into(),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

pub(crate) fn sched_name(s: Sched) -> String {
    match s {
        Sched::Fifo(p) => format!("SCHED_FIFO {p}"),
        Sched::Rr(p) => format!("SCHED_RR {p}"),
        Sched::Other => "SCHED_OTHER".into(),
        Sched::Deadline {
            runtime_ns,
            period_ns,
            ..
        } => format!(
            "SCHED_DEADLINE {} us every {} us",
            runtime_ns / 1000,
            period_ns / 1000
        ),
    }
}

/// `sudo setcap` granting `cap` to this binary.
pub(crate) fn setcap(m: &Machine, cap: &str) -> String {
    format!("sudo setcap {cap}+ep {}", m.exe)
}
