//! Scheduling policy, priority, CPU affinity and RT privilege checks.

use std::io;

/// A kernel scheduling policy and its static priority, as lfrt applies and reads them back.
///
/// # Examples
#[doc = os_example!(no_run)]
/// use lfrt::os::{read_back, set_current_sched, Sched};
/// set_current_sched(Sched::Fifo(50))?; // needs CAP_SYS_NICE or RLIMIT_RTPRIO >= 50
/// assert_eq!(read_back(0)?, Sched::Fifo(50));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sched {
    /// `SCHED_FIFO` at a priority in 1..=99.
    Fifo(u8),
    /// `SCHED_RR` at a priority in 1..=99.
    Rr(u8),
    /// `SCHED_OTHER` (time-shared, priority 0).
    Other,
    /// `SCHED_DEADLINE`: `runtime_ns` of CPU in every `period_ns`, finished within
    /// `deadline_ns` of each period's start; the kernel admits it only if the total bandwidth
    /// fits, and throttles a thread that overruns its runtime.
    Deadline {
        /// CPU time per period (ns).
        runtime_ns: u64,
        /// Relative deadline (ns), `runtime_ns ≤ deadline_ns ≤ period_ns`.
        deadline_ns: u64,
        /// Period (ns).
        period_ns: u64,
    },
}

/// `struct sched_attr` (linux/sched/types.h), the argument of `sched_setattr`/`sched_getattr`.
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// `SCHED_DEADLINE` (linux/sched.h; not in the libc crate).
const SCHED_DEADLINE: i32 = 6;

/// Sets the calling thread to `SCHED_DEADLINE` with `sched_setattr`.
///
/// The raw call on tid 0 (the caller). (thread-priority 3.1.1's deadline setter, which lfrt
/// no longer uses, passed a `pthread_t` as the kernel tid and reported every failure as -1.)
fn set_current_deadline(runtime_ns: u64, deadline_ns: u64, period_ns: u64) -> io::Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: SCHED_DEADLINE as u32,
        runtime: runtime_ns,
        deadline: deadline_ns,
        period: period_ns,
        ..SchedAttr::default()
    };
    // Pointer contract (syscall!): `attr` is a live, fully initialised sched_attr whose `size`
    // field says how much of it the kernel may read.
    syscall!(syscall(
        libc::SYS_sched_setattr,
        0,
        &attr as *const SchedAttr,
        0
    ))
    .map(drop)
}

/// `sched_getattr` of thread `tid` (0: the caller).
fn get_attr(tid: i32) -> io::Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    // Pointer contract (syscall!): the kernel writes at most the size passed into `attr`.
    syscall!(syscall(
        libc::SYS_sched_getattr,
        tid,
        &mut attr as *mut SchedAttr,
        std::mem::size_of::<SchedAttr>() as u32,
        0
    ))?;
    Ok(attr)
}

/// The one way lfrt sets a thread's policy and priority: `sched_setscheduler` on the kernel
/// thread id `tid` (0: the caller), or `sched_setattr` for `SCHED_DEADLINE` (the caller only).
///
/// It changes the policy and the static priority, never the nice value: `Sched::Other` is
/// "SCHED_OTHER, static priority 0" and keeps the thread's nice value. (thread-priority 3.1.1,
/// used here before, also called `setpriority(PRIO_PROCESS, 0, 19)` for a normal policy, and
/// `who = 0` is the *calling* thread: whoever demoted another thread ended at nice 19 itself.)
/// A kernel tid rather than a `pthread_t` also cannot dangle: a thread that has exited is
/// `ESRCH`, not undefined behaviour.
pub(crate) fn set_thread(tid: i32, s: Sched) -> io::Result<()> {
    let (policy, prio) = match s {
        Sched::Deadline {
            runtime_ns,
            deadline_ns,
            period_ns,
        } => {
            if tid != 0 && tid != super::gettid() {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "SCHED_DEADLINE is set by the thread itself",
                ));
            }
            return set_current_deadline(runtime_ns, deadline_ns, period_ns);
        }
        Sched::Fifo(p) => (libc::SCHED_FIFO, p),
        Sched::Rr(p) => (libc::SCHED_RR, p),
        Sched::Other => (libc::SCHED_OTHER, 0),
    };
    if policy != libc::SCHED_OTHER && !(1..=99).contains(&prio) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("priority {prio} out of range 1..=99"),
        ));
    }
    let param = libc::sched_param {
        sched_priority: i32::from(prio),
    };
    // Pointer contract (syscall!): `param` is a live sched_param the kernel only reads.
    syscall!(sched_setscheduler(tid, policy, &param)).map(drop)
}

/// The kernel refused a policy or priority change for lack of privilege (`EPERM`: no
/// `CAP_SYS_NICE` and a soft `RLIMIT_RTPRIO` below the priority asked for).
pub(crate) fn is_permission_denied(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EPERM)
}

/// Why the kernel refused policy `s` to the calling thread (error `e`), if a privilege would not
/// fix it; `None` when the refusal is for lack of privilege (`EPERM` with neither CAP_SYS_NICE
/// nor a high enough `RLIMIT_RTPRIO`), which CAP_SYS_NICE or the rlimit would fix.
///
/// Not privilege matters: a deadline thread whose affinity does not span the online CPUs (as
/// under `taskset`: EPERM whatever the privilege), an EPERM although the privilege is there (a
/// cgroup without real-time runtime), the deadline admission control (EBUSY), and parameters
/// the kernel does not take (EINVAL).
pub(crate) fn refusal_cause(s: Sched, e: &io::Error) -> Option<String> {
    let deadline = matches!(s, Sched::Deadline { .. });
    match e.raw_os_error() {
        Some(libc::EPERM) => {
            let (mine, online) = (available_cpus(), online_cpus());
            if deadline && online.iter().any(|c| !mine.contains(c)) {
                return Some(format!(
                    "the CPU affinity is narrowed to {mine:?} of the online CPUs {online:?} (as \
                     under taskset): the kernel admits a SCHED_DEADLINE thread only with an \
                     affinity spanning its root domain, whatever the privilege; run without \
                     the narrowed affinity"
                ));
            }
            let p = RtPrivilege::probe();
            let has = match s {
                Sched::Fifo(prio) | Sched::Rr(prio) => p.allows(prio),
                _ => p.cap_sys_nice,
            };
            has.then(|| {
                "refused although this process has the privilege: a cgroup without \
                 real-time runtime (cpu.rt_runtime_us) refuses it too"
                    .to_owned()
            })
        }
        Some(libc::EBUSY) if deadline => Some(
            "the kernel's admission control refused the reservation (EBUSY): the deadline \
             bandwidth of these CPUs is taken"
                .to_owned(),
        ),
        _ => Some(format!("the kernel does not take these parameters ({e})")),
    }
}

/// Sets the calling thread's policy and priority.
///
/// # Examples
#[doc = os_example!(no_run)]
/// use lfrt::os::{set_current_sched, Sched};
/// set_current_sched(Sched::Rr(10))?; // the calling thread only
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn set_current(s: Sched) -> io::Result<()> {
    set_thread(0, s)
}

/// Sets the calling thread's nice value (`setpriority(PRIO_PROCESS, gettid(), nice)`). Without
/// `CAP_SYS_NICE` a thread may only raise its nice value (lower its weight).
pub(crate) fn set_current_nice(nice: i32) -> io::Result<()> {
    let tid = super::gettid() as libc::id_t;
    syscall!(setpriority(libc::PRIO_PROCESS, tid, nice)).map(drop)
}

/// A thread's nice value as the kernel reports it (`getpriority`); `tid` 0 is the caller.
pub(crate) fn nice(tid: i32) -> io::Result<i32> {
    let tid = if tid == 0 { super::gettid() } else { tid } as libc::id_t;
    // getpriority may legitimately return -1: errno tells an error apart.
    // SAFETY: errno_location returns the calling thread's errno; getpriority has no
    // memory-safety preconditions.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: as above.
    let n = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
    let e = io::Error::last_os_error();
    if n == -1 && e.raw_os_error() != Some(0) {
        return Err(e);
    }
    Ok(n)
}

/// Reads a thread's policy and static priority back from the kernel (`sched_getscheduler`,
/// `sched_getparam`, and `sched_getattr` for `SCHED_DEADLINE`); `tid` 0 is the caller. A policy
/// lfrt does not use (`SCHED_BATCH`, `SCHED_IDLE`) is an `InvalidData` error naming it.
///
/// # Examples
#[doc = os_example!()]
/// use lfrt::os::{gettid, read_back, Sched};
/// let s = read_back(gettid())?; // or any thread id of this process
/// assert!(matches!(s, Sched::Other | Sched::Fifo(_) | Sched::Rr(_) | Sched::Deadline { .. }));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn read_back(tid: i32) -> io::Result<Sched> {
    let policy = syscall!(sched_getscheduler(tid))? & !libc::SCHED_RESET_ON_FORK;
    let mut param = libc::sched_param { sched_priority: 0 };
    syscall!(sched_getparam(tid, &mut param))?;
    let prio = param.sched_priority as u8;
    match policy {
        libc::SCHED_FIFO => Ok(Sched::Fifo(prio)),
        libc::SCHED_RR => Ok(Sched::Rr(prio)),
        libc::SCHED_OTHER => Ok(Sched::Other),
        SCHED_DEADLINE => {
            let a = get_attr(tid)?;
            Ok(Sched::Deadline {
                runtime_ns: a.runtime,
                deadline_ns: a.deadline,
                period_ns: a.period,
            })
        }
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("thread {tid} runs under scheduling policy {other}, which lfrt does not use"),
        )),
    }
}

/// The *effective* priority of a thread as the kernel schedules it, including priority
/// inheritance boosts: `/proc/self/task/<tid>/stat` field 18 (`prio`), which is
/// `-1 - rt_priority` for RT threads. Returns the RT priority (0 for SCHED_OTHER).
///
/// # Examples
#[doc = os_example!()]
/// // 0 for a SCHED_OTHER thread; a PI-boosted thread shows its waiter's priority
/// let prio = lfrt::os::effective_rt_priority(lfrt::os::gettid())?;
/// assert!((0..=99).contains(&prio));
/// # Ok::<(), std::io::Error>(())
/// ```
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
///
/// # Examples
#[doc = os_example!()]
/// let faults = lfrt::os::minor_faults(lfrt::os::gettid())?;
/// println!("{faults} minor faults so far");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn minor_faults(tid: i32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))?;
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    rest.split_whitespace()
        .nth(7)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other("malformed /proc stat"))
}

/// The one way lfrt sets affinity: pins the calling thread to `cpus` (a mask of several CPUs is
/// allowed) with `sched_setaffinity`.
///
/// # Examples
#[doc = os_example!()]
/// let cpus = lfrt::os::available_cpus();
/// lfrt::os::set_current_affinity(&cpus[..1])?; // pin to the first usable CPU
/// assert_eq!(lfrt::os::affinity(0)?, cpus[..1]);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn set_current_affinity(cpus: &[usize]) -> io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        set.set(c).map_err(io::Error::from)?;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(io::Error::from)
}

/// CPUs a thread may run on, read back from the kernel.
///
/// # Examples
#[doc = os_example!()]
/// let mine = lfrt::os::affinity(lfrt::os::gettid())?;
/// assert!(!mine.is_empty());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn affinity(tid: i32) -> io::Result<Vec<usize>> {
    let set =
        nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(tid)).map_err(io::Error::from)?;
    Ok((0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// CPUs the calling thread may run on now (its affinity mask).
///
/// # Examples
#[doc = os_example!()]
/// let usable = lfrt::os::available_cpus();
/// assert!(usable.iter().all(|c| lfrt::os::online_cpus().contains(c)));
/// ```
pub fn available_cpus() -> Vec<usize> {
    affinity(0).unwrap_or_default()
}

/// CPUs that exist and are online (`/sys/devices/system/cpu/online`, e.g. `0-3,6`), whatever
/// the calling thread's own affinity. Falls back to [`available_cpus`].
///
/// # Examples
#[doc = os_example!()]
/// println!("online CPUs: {:?}", lfrt::os::online_cpus());
/// ```
pub fn online_cpus() -> Vec<usize> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse_cpu_list(&s))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(available_cpus)
}

/// A CPU list as the kernel writes it (`0-3,6`; empty for none, as `isolcpus` may be), or
/// `None` if it is not one.
///
/// # Examples
#[doc = os_example!()]
/// assert_eq!(lfrt::os::parse_cpu_list("0-3,6\n"), Some(vec![0, 1, 2, 3, 6]));
/// assert_eq!(lfrt::os::parse_cpu_list(""), Some(vec![]));
/// assert_eq!(lfrt::os::parse_cpu_list("0-x"), None);
/// ```
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => v.push(part.parse().ok()?),
        }
    }
    Some(v)
}

/// What the kernel will check before granting an RT policy.
///
/// # Examples
#[doc = os_example!()]
/// let p = lfrt::os::RtPrivilege::probe();
/// if !p.allows(80) {
///     eprintln!("SCHED_FIFO 80 will be refused: grant CAP_SYS_NICE or raise RLIMIT_RTPRIO");
/// }
/// ```
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
        let cap_sys_nice = super::has_capability(super::CAP_SYS_NICE);
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
///
/// # Examples
#[doc = os_example!()]
/// assert!(lfrt::os::current_cpu() >= 0);
/// ```
pub fn current_cpu() -> i32 {
    // SAFETY: sched_getcpu takes no arguments and has no preconditions.
    unsafe { libc::sched_getcpu() }
}

/// The RT bandwidth limit (`/proc/sys/kernel/sched_rt_runtime_us` over `sched_rt_period_us`)
/// as a fraction of one CPU; `None` if throttling is off (`-1`) or unreadable. SCHED_DEADLINE
/// admission keeps the total deadline bandwidth of a root domain under this × its CPUs.
pub(crate) fn rt_bandwidth() -> Option<f64> {
    let read = |f: &str| -> Option<i64> {
        std::fs::read_to_string(format!("/proc/sys/kernel/{f}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let (runtime, period) = (read("sched_rt_runtime_us")?, read("sched_rt_period_us")?);
    (runtime >= 0 && period > 0).then(|| runtime as f64 / period as f64)
}
