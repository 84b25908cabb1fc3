//! `lfrt doctor`: what this machine and this process can do for real time, and whether a
//! configuration can run here as intended.
//!
//! # Output
//! One line per finding, `STATUS TOPIC TEXT`, plain text with fixed columns (no `#`, so `awk`
//! reads it as is); under every finding that is not `ok`, an indented `fix:` line; last, a
//! `verdict` line:
//!
//! ```text
//! ok   kernel      6.18.44 (#1 SMP PREEMPT_DYNAMIC @0): preemptible, not PREEMPT_RT ...
//! warn preempt     dynamic preemption mode "none" (...): a woken SCHED_FIFO thread waits ...
//!      fix: boot with preempt=full ...
//! ok   verdict     configs/default.toml can run as intended here (warnings: preempt)
//! ```
//!
//! * `ok`: as good as it gets for real time, or not needed here;
//! * `warn`: runs, but worse than it could (latency tails, flattened lanes, unlocked memory);
//! * `fail`: the configuration, or without one the default need (`SCHED_FIFO` at some
//!   priority), cannot run as intended: `lfrt run` refuses to start or starts without what the
//!   configuration asks for.
//!
//! The exit status (`lfrt doctor`) is 0 when the configuration runs as intended, 1 with a
//! `fail`, 3 when it runs but not as intended (`rt = "best-effort"` with real time refused:
//! its lanes are flattened to time-sharing; the verdict is then a `warn` that says so), and 2
//! for bad arguments or a configuration the loader rejects (its `file:line: field` message, as
//! `lfrt check`).
//!
//! # What is read
//! [`run`] gathers every fact once into a `Machine`, then a pure function turns the facts (and
//! the configuration) into the report, so each rule is unit-tested on fabricated machines.
//!
//! | topic | source |
//! |---|---|
//! | `kernel`, `preempt` | `/sys/kernel/realtime`, `/proc/sys/kernel/{osrelease,version}` (`uname -r -v`), `/sys/kernel/debug/sched/preempt`, `preempt=` in `/proc/cmdline`, the boot default in `/proc/config.gz` or `/boot/config-<release>` |
//! | `sys_nice`, `rtprio` | [`lfrt::os::RtPrivilege::probe`], `/proc/self/limits` |
//! | `ipc_lock`, `memlock` | `CapEff` in `/proc/self/status` (bit 14), `/proc/self/limits` |
//! | `rt_throttle` | `/proc/sys/kernel/sched_rt_{runtime,period}_us` |
//! | `timerslack` | `/proc/self/timerslack_ns` |
//! | `isolcpus`, `nohz_full` | `/sys/devices/system/cpu/{isolated,nohz_full}` |
//! | `governor` | `/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor` |
//! | `smt` | `/sys/devices/system/cpu/smt/{active,control}`, else `thread_siblings_list` |
//! | `cpuidle`, `dma_latency` | `/sys/devices/system/cpu/cpuidle/current_driver`, `cpu*/cpuidle/state*/{name,latency,disable}`, `/dev/cpu_dma_latency` (opened read-write for a moment: that adds a request with no constraint and reads the current one) |
//! | `irqbalance` | `/proc/*/comm` |
//! | `rt` | a probe thread per real-time group (or one at `SCHED_FIFO` 1 without a configuration) sets the group's policy at its highest thread priority, reads it back and exits at once; `cpu.rt_runtime_us` of the process's v1 `cpu` cgroup explains a refusal despite `CAP_SYS_NICE` |
//! | `cpus` | [`lfrt::os::online_cpus`], [`lfrt::os::available_cpus`], the process's cpuset (`cpuset.effective_cpus` / `cpuset.cpus.effective`) |
//! | `lock_memory`, `busy_time` | the configuration against the facts above |
//!
//! # The `lock_memory` estimate
//! `mlockall(MCL_CURRENT | MCL_FUTURE)` without `CAP_IPC_LOCK` needs the process's whole
//! mapped size (`VmSize`, not only what is resident) within `RLIMIT_MEMLOCK` when `Runtime::start`
//! calls it, and every later mapping must fit too (`mlockall(2)`). The estimate adds up:
//!
//! * before `mlockall` (built by `Runtime::new`): this process's `VmSize` now (the same binary
//!   and libraries, before any runtime exists), the telemetry collector's thread stack (std's
//!   default, 2 MiB unless `RUST_MIN_STACK`) and sample batch, one sample ring per pool thread
//!   ([`lfrt::telemetry::RING_CAPACITY`] samples) and four latency histograms per group;
//! * after it (`Runtime::start`): per pool thread `stack_bytes` plus `(2 + DATAGRAM_BATCH) ×
//!   buffer_bytes` (buffer, scratch buffer and the datagram slots of its `Context`, i.e. 18 ×
//!   `buffer_bytes`), the watchdog's stack if a group has `budget_us`, and four histograms per
//!   timer.
//!
//! On the development machine (glibc, Linux 6.18, as root) it came within 0.5 MiB of what
//! `lfrt run` locked for 1 to 8 threads and 4 KiB to 1 MiB buffers: its `VmLck`, less the
//! 64 MiB address-space reservation of a glibc malloc arena where one was made (mostly
//! `PROT_NONE`, and left out: without `CAP_IPC_LOCK`, `MCL_FUTURE` refuses a mapping beyond the
//! limit rather than counting it). Without the privilege, a total
//! above the limit makes `rt = "required"` refuse to start (`fail`); with `"best-effort"`, a
//! limit below the part before `mlockall` only loses the lock (`warn`: `mlockall` fails and the
//! runtime runs unlocked), while a limit between the two parts is a `fail`, because `mlockall`
//! succeeds and the pool's own allocations then exceed the limit.

use lfrt::os::{RtPrivilege, Sched};
use lfrt::{GroupConfig, HandlerConfig, Policy, RtMode, RuntimeConfig};
use std::fmt;
use std::path::Path;

/// How a finding stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Status {
    Ok,
    Warn,
    Fail,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        })
    }
}

/// One line of the report, and its fix when it is not `ok`.
#[derive(Debug, Clone)]
struct Finding {
    status: Status,
    topic: &'static str,
    text: String,
    fix: Option<String>,
    /// A `warn` that means the plan does not run as configured: real-time lanes flattened to
    /// time-sharing. The verdict then says "not as intended" ([`Verdict::Flattened`]).
    flattens: bool,
}

fn ok(topic: &'static str, text: impl Into<String>) -> Finding {
    Finding {
        status: Status::Ok,
        topic,
        text: text.into(),
        fix: None,
        flattens: false,
    }
}

fn not_ok(
    status: Status,
    topic: &'static str,
    text: impl Into<String>,
    fix: impl Into<String>,
) -> Finding {
    Finding {
        status,
        topic,
        text: text.into(),
        fix: Some(fix.into()),
        flattens: false,
    }
}

/// What `lfrt doctor` found: print it with `{}`; [`verdict`](Report::verdict) gives the exit
/// status.
#[derive(Debug, Clone)]
pub struct Report {
    findings: Vec<Finding>,
}

/// The report's verdict, and `lfrt doctor`'s exit status for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The configuration (or the default need) runs as configured here: exit status 0.
    AsIntended,
    /// A `fail`: `lfrt run` refuses to start, or starts without what the configuration asks
    /// for: exit status 1.
    CannotRun,
    /// It runs, but not as intended: `rt = "best-effort"` with real time refused, so its lanes
    /// are flattened to time-sharing: exit status 3.
    Flattened,
}

impl Verdict {
    /// `lfrt doctor`'s exit status: 0, 1 or 3 (2 is a bad argument or configuration).
    pub fn exit_status(self) -> u8 {
        match self {
            Verdict::AsIntended => 0,
            Verdict::CannotRun => 1,
            Verdict::Flattened => 3,
        }
    }
}

impl Report {
    /// What the findings add up to.
    pub fn verdict(&self) -> Verdict {
        if self.findings.iter().any(|f| f.status == Status::Fail) {
            Verdict::CannotRun
        } else if self.findings.iter().any(|f| f.flattens) {
            Verdict::Flattened
        } else {
            Verdict::AsIntended
        }
    }

    /// The configuration (or the default need, `SCHED_FIFO` at some priority) can run as
    /// intended on this machine, by this process: no `fail`, and no lane flattened.
    pub fn ready(&self) -> bool {
        self.verdict() == Verdict::AsIntended
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for x in &self.findings {
            writeln!(f, "{:<4} {:<11} {}", x.status, x.topic, x.text)?;
            if let Some(fix) = &x.fix {
                writeln!(f, "     fix: {fix}")?;
            }
        }
        Ok(())
    }
}

/// Loads `config` (if any), reads the machine and returns the report.
///
/// # Errors
/// The loader's [`lfrt::Error::Config`] (file, line and field) if the configuration cannot be
/// read or is invalid; `lfrt doctor` exits 2 with it.
pub fn run(config: Option<&Path>) -> Result<Report, lfrt::Error> {
    let cfg = config
        .map(|path| crate::overrides::load(path, &[]).map(|loaded| loaded.config))
        .transpose()?;
    let machine = Machine::read(cfg.as_ref());
    Ok(diagnose(&machine, config.zip(cfg.as_ref())))
}

// ---------------------------------------------------------------------------------------------
// Facts
// ---------------------------------------------------------------------------------------------

/// `RLIMIT_*` value meaning "no limit" (as `RLIM_INFINITY`).
const UNLIMITED: u64 = u64::MAX;
/// `/dev/cpu_dma_latency` reads this when no process holds a constraint
/// (`PM_QOS_CPU_LATENCY_DEFAULT_VALUE`).
const NO_LATENCY_CONSTRAINT: i32 = 2_000_000_000;
/// An idle state that takes longer than this to leave adds visibly to a wake-up (µs).
const SHALLOW_IDLE_US: u64 = 10;
/// The stack std gives a spawned thread without `stack_size` (the runtime's collector and
/// watchdog), unless `RUST_MIN_STACK` says otherwise.
const STD_THREAD_STACK: u64 = 2 << 20;

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

/// State of `/dev/cpu_dma_latency`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DmaLatency {
    Absent,
    NotWritable,
    /// Writable; the constraint in force now (µs), if it could be read.
    Writable(Option<i32>),
}

/// Everything `lfrt doctor` reads, gathered once.
#[derive(Debug, Clone)]
struct Machine {
    release: String,
    version: String,
    realtime: bool,
    /// Contents of `/sys/kernel/debug/sched/preempt` (`none voluntary (full) lazy`).
    preempt_debugfs: Option<String>,
    cmdline: String,
    /// Preemption model the kernel was configured with, and where it was read.
    preempt_kconfig: Option<(&'static str, String)>,
    privilege: RtPrivilege,
    /// Hard `RLIMIT_RTPRIO`.
    rtprio_hard: u64,
    cap_ipc_lock: bool,
    /// Soft and hard `RLIMIT_MEMLOCK` in bytes ([`UNLIMITED`] for none).
    memlock: (u64, u64),
    rt_runtime_us: Option<i64>,
    rt_period_us: Option<i64>,
    timerslack_ns: Option<u64>,
    online: Vec<usize>,
    affinity: Vec<usize>,
    /// The CPUs of the process's cpuset cgroup, if readable.
    cpuset: Option<Vec<usize>>,
    isolated: Vec<usize>,
    /// `None`: the kernel has no `nohz_full` file (built without `NO_HZ_FULL`).
    nohz_full: Option<Vec<usize>>,
    /// Per online CPU, its cpufreq governor (`None`: no cpufreq for it).
    governors: Vec<(usize, Option<String>)>,
    /// SMT on, and how it was told (`smt/control`, or sibling lists).
    smt: Option<(bool, String)>,
    cpuidle_driver: Option<String>,
    /// CPU 0's idle states: name, exit latency (µs), disabled.
    idle_states: Vec<(String, u64, bool)>,
    dma_latency: DmaLatency,
    irqbalance: Option<u32>,
    /// This process's mapped size now (`VmSize`, bytes).
    vm_size: u64,
    /// Bytes of one telemetry latency histogram.
    histogram_bytes: u64,
    helper_stack: u64,
    exe: String,
    /// The process's v1 `cpu` cgroup and its `cpu.rt_runtime_us`.
    rt_cgroup: Option<(String, i64)>,
    /// Each policy a probe thread asked for, and the kernel's answer.
    probes: Vec<(Sched, Result<(), String>)>,
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

impl Machine {
    fn read(cfg: Option<&RuntimeConfig>) -> Machine {
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

/// The policies to probe: each real-time group's at its highest thread priority, or
/// `SCHED_FIFO` 1 without a configuration.
fn needs(cfg: Option<&RuntimeConfig>) -> Vec<Sched> {
    let Some(cfg) = cfg else {
        return vec![Sched::Fifo(1)];
    };
    let mut v: Vec<Sched> = cfg.groups.iter().filter_map(group_sched).collect();
    v.dedup();
    v
}

/// The policy a group's highest-priority thread asks for (`None` for `SCHED_OTHER`).
fn group_sched(g: &GroupConfig) -> Option<Sched> {
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
fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Soft and hard values of one `/proc/self/limits` row (`unlimited` = [`UNLIMITED`]).
fn limit(limits: &str, name: &str) -> Option<(u64, u64)> {
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
fn preempt_of_kconfig(text: &str) -> Option<&'static str> {
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
fn cpulist(cpus: &[usize]) -> String {
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

fn size(bytes: u64) -> String {
    match bytes {
        UNLIMITED => "unlimited".into(),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

fn sched_name(s: Sched) -> String {
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

// ---------------------------------------------------------------------------------------------
// Rules
// ---------------------------------------------------------------------------------------------

/// The report for `m`, with the configuration's needs if one is given.
fn diagnose(m: &Machine, cfg: Option<(&Path, &RuntimeConfig)>) -> Report {
    let c = cfg.map(|(_, c)| c);
    let top_rt = c.map_or(1, |c| {
        c.groups
            .iter()
            .filter_map(group_sched)
            .map(|s| match s {
                Sched::Fifo(p) | Sched::Rr(p) => p,
                Sched::Other => 0,
                // SCHED_DEADLINE needs CAP_SYS_NICE (no RLIMIT_RTPRIO grants it); the probe
                // thread finds out. Ranked as the top RT priority here.
                Sched::Deadline { .. } => 99,
            })
            .max()
            .unwrap_or(0)
    });
    let lock = c.filter(|c| c.lock_memory).map(|c| LockEstimate::new(m, c));
    let mut f = vec![kernel(m), preempt(m)];
    f.extend(rt_privilege(m, top_rt));
    f.extend(lock_privilege(m, lock.as_ref()));
    f.push(throttle(m));
    f.push(timerslack(m));
    f.push(isolcpus(m));
    f.push(nohz_full(m));
    f.push(governor(m));
    f.push(smt(m));
    f.extend(cpuidle(m));
    f.push(irqbalance(m));
    match cfg {
        None => f.push(default_need(m)),
        Some((_, c)) => {
            f.push(rt_need(m, c));
            f.push(cpus_need(m, c));
            f.push(match &lock {
                Some(e) => lock_need(m, c, e),
                None => ok(
                    "lock_memory",
                    format!(
                        "lock_memory = false: pool memory is pre-faulted, not locked (locking it would need about {})",
                        size(LockEstimate::new(m, c).total())
                    ),
                ),
            });
            f.push(busy_time(m, c));
            f.push(promotion(c));
        }
    }
    f.push(verdict(&f, cfg.map(|(p, _)| p)));
    Report { findings: f }
}

fn kernel(m: &Machine) -> Finding {
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
fn dynamic_mode(m: &Machine) -> Option<(String, String)> {
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

fn preempt(m: &Machine) -> Finding {
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

/// `sudo setcap` granting `cap` to this binary.
fn setcap(m: &Machine, cap: &str) -> String {
    format!("sudo setcap {cap}+ep {}", m.exe)
}

/// `need`: the highest real-time priority wanted (0: none).
fn rt_privilege(m: &Machine, need: u8) -> [Finding; 2] {
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
            "CAP_SYS_NICE not in the effective set; not needed: no group asks for SCHED_FIFO/RR",
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
                "RLIMIT_RTPRIO {} (not needed: no group asks for SCHED_FIFO/RR)",
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

fn lock_privilege(m: &Machine, lock: Option<&LockEstimate>) -> [Finding; 2] {
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

fn throttle(m: &Machine) -> Finding {
    match (m.rt_runtime_us, m.rt_period_us) {
        (Some(-1), _) => not_ok(
            Status::Warn,
            "rt_throttle",
            "sched_rt_runtime_us = -1 (RT throttling off): a SCHED_FIFO thread that never blocks holds its CPU for good",
            "sysctl -w kernel.sched_rt_runtime_us=950000 (or give every real-time group budget_us with on_overrun = \"demote\")",
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

fn timerslack(m: &Machine) -> Finding {
    ok(
        "timerslack",
        match m.timerslack_ns {
            Some(ns) => format!("{ns} ns for this process: it delays only time-shared threads' sleeps and timeouts; SCHED_FIFO/RR threads and timerfd expiries get none"),
            None => "unknown (/proc/self/timerslack_ns unreadable); SCHED_FIFO/RR threads and timerfd expiries get no slack anyway".into(),
        },
    )
}

fn isolcpus(m: &Machine) -> Finding {
    if m.isolated.is_empty() {
        ok("isolcpus", "none isolated: real-time threads share every CPU with other tasks (optional: isolcpus= on the command line, then cpus = [...] in the group)")
    } else {
        ok(
            "isolcpus",
            format!(
                "CPUs {} isolated from the scheduler's balancing: pin real-time groups there with cpus = [...]",
                cpulist(&m.isolated)
            ),
        )
    }
}

fn nohz_full(m: &Machine) -> Finding {
    ok(
        "nohz_full",
        match &m.nohz_full {
            None => "not available (kernel built without NO_HZ_FULL): the scheduler tick interrupts every busy CPU".to_string(),
            Some(v) if v.is_empty() => "none: the scheduler tick interrupts every busy CPU (optional: nohz_full= for CPUs running one real-time thread)".into(),
            Some(v) => format!("CPUs {}: the tick stops there while one task runs", cpulist(v)),
        },
    )
}

fn governor(m: &Machine) -> Finding {
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

fn smt(m: &Machine) -> Finding {
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

fn cpuidle(m: &Machine) -> [Finding; 2] {
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

fn irqbalance(m: &Machine) -> Finding {
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

/// Why the kernel may refuse a real-time policy despite the privilege.
fn refusal_fix(m: &Machine, need: u8) -> String {
    if m.privilege.cap_sys_nice {
        let cgroup = match &m.rt_cgroup {
            Some((path, 0)) => format!(
                "this process's cpu cgroup {path} has cpu.rt_runtime_us = 0: give it a real-time budget (echo 950000 > /sys/fs/cgroup/cpu{path}/cpu.rt_runtime_us, after its parents) or run lfrt in the root cgroup"
            ),
            _ => "check the cgroup's real-time budget (cpu.rt_runtime_us, CONFIG_RT_GROUP_SCHED) and the container's seccomp and capability policy".into(),
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

fn default_need(m: &Machine) -> Finding {
    let s = Sched::Fifo(1);
    let upto = if m.privilege.cap_sys_nice {
        99
    } else {
        m.privilege.rlimit_rtprio.min(99)
    };
    match probe_of(m, s) {
        Ok(()) => ok(
            "rt",
            format!("SCHED_FIFO granted to a probe thread (priority 1; up to {upto} allowed): lfrt groups can run as real-time lanes"),
        ),
        Err(e) => not_ok(
            Status::Fail,
            "rt",
            format!("SCHED_FIFO refused to a probe thread at priority 1 ({e}): lfrt groups would run time-shared"),
            refusal_fix(m, 1),
        ),
    }
}

fn rt_need(m: &Machine, c: &RuntimeConfig) -> Finding {
    let rt: Vec<(&GroupConfig, Sched)> = c
        .groups
        .iter()
        .filter_map(|g| Some((g, group_sched(g)?)))
        .collect();
    if rt.is_empty() {
        return ok("rt", "no group asks for SCHED_FIFO/RR: nothing to grant");
    }
    let name =
        |(g, s): &(&GroupConfig, Sched)| format!("{} ({} ×{})", g.name, sched_name(*s), g.threads);
    let refused: Vec<(&(&GroupConfig, Sched), String)> = rt
        .iter()
        .filter_map(|x| probe_of(m, x.1).err().map(|e| (x, e)))
        .collect();
    if refused.is_empty() {
        return ok(
            "rt",
            format!(
                "granted to a probe thread for every group: {}",
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
                format!("refused for {list}: {error}; rt = \"best-effort\" runs them at SCHED_OTHER, so the lanes are flattened (a busy lower group delays a higher one)"),
                fix,
            )
        },
    }
}

fn cpus_need(m: &Machine, c: &RuntimeConfig) -> Finding {
    let mut fails = Vec::new();
    let mut warns = Vec::new();
    let mut plan = Vec::new();
    for g in &c.groups {
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
                    "group {}: CPU {cpu} does not exist or is offline (online: {})",
                    g.name,
                    cpulist(&m.online)
                ));
            } else if m.cpuset.as_ref().is_some_and(|set| !set.contains(&cpu)) {
                fails.push(format!(
                    "group {}: CPU {cpu} is outside this process's cpuset (CPUs {}, a cgroup): pinning fails or loses it",
                    g.name,
                    cpulist(m.cpuset.as_deref().unwrap_or_default())
                ));
            } else if !m.affinity.contains(&cpu) {
                warns.push(format!(
                    "group {}: CPU {cpu} is outside this process's affinity (CPUs {}; taskset?): its threads pin themselves there anyway",
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
            "change the group's cpus, bring the CPU online (echo 1 > /sys/devices/system/cpu/cpuN/online) or widen the cgroup's cpuset.cpus",
        )
    } else if !warns.is_empty() {
        not_ok(
            Status::Warn,
            "cpus",
            warns.join("; "),
            "start lfrt with those CPUs in its affinity (taskset -c <cpus> lfrt ...), or change the group's cpus",
        )
    } else {
        ok("cpus", plan.join(", "))
    }
}

/// What `lock_memory = true` will lock (see the module docs).
#[derive(Debug, Clone, Copy)]
struct LockEstimate {
    /// Mapped when `Runtime::start` calls `mlockall`.
    before: u64,
    /// Mapped by `Runtime::start` and the first samples afterwards.
    after: u64,
    /// Part of the total: this process's `VmSize` now.
    baseline: u64,
    /// Part of the total: pool threads' stacks and `Context` storage.
    pool: u64,
    threads: usize,
}

impl LockEstimate {
    fn new(m: &Machine, c: &RuntimeConfig) -> LockEstimate {
        let ring = (lfrt::telemetry::RING_CAPACITY * std::mem::size_of::<lfrt::telemetry::Sample>())
            as u64;
        let threads: usize = c.groups.iter().map(|g| g.threads).sum();
        let timers: usize = c
            .groups
            .iter()
            .flat_map(|g| &g.handlers)
            .map(|h| match h {
                HandlerConfig::Timer { count, .. } => *count,
                _ => 0,
            })
            .sum();
        let pool: u64 = c
            .groups
            .iter()
            .map(|g| {
                g.threads as u64
                    * (g.stack_bytes as u64
                        + (2 + lfrt::DATAGRAM_BATCH as u64) * g.buffer_bytes as u64)
            })
            .sum();
        let histograms = 4 * m.histogram_bytes;
        let watchdog = if c.groups.iter().any(|g| g.budget_us.is_some()) {
            m.helper_stack
        } else {
            0
        };
        LockEstimate {
            before: m.vm_size
                + m.helper_stack // collector thread
                + ring // collector's batch
                + threads as u64 * ring
                + c.groups.len() as u64 * histograms,
            after: pool + watchdog + timers as u64 * histograms,
            baseline: m.vm_size,
            pool,
            threads,
        }
    }

    fn total(&self) -> u64 {
        self.before + self.after
    }
}

fn lock_need(m: &Machine, c: &RuntimeConfig, e: &LockEstimate) -> Finding {
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

/// How a group hands its events from the thread that waits to the thread that handles them,
/// and why: one line, for `lfrt check`'s plan and `lfrt doctor CONFIG`. `None` for a bound
/// group (its pool has its own hand-off).
pub fn handoff(g: &GroupConfig) -> Option<String> {
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

/// Each group's hand-off (the default needs no choice; another mode is named with its cost).
fn promotion(c: &RuntimeConfig) -> Finding {
    let lines: Vec<String> = c
        .groups
        .iter()
        .filter_map(|g| handoff(g).map(|h| format!("{}: {h}", g.name)))
        .collect();
    if lines.is_empty() {
        return ok(
            "promotion",
            "bound groups only: their pools hand off replies",
        );
    }
    ok("promotion", lines.join("; "))
}

fn busy_time(m: &Machine, c: &RuntimeConfig) -> Finding {
    let rt: Vec<&GroupConfig> = c.groups.iter().filter(|g| g.is_rt()).collect();
    if rt.is_empty() {
        return ok(
            "busy_time",
            "no real-time group: the RT throttle does not apply",
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

fn verdict(f: &[Finding], config: Option<&Path>) -> Finding {
    let topics = |s: Status| {
        f.iter()
            .filter(|x| x.status == s)
            .map(|x| x.topic)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (fails, warns) = (topics(Status::Fail), topics(Status::Warn));
    let warned = if warns.is_empty() {
        String::new()
    } else {
        format!(" (warnings: {warns})")
    };
    let what = match config {
        Some(p) => p.display().to_string(),
        None => "SCHED_FIFO (the default need, no configuration given)".into(),
    };
    let flattened = f
        .iter()
        .filter(|x| x.flattens)
        .map(|x| x.topic)
        .collect::<Vec<_>>()
        .join(", ");
    if !fails.is_empty() {
        Finding {
            status: Status::Fail,
            topic: "verdict",
            text: format!("{what} cannot run as intended here: {fails}{warned}"),
            fix: None,
            flattens: false,
        }
    } else if !flattened.is_empty() {
        Finding {
            status: Status::Warn,
            topic: "verdict",
            text: format!(
                "{what} runs here, but not as intended: its real-time lanes are flattened to \
                 time-sharing ({flattened}){warned}"
            ),
            fix: None,
            flattens: false,
        }
    } else {
        ok(
            "verdict",
            format!("{what} can run as intended here{warned}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        c.groups.push(GroupConfig::new("control", Policy::Fifo, 80));
        c.groups.push(GroupConfig::new("bulk", Policy::Fifo, 20));
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
    fn time_shared_groups_need_no_privilege() {
        let mut c = config(RtMode::Required);
        for g in &mut c.groups {
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
        // 2 groups × 2 threads × (256 KiB + 18 × 64 KiB).
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
        c.groups[0].cpus = Some(vec![3]);
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
}
