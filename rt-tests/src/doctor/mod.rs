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
//! | `rt` | a probe thread per real-time lane (or one at `SCHED_FIFO` 1 without a configuration) sets the lane's policy at its highest thread priority, reads it back and exits at once; `cpu.rt_runtime_us` of the process's v1 `cpu` cgroup explains a refusal despite `CAP_SYS_NICE` |
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
//!   ([`lfrt::telemetry::RING_CAPACITY`] samples) and four latency histograms per lane;
//! * after it (`Runtime::start`): per pool thread `stack_bytes` plus `(2 + DATAGRAM_BATCH) ×
//!   buffer_bytes` (buffer, scratch buffer and the datagram slots of its `Context`, i.e. 18 ×
//!   `buffer_bytes`), the watchdog's stack if a lane has `budget_us`, and four histograms per
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
//!
//! # Layout
//! The checks are data, facts in and findings out; the text is a front-end over them:
//!
//! * `machine.rs`: the facts, everything read from the kernel and this process at once (a
//!   `Machine`), and how a fact is written in a finding;
//! * `diagnose.rs`: which checks make a report, in which order, and its verdict line;
//! * `host.rs`: the checks of the machine alone: kernel, privileges, RT throttle, CPU tuning;
//! * `needs.rs`: the checks of what the configuration (or the default need) asks of the
//!   machine: real-time policies, CPUs, locked memory, busy time, and [`handoff`];
//! * `report.rs`: a finding, the [`Report`] they make and its [`Verdict`];
//! * `text.rs`: the report as `lfrt doctor` prints it.

mod diagnose;
mod host;
mod machine;
mod needs;
mod report;
#[cfg(test)]
mod tests;
mod text;

pub use needs::handoff;
pub use report::{Report, Verdict};

use diagnose::diagnose;
use machine::Machine;
use std::path::Path;

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
